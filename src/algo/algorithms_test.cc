// Tests for the pure algorithms of algo/algorithms.h: the worked examples of issue #3 and of
// docs/algorithms.md, "Worked examples" (cited below by heading), boundaries, costs, idle state
// and arithmetic near the limits.
//
// Times are µs. Most examples start at kT0 = 1 700 000 000 s after the epoch, which is a whole
// number of seconds (but not of minutes: window tests align their start explicitly).

#include "algo/algorithms.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"

namespace sluice {

// Readable failure messages.
void PrintTo(const Decision& d, std::ostream* os) {
  *os << fmt::format("{{{} remaining={} retry_after_us={} reset_after_us={} delay_us={}}}",
                     d.allowed ? "allow" : "deny", d.remaining, d.retry_after_us, d.reset_after_us,
                     d.delay_us);
}
void PrintTo(Algorithm a, std::ostream* os) { *os << AlgorithmName(a); }

namespace algo {
namespace {

constexpr int64_t kMs = 1000;
constexpr int64_t kSecond = 1000 * kMs;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int64_t kWeek = int64_t{7} * 24 * 60 * kMinute;
constexpr int64_t kT0 = int64_t{1700000000} * kSecond;
constexpr int64_t kNever = Decision::kNever;

__extension__ using Int128 = __int128;

using testing::MakeLimit;
using testing::WithCapacity;

Decision Allow(int64_t remaining, int64_t reset_after_us, int64_t delay_us = 0) {
  return Decision{.allowed = true,
                  .remaining = remaining,
                  .retry_after_us = 0,
                  .reset_after_us = reset_after_us,
                  .delay_us = delay_us};
}

Decision Deny(int64_t remaining, int64_t retry_after_us, int64_t reset_after_us) {
  return Decision{.allowed = false,
                  .remaining = remaining,
                  .retry_after_us = retry_after_us,
                  .reset_after_us = reset_after_us,
                  .delay_us = 0};
}

int64_t AlignDown(int64_t t, int64_t window_us) { return t - t % window_us; }

// The state of one key, whatever the algorithm.
struct KeyState {
  CompactState compact;
  LogState log;

  bool IsIdle(const Limit& limit, int64_t now_us) const {
    return limit.algorithm == Algorithm::kSlidingLog ? log.IsIdle(now_us) : compact.IsIdle(now_us);
  }
};

Decision Decide(KeyState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  if (limit.algorithm == Algorithm::kSlidingLog) {
    return DecideSlidingLog(state.log, now_us, limit, cost);
  }
  return DecideCompact(state.compact, now_us, limit, cost);
}

// The log entries that still count at now_us, as (time, cost).
std::vector<std::pair<int64_t, uint64_t>> CountingEntries(const LogState& log, int64_t now_us,
                                                          int64_t window_us) {
  std::vector<std::pair<int64_t, uint64_t>> live;
  for (size_t i = log.head; i < log.entries.size(); ++i) {
    if (now_us - log.entries[i].at_us < window_us) {
      live.emplace_back(log.entries[i].at_us, log.entries[i].cost);
    }
  }
  return live;
}

// Whether two states behave the same from now_us on. The compact states must be bit-identical
// (they change only when a request is admitted); the log may have forgotten expired entries.
::testing::AssertionResult SameState(const KeyState& a, const KeyState& b, const Limit& limit,
                                     int64_t now_us) {
  if (limit.algorithm == Algorithm::kSlidingLog) {
    if (CountingEntries(a.log, now_us, limit.window_us) !=
        CountingEntries(b.log, now_us, limit.window_us)) {
      return ::testing::AssertionFailure() << "the log entries differ";
    }
    return ::testing::AssertionSuccess();
  }
  if (a.compact == b.compact) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << fmt::format("states differ: {{{}, {}}} vs {{{}, {}}}", a.compact.idle_at_us,
                        a.compact.aux, b.compact.idle_at_us, b.compact.aux);
}

bool IsFresh(const KeyState& s, const Limit& limit, int64_t now_us) {
  return limit.algorithm == Algorithm::kSlidingLog
             ? CountingEntries(s.log, now_us, limit.window_us).empty()
             : s.compact == CompactState{};
}

// ============================================================================================
// token_bucket
// ============================================================================================

// "Token bucket: capacity 5, 1 per second": B = 5, r = 1/s, full at t = 0.
TEST(TokenBucket, WorkedExampleFromAlgorithmsDoc) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1, kSecond, 5);
  KeyState s;
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(5 - i, i * kSecond)) << "request #" << i;
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, kSecond, 5 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 500 * kMs, limit, 1), Deny(0, 500 * kMs, 4500 * kMs));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 1), Allow(0, 5 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 4 * kSecond, limit, 2), Allow(1, 4 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 4 * kSecond, limit, 6), Deny(1, kNever, 4 * kSecond));
}

