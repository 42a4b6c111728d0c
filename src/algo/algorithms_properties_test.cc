// What every algorithm of algo/algorithms.h does alike: its capacity at once, costs above it, equal
// to it and of zero, zero requests, denials that consume nothing, a long idle back to the initial
// state, windows of a week, a millisecond and a microsecond; and on random traces, remaining,
// retry_after_us and reset_after_us exact to the microsecond.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "algo/algorithms.h"
#include "algo/algorithms_testing.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"

namespace sluice::algo {
namespace {

using test::AlignDown;
using test::Allow;
using test::Decide;
using test::Deny;
using test::EveryAlgorithm;
using test::IsFresh;
using test::kAllAlgorithms;
using test::KeyState;
using test::kMinute;
using test::kMs;
using test::kNever;
using test::kSecond;
using test::kT0;
using test::kWeek;
using test::SameState;
using testing::MakeLimit;
using testing::WithCapacity;

// ============================================================================================
// Every algorithm
// ============================================================================================

INSTANTIATE_TEST_SUITE_P(All, EveryAlgorithm, ::testing::ValuesIn(kAllAlgorithms),
                         [](const ::testing::TestParamInfo<Algorithm>& info) {
                           return std::string(AlgorithmName(info.param));
                         });

TEST_P(EveryAlgorithm, AdmitsCapacityAtOnceThenDenies) {
  const Limit limit = Standard();
  ASSERT_TRUE(ValidateLimit(limit).ok());
  ASSERT_EQ(limit.Capacity(), 5u);
  KeyState s;
  for (int i = 1; i <= 5; ++i) {
    const Decision d = Decide(s, kT0, limit, 1);
    EXPECT_TRUE(d.allowed) << "request #" << i;
    EXPECT_EQ(d.remaining, 5 - i) << "request #" << i;
  }
  const Decision denied = Decide(s, kT0, limit, 1);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.remaining, 0);
  EXPECT_GE(denied.retry_after_us, 1);
}

TEST_P(EveryAlgorithm, CostAboveCapacityIsDeniedForeverAndConsumesNothing) {
  const Limit limit = Standard();
  KeyState s;
  Decision d = Decide(s, kT0, limit, 6);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, kNever);
  EXPECT_EQ(d.remaining, 5);
  EXPECT_EQ(d.delay_us, 0);
  EXPECT_TRUE(IsFresh(s, limit, kT0));
  // Also with a partly used state, and for absurd costs.
  ASSERT_TRUE(Decide(s, kT0, limit, 2).allowed);
  const KeyState before = s;
  for (const uint64_t cost : {uint64_t{6}, uint64_t{1} << 32, ~uint64_t{0}}) {
    d = Decide(s, kT0, limit, cost);
    EXPECT_FALSE(d.allowed) << cost;
    EXPECT_EQ(d.retry_after_us, kNever) << cost;
    EXPECT_EQ(d.remaining, 3) << cost;
    EXPECT_TRUE(SameState(s, before, limit, kT0)) << cost;
  }
}

TEST_P(EveryAlgorithm, CostEqualToCapacityIsAdmittedFromTheInitialState) {
  const Limit limit = Standard();
  KeyState s;
  const Decision d = Decide(s, kT0, limit, 5);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
}

TEST_P(EveryAlgorithm, CostZeroIsAPeekThatConsumesNothing) {
  const Limit limit = Standard();
  KeyState s;
  Decision d = Decide(s, kT0, limit, 0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 5);
  EXPECT_EQ(d.retry_after_us, 0);
  EXPECT_TRUE(IsFresh(s, limit, kT0));

  ASSERT_TRUE(Decide(s, kT0, limit, 2).allowed);
  KeyState before = s;
  d = Decide(s, kT0, limit, 0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 3);
  EXPECT_TRUE(SameState(s, before, limit, kT0));

  ASSERT_TRUE(Decide(s, kT0, limit, 3).allowed);
  before = s;
  d = Decide(s, kT0, limit, 0);
  EXPECT_TRUE(d.allowed);  // a peek at an exhausted key still answers
  EXPECT_EQ(d.remaining, 0);
  EXPECT_TRUE(SameState(s, before, limit, kT0));
}