TEST(TokenBucket, GcraAliasIsTheSameAlgorithm) {
  const Limit limit = MakeLimit(ParseAlgorithm("gcra").value(), 1, kSecond, 5);
  KeyState s;
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(Decide(s, kT0, limit, 1).allowed);
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, kSecond, 5 * kSecond));
}

TEST(TokenBucket, NewKeyStartsFullWithCapacityN) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 10, kSecond);
  KeyState s;
  for (int i = 1; i <= 10; ++i) {
    EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(10 - i, int64_t{i} * 100 * kMs)) << "request #" << i;
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, 100 * kMs, kSecond));
}

TEST(TokenBucket, RefillIsCappedAtCapacity) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 3);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 3), Allow(0, 300 * kMs));
  // An hour later the bucket holds 3 tokens, not 36000.
  const int64_t later = kT0 + 3600 * kSecond;
  EXPECT_EQ(Decide(s, later, limit, 3), Allow(0, 300 * kMs));
  EXPECT_EQ(Decide(s, later, limit, 1), Deny(0, 100 * kMs, 300 * kMs));
}

TEST(TokenBucket, RemainingIsTheFloorOfTheTokens) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1, kSecond, 5);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 5), Allow(0, 5 * kSecond));
  // 1.999999 tokens: remaining 1, a cost of 2 waits 1 µs.
  EXPECT_EQ(Decide(s, kT0 + 2 * kSecond - 1, limit, 2), Deny(1, 1, 3 * kSecond + 1));
  EXPECT_EQ(Decide(s, kT0 + 2 * kSecond, limit, 2), Allow(0, 5 * kSecond));
}

TEST(TokenBucket, CostAboveOneWaitsForEnoughTokens) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 4, kSecond, 8);  // T = 250 ms
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 7), Allow(1, 1750 * kMs));
  // 1 token left; a cost of 4 needs 3 more: 750 ms.
  EXPECT_EQ(Decide(s, kT0, limit, 4), Deny(1, 750 * kMs, 1750 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 750 * kMs - 1, limit, 4).allowed, false);
  EXPECT_EQ(Decide(s, kT0 + 750 * kMs, limit, 4), Allow(0, 2 * kSecond));
  // A cost equal to the capacity is admitted only from a full bucket.
  EXPECT_EQ(Decide(s, kT0 + 750 * kMs, limit, 8), Deny(0, 2 * kSecond, 2 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 2750 * kMs, limit, 8), Allow(0, 2 * kSecond));
}

// ============================================================================================
// leaky_bucket
// ============================================================================================

// Issue #3: N = 10/s, B = 5, seven requests at t = 0.
TEST(LeakyBucket, WorkedExampleFromIssue) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 5);
  KeyState s;
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(Decide(s, kT0, limit, 1),
              Allow(5 - i, (int64_t{i} + 1) * 100 * kMs, int64_t{i} * 100 * kMs))
        << "request #" << i + 1;
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, 100 * kMs, 600 * kMs));
}

// "Leaky bucket: nginx `limit_req`", `rate=1r/s burst=5` x7 (without nodelay).
TEST(LeakyBucket, NginxBurstDelaysEveryExcessRequestToItsSlot) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 1, kSecond, 5);
  KeyState s;
  for (int i = 0; i < 6; ++i) {
    const Decision d = Decide(s, kT0, limit, 1);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_us, i * kSecond);
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, kSecond, 6 * kSecond));
}

// "Leaky bucket: nginx `limit_req`", `rate=10r/s` (burst 0) at t = 0, 50, 100 ms.
TEST(LeakyBucket, NginxWithoutBurstAdmitsOnePerEmissionInterval) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(0, 100 * kMs, 0));
  EXPECT_EQ(Decide(s, kT0 + 50 * kMs, limit, 1), Deny(0, 50 * kMs, 50 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs, limit, 1), Allow(0, 100 * kMs, 0));
}

TEST(LeakyBucket, CapacityIsQueueDepthPlusOne) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 5);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 7), Deny(6, kNever, 0));
  EXPECT_EQ(Decide(s, kT0, limit, 6), Allow(0, 600 * kMs, 0));
  // The request of cost 6 occupies slots 0..500 ms, so a cost of 1 waits for slot 600 ms:
  // admitted once its wait (600 ms - elapsed) is at most B*T = 500 ms.
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs - 1, limit, 1), Deny(0, 1, 500 * kMs + 1));
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs, limit, 1), Allow(0, 600 * kMs, 500 * kMs));
}

TEST(LeakyBucket, CostAboveOneIsDelayedByTheQueueAheadOfIt) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 5);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 2), Allow(4, 200 * kMs, 0));
  EXPECT_EQ(Decide(s, kT0, limit, 3), Allow(1, 500 * kMs, 200 * kMs));
  // wait 500 ms + (2 - 1) * 100 ms > 500 ms: denied, admitted after 100 ms.
  EXPECT_EQ(Decide(s, kT0, limit, 2), Deny(1, 100 * kMs, 500 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs, limit, 2), Allow(0, 600 * kMs, 400 * kMs));
}

TEST(LeakyBucket, DelayIsZeroOnDenyAndOnAnEmptyQueue) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 1);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1).delay_us, 0);
  EXPECT_EQ(Decide(s, kT0, limit, 1).delay_us, 100 * kMs);
  const Decision denied = Decide(s, kT0, limit, 1);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.delay_us, 0);
  // After the queue drained, no delay again.
  EXPECT_EQ(Decide(s, kT0 + 200 * kMs, limit, 1), Allow(1, 100 * kMs, 0));
}

// ============================================================================================
// fixed_window
// ============================================================================================

TEST(FixedWindow, WindowsAreAlignedToTheEpoch) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100, kMinute);
  // "Fixed window: 100 per minute": t = 1700000000 s → start 1699999980 s, reset after 40 s.
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(99, 40 * kSecond));
  EXPECT_EQ(s.compact.idle_at_us, int64_t{1700000040} * kSecond);
}

TEST(FixedWindow, AdmitsNPerWindowThenDeniesUntilTheWindowEnd) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100, kMinute);
  const int64_t start = AlignDown(kT0, kMinute);
  KeyState s;
  for (int i = 1; i <= 100; ++i) {
    EXPECT_EQ(Decide(s, start + 20 * kSecond, limit, 1), Allow(100 - i, 40 * kSecond));
  }
  EXPECT_EQ(Decide(s, start + 20 * kSecond, limit, 1), Deny(0, 40 * kSecond, 40 * kSecond));
  EXPECT_EQ(Decide(s, start + kMinute - 1, limit, 1), Deny(0, 1, 1));
}

TEST(FixedWindow, CountingRestartsExactlyAtTheWindowEnd) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 3, kMinute);
  const int64_t end = AlignDown(kT0, kMinute) + kMinute;
  KeyState s;
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Decide(s, end - 1, limit, 1), Allow(3 - i, 1));
  EXPECT_EQ(Decide(s, end - 1, limit, 1), Deny(0, 1, 1));
  EXPECT_TRUE(s.IsIdle(limit, end));
  // "Fixed window: 100 per minute", the boundary burst: 2N admitted within 2 µs.
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Decide(s, end, limit, 1), Allow(3 - i, kMinute));
  EXPECT_EQ(Decide(s, end, limit, 1), Deny(0, kMinute, kMinute));
}