TEST_P(EveryAlgorithm, ZeroRequestsDeniesEverythingForever) {
  for (const std::optional<uint64_t> burst :
       {std::optional<uint64_t>(), std::optional<uint64_t>(5)}) {
    const Limit limit = MakeLimit(algorithm(), 0, kSecond, burst);
    ASSERT_TRUE(ValidateLimit(limit).ok());
    KeyState s;
    for (const int64_t t : {kT0, kT0 + 1, kT0 + kWeek, kMaxTimeUs}) {
      for (const uint64_t cost : {uint64_t{1}, uint64_t{5}}) {
        const Decision d = Decide(s, t, limit, cost);
        EXPECT_FALSE(d.allowed) << "t=" << t << " cost=" << cost;
        EXPECT_EQ(d.retry_after_us, kNever) << "t=" << t << " cost=" << cost;
        EXPECT_EQ(d.remaining, 0);
        EXPECT_TRUE(IsFresh(s, limit, t));
      }
    }
  }
}

TEST_P(EveryAlgorithm, DeniedRequestsConsumeNothing) {
  const Limit limit = Standard();
  KeyState with_denials, without;
  ASSERT_TRUE(Decide(with_denials, kT0, limit, 5).allowed);
  ASSERT_TRUE(Decide(without, kT0, limit, 5).allowed);
  // Hammer the exhausted key; each denial leaves the state as it was.
  for (int i = 0; i < 1000; ++i) {
    const int64_t t = kT0 + i;
    const KeyState before = with_denials;
    const Decision d = Decide(with_denials, t, limit, 1 + i % 5);
    ASSERT_FALSE(d.allowed) << "at +" << i << " µs";
    ASSERT_TRUE(SameState(with_denials, before, limit, t)) << "at +" << i << " µs";
  }
  // Later the key behaves exactly like one that never saw the denied requests.
  for (int64_t t = kT0 + 1000; t < kT0 + 3 * kSecond; t += 50 * kMs) {
    EXPECT_EQ(Decide(with_denials, t, limit, 2), Decide(without, t, limit, 2)) << t - kT0;
  }
}

TEST_P(EveryAlgorithm, LongIdleReturnsToTheInitialState) {
  const Limit limit = Standard();
  KeyState s;
  ASSERT_TRUE(Decide(s, kT0, limit, 3).allowed);
  const Decision last = Decide(s, kT0 + 300 * kMs, limit, 2);
  ASSERT_TRUE(last.allowed);
  const int64_t idle_at = kT0 + 300 * kMs + last.reset_after_us;
  EXPECT_FALSE(s.IsIdle(limit, idle_at - 1));
  EXPECT_TRUE(s.IsIdle(limit, idle_at));
  for (const int64_t t : {idle_at, idle_at + kSecond, idle_at + kWeek}) {
    KeyState used = s, fresh;
    EXPECT_EQ(Decide(used, t, limit, 5), Decide(fresh, t, limit, 5)) << "t=" << t;
    EXPECT_TRUE(SameState(used, fresh, limit, t));
  }
}

TEST_P(EveryAlgorithm, HugeWindowOfOneWeek) {
  const Limit limit = WithCapacity(algorithm(), 100, kWeek, 100);
  ASSERT_TRUE(ValidateLimit(limit).ok());
  const int64_t start = AlignDown(kT0, kWeek);  // a Thursday, as epoch weeks go
  KeyState s;
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(Decide(s, start, limit, 1).allowed);
  const Decision d = Decide(s, start, limit, 1);
  EXPECT_FALSE(d.allowed);
  switch (algorithm()) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      EXPECT_EQ(d, Deny(0, kWeek / 100, kWeek));  // one emission interval: 6048 s
      break;
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingLog:
      EXPECT_EQ(d, Deny(0, kWeek, kWeek));
      break;
    case Algorithm::kSlidingWindow:  // estimate 100 until the window ends, then falls
      EXPECT_EQ(d, Deny(0, kWeek + kWeek / 100, 2 * kWeek));
      break;
  }
  EXPECT_TRUE(s.IsIdle(limit, start + d.reset_after_us));
  KeyState copy = s;
  EXPECT_TRUE(Decide(copy, start + d.retry_after_us, limit, 1).allowed);
  EXPECT_FALSE(Decide(s, start + d.retry_after_us - 1, limit, 1).allowed);
}