TEST(FixedWindow, CostAboveOneMustFitInWhatIsLeft) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 10, kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs, limit, 7), Allow(3, 900 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 200 * kMs, limit, 4), Deny(3, 800 * kMs, 800 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 200 * kMs, limit, 3), Allow(0, 800 * kMs));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 10), Allow(0, kSecond));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 11), Deny(0, kNever, kSecond));
}

// ============================================================================================
// sliding_log
// ============================================================================================

// "Sliding log: 3 per 10 s": L = 3, W = 10 s.
TEST(SlidingLog, WorkedExampleFromAlgorithmsDoc) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 3, 10 * kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(2, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 1), Allow(1, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 2 * kSecond, limit, 1), Allow(0, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 5 * kSecond, limit, 1), Deny(0, 5 * kSecond, 7 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 10500 * kMs, limit, 1), Allow(0, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 11 * kSecond, limit, 1), Allow(0, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 11500 * kMs, limit, 1), Deny(0, 500 * kMs, 9500 * kMs));
}

TEST(SlidingLog, EntryStopsCountingExactlyOneWindowAfterIt) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 1, 10 * kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(0, 10 * kSecond));
  // t - s == W - 1 still counts; t - s == W does not.
  EXPECT_EQ(Decide(s, kT0 + 10 * kSecond - 1, limit, 1), Deny(0, 1, 1));
  EXPECT_TRUE(s.IsIdle(limit, kT0 + 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 10 * kSecond, limit, 1), Allow(0, 10 * kSecond));
}

TEST(SlidingLog, RetryWaitsUntilEnoughOfTheOldestEntriesStopCounting) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 10, 10 * kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 2), Allow(8, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 3), Allow(5, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 2 * kSecond, limit, 4), Allow(1, 10 * kSecond));
  // Sum 9 at 3 s. Cost 3 waits for the entry at 0 s to stop counting (at 10 s), cost 6 also
  // for the one at 1 s (at 11 s), cost 10 for all three (at 12 s).
  EXPECT_EQ(Decide(s, kT0 + 3 * kSecond, limit, 3), Deny(1, 7 * kSecond, 9 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 3 * kSecond, limit, 6), Deny(1, 8 * kSecond, 9 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 3 * kSecond, limit, 10), Deny(1, 9 * kSecond, 9 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 3 * kSecond, limit, 11), Deny(1, kNever, 9 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 10 * kSecond, limit, 3), Allow(0, 10 * kSecond));
}

TEST(SlidingLog, TimeGoingBackwardsIsClampedToTheNewestEntry) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 2, 10 * kSecond);
  KeyState s;
  EXPECT_TRUE(Decide(s, kT0 + 5 * kSecond, limit, 1).allowed);
  // Decided as if at kT0 + 5 s: the entry counts, reset is a whole window.
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(0, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, 10 * kSecond, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 15 * kSecond, limit, 2), Allow(0, 10 * kSecond));
}

TEST(SlidingLog, RequestsOfTheSameMicrosecondShareOneEntry) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 1000, kSecond);
  KeyState s;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(Decide(s, kT0, limit, 1).allowed);
  EXPECT_EQ(s.log.LiveEntries(), 1u);
  EXPECT_EQ(s.log.sum, 1000u);
}

TEST(SlidingLog, MemoryStaysBoundedByTheLiveEntries) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 50, kSecond);
  KeyState s;
  int64_t t = kT0;
  for (int i = 0; i < 100000; ++i) {
    Decide(s, t, limit, 1);
    EXPECT_LE(s.log.LiveEntries(), 50u);
    ASSERT_LE(s.log.entries.size(), 2 * 50u + 64) << "at request " << i;
    t += 7 * kMs;
  }
}

// ============================================================================================
// sliding_window
// ============================================================================================

// "Sliding window: Cloudflare's example": 42 requests in the previous minute, 18 in the first
// 15 s of this one, L = 50. The estimate 42*45/60 + 18 = 49.5; one more is denied at e = 15 s,
// allowed at 20 s.
TEST(SlidingWindow, CloudflareWorkedExample) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 50, kMinute);
  const int64_t start = AlignDown(kT0, kMinute) + kMinute;  // the current window
  KeyState s;
  EXPECT_EQ(Decide(s, start - kMinute, limit, 42), Allow(8, 2 * kMinute));
  for (int i = 0; i < 18; ++i) {
    // estimate = 31.5 + (i + 1); remaining = floor(50 - estimate).
    EXPECT_EQ(Decide(s, start + 15 * kSecond, limit, 1), Allow(17 - i, 105 * kSecond))
        << "request #" << i + 1;
  }
  // 42*45 + 19*60 = 3030 > 3000. The estimate reaches 49 after 30/42 s: 714285.71 µs.
  EXPECT_EQ(Decide(s, start + 15 * kSecond, limit, 1), Deny(0, 714286, 105 * kSecond));
  EXPECT_FALSE(Decide(s, start + 15 * kSecond + 714285, limit, 1).allowed);
  {
    KeyState copy = s;
    EXPECT_TRUE(Decide(copy, start + 15 * kSecond + 714286, limit, 1).allowed);
  }
  // At e = 20 s: 42*40 + 19*60 = 2820 <= 3000; estimate 28 + 19 = 47.
  EXPECT_EQ(Decide(s, start + 20 * kSecond, limit, 1), Allow(3, 100 * kSecond));
}

TEST(SlidingWindow, CurrentCountBecomesPreviousExactlyAtTheWindowEnd) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 10, 10 * kSecond);
  const int64_t start = AlignDown(kT0, 10 * kSecond);
  const int64_t next = start + 10 * kSecond;
  KeyState s;
  EXPECT_EQ(Decide(s, next - 1, limit, 10), Allow(0, 10 * kSecond + 1));
  EXPECT_EQ(Decide(s, next - 1, limit, 1), Deny(0, 1 + kSecond, 10 * kSecond + 1));
  // e = 0 of the next window: estimate 10 * 10/10 + 0 = 10, falling by 1 per second.
  EXPECT_EQ(Decide(s, next, limit, 1), Deny(0, kSecond, 10 * kSecond));
  EXPECT_EQ(Decide(s, next + kSecond - 1, limit, 1).allowed, false);
  EXPECT_EQ(Decide(s, next + kSecond, limit, 1), Allow(0, 19 * kSecond));
}

TEST(SlidingWindow, RetryCanLandInTheNextWindow) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 10, 10 * kSecond);
  const int64_t start = AlignDown(kT0, 10 * kSecond);
  KeyState s;
  // No previous window; 10 in this one at e = 5 s. The estimate stays 10 until the window
  // ends, then falls as 10 * (W - e') / W: 9 at e' = 1 s.
  EXPECT_EQ(Decide(s, start + 5 * kSecond, limit, 10), Allow(0, 15 * kSecond));
  EXPECT_EQ(Decide(s, start + 5 * kSecond, limit, 1), Deny(0, 6 * kSecond, 15 * kSecond));
  // A cost of 10 needs the estimate at 0: the end of the next window.
  EXPECT_EQ(Decide(s, start + 5 * kSecond, limit, 10), Deny(0, 15 * kSecond, 15 * kSecond));
  EXPECT_EQ(Decide(s, start + 11 * kSecond - 1, limit, 1).allowed, false);
  EXPECT_EQ(Decide(s, start + 11 * kSecond, limit, 1), Allow(0, 19 * kSecond));
}

TEST(SlidingWindow, EstimateReachesZeroAtTheEndOfTheNextWindow) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 4, kSecond);
  const int64_t start = AlignDown(kT0, kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, start + 250 * kMs, limit, 4), Allow(0, 1750 * kMs));
  EXPECT_FALSE(s.IsIdle(limit, start + 2 * kSecond - 1));
  // The estimate is 4 * 1/1000000 > 0: remaining 3, a cost of 4 waits 1 µs.
  EXPECT_EQ(Decide(s, start + 2 * kSecond - 1, limit, 4), Deny(3, 1, 1));
  EXPECT_TRUE(s.IsIdle(limit, start + 2 * kSecond));
  EXPECT_EQ(Decide(s, start + 2 * kSecond, limit, 4), Allow(0, 2 * kSecond));
}