TEST_P(EveryAlgorithm, TinyWindowOfOneMicrosecond) {
  const Limit limit = WithCapacity(algorithm(), 1, 1, 1);
  ASSERT_TRUE(ValidateLimit(limit).ok());
  KeyState s;
  // sliding_window weighs the previous 1 µs window fully at e = 0 (e is always 0), so it admits
  // one request every 2 µs; the others one every µs.
  const int64_t period = algorithm() == Algorithm::kSlidingWindow ? 2 : 1;
  for (int64_t t = kT0; t < kT0 + 1000; t += period) {
    ASSERT_EQ(Decide(s, t, limit, 1), Allow(0, period)) << t - kT0;
    ASSERT_EQ(Decide(s, t, limit, 1), Deny(0, period, period)) << t - kT0;
    if (period == 2) {
      ASSERT_EQ(Decide(s, t + 1, limit, 1), Deny(0, 1, 1)) << t - kT0;
    }
  }
}

TEST_P(EveryAlgorithm, TinyWindowOfOneMillisecond) {
  const Limit limit = WithCapacity(algorithm(), 3, kMs, 3);
  ASSERT_TRUE(ValidateLimit(limit).ok());
  KeyState s;
  const int64_t start = AlignDown(kT0, kMs);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Decide(s, start, limit, 1).allowed);
  const Decision d = Decide(s, start, limit, 1);
  switch (algorithm()) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      EXPECT_EQ(d, Deny(0, 334, kMs));  // 1000/3 = 333.33 µs, rounded up
      break;
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingLog:
      EXPECT_EQ(d, Deny(0, kMs, kMs));
      break;
    case Algorithm::kSlidingWindow:
      EXPECT_EQ(d, Deny(0, kMs + 334, 2 * kMs));
      break;
  }
}

// --- Randomized invariants ------------------------------------------------------------------

struct TraceLimit {
  uint64_t requests;
  int64_t window_us;
  uint64_t capacity;
};

// A mix of ordinary, non-integral, tiny and extreme limits.
constexpr TraceLimit kTraceLimits[] = {
    {5, kSecond, 5},      {7, kMinute, 7},
    {7, kMinute, 1},      {13, kSecond, 4},
    {3, 10 * kSecond, 3}, {1, 1, 1},
    {3, kMs, 3},          {100, kWeek, 150},
    {10, 999983, 25},     {kMaxRequests, kMaxWindowUs, kMaxBurst},
    {1, kMaxWindowUs, 1}, {kMaxRequests, 1, 1},
};