TEST(SlidingWindow, TwoWindowsLaterEverythingIsForgotten) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 4, kSecond);
  const int64_t start = AlignDown(kT0, kSecond);
  KeyState s;
  EXPECT_TRUE(Decide(s, start, limit, 4).allowed);
  EXPECT_TRUE(Decide(s, start + kSecond + 999 * kMs, limit, 3).allowed);  // est 0.004 + 0
  // Two windows after the second request's window: both counts are gone.
  EXPECT_EQ(Decide(s, start + 3 * kSecond, limit, 4), Allow(0, 2 * kSecond));
}

TEST(SlidingWindow, RemainingIsTheFloorOfNMinusTheEstimate) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 10, kSecond);
  const int64_t start = AlignDown(kT0, kSecond);
  KeyState s;
  EXPECT_TRUE(Decide(s, start, limit, 3).allowed);
  // At e = 100 ms of the next window: estimate 3 * 0.9 + 1 = 3.7, remaining 6.
  EXPECT_EQ(Decide(s, start + 1100 * kMs, limit, 1), Allow(6, 1900 * kMs));
}

// ============================================================================================
// Every algorithm
// ============================================================================================

constexpr Algorithm kAllAlgorithms[] = {Algorithm::kTokenBucket, Algorithm::kLeakyBucket,
                                        Algorithm::kFixedWindow, Algorithm::kSlidingLog,
                                        Algorithm::kSlidingWindow};

class EveryAlgorithm : public ::testing::TestWithParam<Algorithm> {
 protected:
  Algorithm algorithm() const { return GetParam(); }
  // 5 per second, capacity 5.
  Limit Standard() const { return WithCapacity(algorithm(), 5, kSecond, 5); }
};

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

// The two buckets: the window algorithms have no rate.
class EveryBucket : public EveryAlgorithm {};

INSTANTIATE_TEST_SUITE_P(All, EveryBucket,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kLeakyBucket),
                         [](const ::testing::TestParamInfo<Algorithm>& info) {
                           return std::string(AlgorithmName(info.param));
                         });

struct Rate {
  uint64_t n;
  int64_t w;
};
constexpr Rate kNonIntegralRates[] = {
    {7, kMinute}, {13, kSecond}, {3, kMs}, {1000003, 7 * kSecond}};

// For the buckets with capacity 2, driving a key as fast as it allows (retrying exactly when
// told) admits the k-th request after the initial burst at exactly t0 + ceil(k * W / N): the
// tokens never reach the capacity, so nothing is lost, and there is no drift from rounding even
// after thousands of requests at a rate whose emission interval is not a whole number of µs.
TEST_P(EveryBucket, NonIntegralRatesStayExactOverThousandsOfRequests) {
  for (const Rate& rate : kNonIntegralRates) {
    const Limit limit = WithCapacity(algorithm(), rate.n, rate.w, 2);
    ASSERT_TRUE(ValidateLimit(limit).ok());
    const std::string name = DescribeLimit(limit);
    KeyState s;
    ASSERT_TRUE(Decide(s, kT0, limit, 1).allowed);
    ASSERT_TRUE(Decide(s, kT0, limit, 1).allowed);
    int64_t t = kT0;
    for (int64_t k = 1; k <= 7000; ++k) {
      const Int128 exact_num = static_cast<Int128>(k) * rate.w;  // k*W/N, rounded up
      const int64_t due = kT0 + static_cast<int64_t>((exact_num + rate.n - 1) / rate.n);
      const Decision d = Decide(s, t, limit, 1);
      ASSERT_FALSE(d.allowed) << name << " request " << k;
      ASSERT_EQ(t + d.retry_after_us, due) << name << " request " << k;
      ASSERT_FALSE(Decide(s, due - 1, limit, 1).allowed) << name << " request " << k;
      t = due;
      ASSERT_TRUE(Decide(s, t, limit, 1).allowed) << name << " request " << k;
    }
  }
}

// With capacity 1 the bucket is full again at the exact instant t + W/N, and the refill beyond
// the capacity is lost while the next request waits for the next whole µs: one admission every
// ceil(W/N) µs.
TEST_P(EveryBucket, CapacityOneAdmitsOnePerEmissionIntervalRoundedUp) {
  for (const Rate& rate : kNonIntegralRates) {
    const Limit limit = WithCapacity(algorithm(), rate.n, rate.w, 1);
    const int64_t period =
        (rate.w + static_cast<int64_t>(rate.n) - 1) / static_cast<int64_t>(rate.n);
    KeyState s;
    for (int64_t t = kT0; t < kT0 + 3000 * period; t += period) {
      ASSERT_TRUE(Decide(s, t, limit, 1).allowed) << DescribeLimit(limit) << " at " << t - kT0;
      ASSERT_EQ(Decide(s, t, limit, 1).retry_after_us, period) << DescribeLimit(limit);
    }
  }
}

TEST(LeakyBucket, NonIntegralRateDelaysAreExactForTenThousandQueuedRequests) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 7, kMinute, 10000);
  KeyState s;
  for (int64_t k = 0; k <= 10000; ++k) {
    const Decision d = Decide(s, kT0, limit, 1);
    ASSERT_TRUE(d.allowed) << k;
    ASSERT_EQ(d.delay_us, (k * kMinute + 6) / 7) << k;  // ceil(k * 8571428.571 µs)
    ASSERT_EQ(d.remaining, 10000 - k) << k;
    ASSERT_EQ(d.reset_after_us, ((k + 1) * kMinute + 6) / 7) << k;
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, (kMinute + 6) / 7, (10001 * kMinute + 6) / 7));
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

// --- Overflow safety near the limits ---------------------------------------------------------

constexpr int64_t kW = kMaxWindowUs;    // 316224000000000 µs
constexpr uint64_t kN = kMaxRequests;   // 4294967295
constexpr int64_t kCeilWOverN = 73627;  // ceil(kW / kN) = ceil(73626.97...)

TEST(NearTheLimits, TokenBucketWithLargestRequestsBurstAndWindow) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, kN, kW, kMaxBurst);
  ASSERT_TRUE(ValidateLimit(limit).ok());
  const int64_t t = kMaxTimeUs - 2 * kW;
  KeyState s;
  EXPECT_EQ(Decide(s, t, limit, kN), Allow(0, kW));
  EXPECT_EQ(Decide(s, t, limit, 1), Deny(0, kCeilWOverN, kW));
  EXPECT_EQ(Decide(s, t + kCeilWOverN - 1, limit, 1).allowed, false);
  EXPECT_TRUE(Decide(s, t + kCeilWOverN, limit, 1).allowed);
  // Full again a window later; at the last usable instant a new key and this key agree.
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, kN), Allow(0, kW));
  KeyState fresh;
  EXPECT_EQ(Decide(fresh, kMaxTimeUs, limit, 1), Allow(static_cast<int64_t>(kN) - 1, kCeilWOverN));
  EXPECT_EQ(Decide(fresh, kMaxTimeUs, limit, kN),
            Deny(static_cast<int64_t>(kN) - 1, kCeilWOverN, kCeilWOverN));
}

TEST(NearTheLimits, TokenBucketOnePerMaximumWindowAtTheLastInstant) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1, kW, 1);
  KeyState s;
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, 1), Allow(0, kW));
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, 1), Deny(0, kW, kW));
  EXPECT_EQ(s.compact.idle_at_us, kMaxTimeUs + kW);
}

TEST(NearTheLimits, LeakyBucketLongQueueOfMaximumWindows) {
  // 3001 slots of kW each: drained in ~9.5e17 µs, inside the 2^60 bound.
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 1, kW, 3000);
  ASSERT_TRUE(ValidateLimit(limit).ok());
  const int64_t t = kMaxTimeUs - 3002 * kW;
  KeyState s;
  for (int64_t k = 0; k <= 3000; ++k) {
    ASSERT_EQ(Decide(s, t, limit, 1), Allow(3000 - k, (k + 1) * kW, k * kW)) << k;
  }
  EXPECT_EQ(Decide(s, t, limit, 1), Deny(0, kW, 3001 * kW));
  EXPECT_TRUE(s.IsIdle(limit, t + 3001 * kW));
  EXPECT_FALSE(s.IsIdle(limit, t + 3001 * kW - 1));
}