// Runs a random trace and checks on every request: remaining within [0, capacity]; a denial
// consumes nothing, its retry_after_us is kNever exactly when the cost exceeds the capacity and
// otherwise >= 1, the request is admitted at now + retry_after_us and not one µs earlier; the
// state is idle at now + reset_after_us and not one µs earlier.
void CheckRandomTrace(Algorithm algorithm, const TraceLimit& tl, int64_t start_us, uint64_t seed) {
  const Limit limit = WithCapacity(algorithm, tl.requests, tl.window_us, tl.capacity);
  ASSERT_TRUE(ValidateLimit(limit).ok()) << DescribeLimit(limit);
  const uint64_t capacity = limit.Capacity();
  const int64_t interval =
      std::max<int64_t>(1, tl.window_us / static_cast<int64_t>(std::min(tl.requests, capacity)));
  std::mt19937_64 rng(seed);
  const auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  KeyState s;
  int64_t now = start_us;
  for (int step = 0; step < 3000; ++step) {
    const std::string where =
        fmt::format("{} seed {} step {} t={} ", DescribeLimit(limit), seed, step, now);
    const uint64_t kind = uniform(0, 99);
    const uint64_t cost = kind < 70 ? 1 : kind < 95 ? uniform(1, capacity) : capacity + 1;
    const bool was_idle = s.IsIdle(limit, now);
    const KeyState before = s;
    const Decision d = Decide(s, now, limit, cost);
    const std::string what = where + fmt::format("cost {}: ", cost) + ::testing::PrintToString(d);

    ASSERT_GE(d.remaining, 0) << what;
    ASSERT_LE(static_cast<uint64_t>(d.remaining), capacity) << what;
    ASSERT_GE(d.reset_after_us, 0) << what;
    if (limit.algorithm != Algorithm::kLeakyBucket) {
      ASSERT_EQ(d.delay_us, 0) << what;
    }
    if (d.allowed) {
      ASSERT_EQ(d.retry_after_us, 0) << what;
      ASSERT_LE(cost, capacity) << what;
    } else {
      ASSERT_EQ(d.delay_us, 0) << what;
      ASSERT_TRUE(SameState(s, before, limit, now)) << what;
      if (cost > capacity) {
        ASSERT_EQ(d.retry_after_us, kNever) << what;
      } else {
        ASSERT_GE(d.retry_after_us, 1) << what;
        if (d.retry_after_us <= kMaxTimeUs - now) {
          KeyState at = s, just_before = s;
          ASSERT_TRUE(Decide(at, now + d.retry_after_us, limit, cost).allowed) << what;
          ASSERT_FALSE(Decide(just_before, now + d.retry_after_us - 1, limit, cost).allowed)
              << what;
        }
      }
    }
    if (d.reset_after_us <= kMaxTimeUs - now) {
      ASSERT_TRUE(s.IsIdle(limit, now + d.reset_after_us)) << what;
      if (d.reset_after_us > 0 && !(was_idle && s.IsIdle(limit, now))) {
        ASSERT_FALSE(s.IsIdle(limit, now + d.reset_after_us - 1)) << what;
      }
      if (step % 16 == 0) {  // idle means: behaves like a key never seen
        KeyState used = s, fresh;
        const int64_t t = now + d.reset_after_us;
        ASSERT_EQ(Decide(used, t, limit, 1), Decide(fresh, t, limit, 1)) << what;
      }
    }

    // Next arrival: often at once, often about one emission interval, sometimes long after.
    const uint64_t gap_kind = uniform(0, 99);
    const uint64_t span = static_cast<uint64_t>(interval);
    int64_t gap;
    if (gap_kind < 30) {
      gap = 0;
    } else if (gap_kind < 40) {
      gap = static_cast<int64_t>(uniform(1, 3));
    } else if (gap_kind < 85) {
      gap = static_cast<int64_t>(uniform(0, 2 * std::min<uint64_t>(span, uint64_t{1} << 50)));
    } else if (gap_kind < 95) {
      gap = static_cast<int64_t>(uniform(0, 3 * static_cast<uint64_t>(tl.window_us)));
    } else {
      gap = static_cast<int64_t>(uniform(0, 20 * static_cast<uint64_t>(tl.window_us)));
    }
    now = gap > kMaxTimeUs - now ? kMaxTimeUs : now + gap;
  }
}

// Pins "exact smallest wait" for every algorithm: on every denial of a random trace, the same
// request is admitted at exactly now + retry_after_us and denied 1 µs earlier (plus the other
// invariants checked by CheckRandomTrace).
TEST_P(EveryAlgorithm, RetryAfterIsTheExactSmallestWaitOnRandomTraces) {
  uint64_t seed = 1;
  for (const TraceLimit& tl : kTraceLimits) {
    CheckRandomTrace(algorithm(), tl, kT0, seed++);
    if (HasFatalFailure()) return;
    // Near the end of time; the trace clamps at kMaxTimeUs and keeps going there.
    CheckRandomTrace(algorithm(), tl, kMaxTimeUs - 200 * tl.window_us, seed++);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace sluice::algo