TEST(NearTheLimits, LeakyBucketLargestQueue) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, kN, kW, kMaxBurst);
  ASSERT_TRUE(ValidateLimit(limit).ok());
  const int64_t t = kMaxTimeUs - 2 * kW;
  KeyState s;
  // Capacity 2^32: the whole queue at once drains in 2^32 * kW / kN = 316224000073626.97 µs.
  EXPECT_EQ(Decide(s, t, limit, uint64_t{1} << 32), Allow(0, 316224000073627, 0));
  EXPECT_EQ(Decide(s, t, limit, 1), Deny(0, kCeilWOverN, 316224000073627));
  EXPECT_EQ(Decide(s, t + kCeilWOverN, limit, 1),
            Allow(0, 316224000073627, 316224000073627 - kCeilWOverN));
}

TEST(NearTheLimits, FixedWindowOfMaximumLengthAtTheLastInstant) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, kN, kW);
  const int64_t start = AlignDown(kMaxTimeUs, kW);
  ASSERT_EQ(start, 4611494592000000000);
  const int64_t to_end = start + kW - kMaxTimeUs;  // 124797572612097 µs
  KeyState s;
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, kN - 1), Allow(1, to_end));
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, 2), Deny(1, to_end, to_end));
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, 1), Allow(0, to_end));
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, 1), Deny(0, to_end, to_end));
}

TEST(NearTheLimits, SlidingWindowWithLargestCountsKeepsBothCounters) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, kN, kW);
  const int64_t start = AlignDown(kMaxTimeUs - 2 * kW, kW);
  KeyState s;
  EXPECT_EQ(Decide(s, start, limit, kN), Allow(0, 2 * kW));
  // Next window, e = 0: estimate kN. It drops below kN - 1 after kW / kN µs.
  const int64_t next = start + kW;
  EXPECT_EQ(Decide(s, next, limit, 1), Deny(0, kCeilWOverN, kW));
  EXPECT_FALSE(Decide(s, next + kCeilWOverN - 1, limit, 1).allowed);
  // Estimate kN * (kW - 73627) / kW + 1 = kN - 0.0000000x: remaining 0, both counts kept.
  EXPECT_EQ(Decide(s, next + kCeilWOverN, limit, 1), Allow(0, 2 * kW - kCeilWOverN));
  EXPECT_EQ(s.compact.aux, (uint64_t{kN} << 32) | 1);
  // Near the end of that window the previous count has almost no weight.
  EXPECT_EQ(Decide(s, next + kW - 1, limit, kN - 2), Allow(0, kW + 1));
  // One µs later the estimate is kN - 1 (the new previous count), so a cost of 1 fits.
  EXPECT_EQ(Decide(s, next + kW - 1, limit, 1), Deny(0, 1, kW + 1));
  EXPECT_EQ(Decide(s, next + kW, limit, 1), Allow(0, 2 * kW));
}

TEST(NearTheLimits, SlidingLogOfMaximumWindowAtTheLastInstant) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, kN, kW);
  KeyState s;
  EXPECT_EQ(Decide(s, kMaxTimeUs - kW, limit, kN - 1), Allow(1, kW));
  EXPECT_EQ(Decide(s, kMaxTimeUs - 1, limit, 1), Allow(0, kW));
  EXPECT_EQ(Decide(s, kMaxTimeUs - 1, limit, 1), Deny(0, 1, kW));
  // At kMaxTimeUs the first entry stops counting.
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, kN - 1), Allow(0, kW));
  EXPECT_EQ(Decide(s, kMaxTimeUs, limit, 1), Deny(0, kW - 1, kW));
}

}  // namespace
}  // namespace algo
}  // namespace sluice
