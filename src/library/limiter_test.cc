#include "sluice/limiter.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <latch>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"
#include "tests/support/units.h"

namespace sluice {
namespace {

using sluice::testing::kMs;
using sluice::testing::kSecond;
constexpr int64_t kLimiterT0 = 1700000000 * kSecond + 250 * kMs;

using testing::MakeLimit;

// The worked example: 10 per second, bursts of 20.
Limit TenPerSecondBurst20() { return MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 20); }

std::unique_ptr<Limiter> MustCreate(const Limit& limit, const Limiter::Options& options) {
  absl::StatusOr<std::unique_ptr<Limiter>> limiter = Limiter::Create(limit, options);
  EXPECT_TRUE(limiter.ok()) << limiter.status();
  return limiter.ok() ? std::move(*limiter) : nullptr;
}

TEST(LimiterTest, CreateRejectsAnInvalidLimit) {
  ManualClock clock(kLimiterT0);
  const Limiter::Options options{.clock = &clock};
  const Limit invalid[] = {
      MakeLimit(Algorithm::kTokenBucket, 10, 0),                // window below 1 µs
      MakeLimit(Algorithm::kFixedWindow, 10, -kSecond),         // negative window
      MakeLimit(Algorithm::kSlidingLog, 10, kMaxWindowUs + 1),  // window too long
      MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 0),       // empty bucket
      MakeLimit(Algorithm::kFixedWindow, kMaxRequests + 1, kSecond),
      MakeLimit(Algorithm::kLeakyBucket, 1, kSecond, kMaxBurst + 1),
  };
  for (const Limit& limit : invalid) {
    SCOPED_TRACE(DescribeLimit(limit));
    const auto limiter = Limiter::Create(limit, options);
    ASSERT_FALSE(limiter.ok());
    EXPECT_EQ(limiter.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(limiter.status(), ValidateLimit(limit)) << "the same message as ValidateLimit";
  }
}

TEST(LimiterTest, CreateRejectsAMissingClock) {
  const auto limiter = Limiter::Create(TenPerSecondBurst20(), {.clock = nullptr});
  ASSERT_FALSE(limiter.ok());
  EXPECT_EQ(limiter.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LimiterTest, CreateKeepsTheLimit) {
  const auto limiter = Limiter::Create(TenPerSecondBurst20());
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  EXPECT_EQ((*limiter)->limit(), TenPerSecondBurst20());
  EXPECT_EQ((*limiter)->size(), 0u);
}

TEST(LimiterTest, DefaultClockIsTheSystemClock) {
  auto limiter = Limiter::Create(MakeLimit(Algorithm::kTokenBucket, 1, 3600 * kSecond));
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  EXPECT_TRUE((*limiter)->Decide("k").allowed);
  const Decision d = (*limiter)->Decide("k");
  EXPECT_FALSE(d.allowed);
  // The next token is an hour away, less the few µs this test took.
  EXPECT_GT(d.retry_after_us, 3599 * kSecond);
  EXPECT_LE(d.retry_after_us, 3600 * kSecond);
}

TEST(LimiterTest, DecideFollowsTheLimitOnTheInjectedClock) {
  ManualClock clock(kLimiterT0);
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(limiter, nullptr);
  for (int i = 0; i < 20; ++i) {
    const Decision d = limiter->Decide("alice");
    ASSERT_TRUE(d.allowed) << "request " << i + 1 << " of the burst";
    EXPECT_EQ(d.remaining, 19 - i);
    EXPECT_EQ(d.retry_after_us, 0);
  }
  Decision d = limiter->Decide("alice");
  EXPECT_FALSE(d.allowed) << "the 21st";
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.retry_after_us, 100 * kMs);
  EXPECT_EQ(d.reset_after_us, 2 * kSecond) << "20 tokens at 10 per second";

  clock.Advance(99 * kMs);
  d = limiter->Decide("alice");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, 1 * kMs);

  clock.Advance(1 * kMs);
  EXPECT_TRUE(limiter->Decide("alice").allowed) << "one token after 100 ms";
  EXPECT_FALSE(limiter->Decide("alice").allowed) << "and only one";

  clock.Advance(2 * kSecond);
  d = limiter->Decide("alice", 20);
  EXPECT_TRUE(d.allowed) << "full again after 2 s";
  EXPECT_EQ(d.remaining, 0);
}

TEST(LimiterTest, CostAboveOneConsumesThatMuchAndTooBigIsNever) {
  ManualClock clock(kLimiterT0);
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(limiter, nullptr);
  Decision d = limiter->Decide("k", 15);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 5);
  d = limiter->Decide("k", 6);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 5) << "a denied request consumes nothing";
  EXPECT_EQ(d.retry_after_us, 100 * kMs);
  d = limiter->Decide("k", 21);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, Decision::kNever);
  EXPECT_TRUE(limiter->Decide("k", 5).allowed);
}

TEST(LimiterTest, CostZeroPeeksWithoutConsuming) {
  ManualClock clock(kLimiterT0);
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(limiter, nullptr);
  Decision peek = limiter->Decide("new", 0);
  EXPECT_TRUE(peek.allowed);
  EXPECT_EQ(peek.remaining, 20);
  EXPECT_EQ(limiter->size(), 0u) << "a peek at a new key stores nothing";

  for (int i = 0; i < 20; ++i) ASSERT_TRUE(limiter->Decide("k").allowed);
  for (int i = 0; i < 5; ++i) {
    peek = limiter->Decide("k", 0);
    EXPECT_EQ(peek.remaining, 0);
    EXPECT_EQ(peek.reset_after_us, 2 * kSecond);
  }
  clock.Advance(100 * kMs);
  peek = limiter->Decide("k", 0);
  EXPECT_EQ(peek.remaining, 1);
  EXPECT_EQ(limiter->Decide("k", 0), peek) << "peeking twice sees the same";
  EXPECT_TRUE(limiter->Decide("k").allowed) << "the peeks left the token there";
  EXPECT_FALSE(limiter->Decide("k").allowed);
}

TEST(LimiterTest, ResetForgetsOneKey) {
  ManualClock clock(kLimiterT0);
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(limiter, nullptr);
  EXPECT_FALSE(limiter->Reset("alice")) << "no state yet";
  ASSERT_TRUE(limiter->Decide("alice", 20).allowed);
  ASSERT_TRUE(limiter->Decide("bob", 20).allowed);
  ASSERT_FALSE(limiter->Decide("alice").allowed);
  EXPECT_EQ(limiter->size(), 2u);

  EXPECT_TRUE(limiter->Reset("alice"));
  EXPECT_EQ(limiter->size(), 1u);
  EXPECT_FALSE(limiter->Reset("alice")) << "already forgotten";
  const Decision d = limiter->Decide("alice");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 19) << "alice starts with a full bucket";
  EXPECT_FALSE(limiter->Decide("bob").allowed) << "bob is untouched";
}

TEST(LimiterTest, SizeCountsKeysHoldingState) {
  ManualClock clock(kLimiterT0);
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(limiter, nullptr);
  for (int i = 0; i < 100; ++i) limiter->Decide("user-" + std::to_string(i));
  EXPECT_EQ(limiter->size(), 100u);
  limiter->Decide("user-7");    // a known key again
  limiter->Decide("huge", 21);  // denied on a new key: nothing to remember
  limiter->Decide("peek", 0);
  EXPECT_EQ(limiter->size(), 100u);
}

TEST(LimiterTest, DecideAtUsesTheGivenTimeAndNeverGoesBack) {
  ManualClock clock(0);  // unused by DecideAt
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(limiter, nullptr);
  ASSERT_TRUE(limiter->DecideAt("k", 20, kLimiterT0).allowed);
  Decision d = limiter->DecideAt("k", 1, kLimiterT0 + 50 * kMs);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, 50 * kMs);
  // An earlier time counts as the latest one used: no tokens minted, the same wait.
  d = limiter->DecideAt("k", 1, kLimiterT0 - 10 * kSecond);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, 50 * kMs);
  EXPECT_TRUE(limiter->DecideAt("k", 1, kLimiterT0 + 100 * kMs).allowed);
  // Decide on the manual clock (at 0) counts as the latest time too.
  d = limiter->Decide("k");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, 100 * kMs);
}

TEST(LimiterTest, EveryAlgorithmIsAvailable) {
  ManualClock clock(kLimiterT0);
  for (Algorithm algorithm :
       {Algorithm::kTokenBucket, Algorithm::kLeakyBucket, Algorithm::kFixedWindow,
        Algorithm::kSlidingLog, Algorithm::kSlidingWindow}) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    const Limit limit =
        MakeLimit(algorithm, 5, kSecond,
                  algorithm == Algorithm::kLeakyBucket ? std::optional<uint64_t>(4) : std::nullopt);
    auto limiter = MustCreate(limit, {.clock = &clock});
    ASSERT_NE(limiter, nullptr);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter->Decide("k").allowed) << i;
    const Decision d = limiter->Decide("k");
    EXPECT_FALSE(d.allowed);
    EXPECT_GT(d.retry_after_us, 0);
    EXPECT_TRUE(limiter->Decide("other").allowed);
  }
}

TEST(LimiterTest, LimitersDoNotShareState) {
  ManualClock clock(kLimiterT0);
  auto a = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  auto b = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->Decide("k", 20).allowed);
  EXPECT_FALSE(a->Decide("k").allowed);
  EXPECT_TRUE(b->Decide("k", 20).allowed);
}

TEST(LimiterTest, ConcurrentDecisionsAdmitExactlyTheCapacity) {
  ManualClock clock(kLimiterT0);  // never moves: nothing refills
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(limiter, nullptr);
  constexpr int kThreads = 8, kRequests = 2000, kKeys = 100;
  std::atomic<int> hot_allowed{0};
  std::vector<std::atomic<int>> allowed(kKeys);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kRequests; ++i) {
        if (limiter->Decide("hot").allowed) hot_allowed++;
        const int k = (i + t * 13) % kKeys;
        if (limiter->Decide("key-" + std::to_string(k)).allowed) allowed[k]++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(hot_allowed.load(), 20);
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(allowed[k].load(), 20) << "key-" << k;
  EXPECT_EQ(limiter->size(), static_cast<size_t>(kKeys) + 1);
}

TEST(LimiterTest, ConcurrentDecisionsOnAMovingClockStayWithinTheRate) {
  ManualClock clock(kLimiterT0);
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock});
  ASSERT_NE(limiter, nullptr);
  constexpr int kThreads = 4, kRequests = 5000;
  std::atomic<int64_t> allowed{0};
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < kRequests; ++i) {
        clock.Advance(500);  // 20000 decisions: 10 s in all
        if (limiter->Decide("hot").allowed) allowed++;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(clock.NowMicros() - kLimiterT0, 10 * kSecond);
  EXPECT_LE(allowed.load(), 20 + 10 * 10) << "a full bucket plus 10 s of refill";
  EXPECT_GE(allowed.load(), 10 * 10) << "the refill is actually granted";
}

TEST(LimiterTest, SizeStaysWithinMaxKeys) {
  ManualClock clock(kLimiterT0);
  auto limiter = MustCreate(TenPerSecondBurst20(), {.clock = &clock, .max_keys = 64, .shards = 16});
  ASSERT_NE(limiter, nullptr);
  ASSERT_TRUE(limiter->Decide("busy", 20).allowed);
  for (int i = 0; i < 10000; ++i) limiter->Decide("flood-" + std::to_string(i));
  EXPECT_LE(limiter->size(), 64u);
  EXPECT_FALSE(limiter->Decide("busy").allowed) << "a full limiter never drops a key in use";
}

TEST(LimiterTest, AFullLimiterAdmitsNewKeysUntrackedWhenAskedTo) {
  ManualClock clock(kLimiterT0);
  auto limiter = MustCreate(
      TenPerSecondBurst20(),
      {.clock = &clock, .max_keys = 64, .shards = 16, .on_full = OnFull::kAllowUntracked});
  ASSERT_NE(limiter, nullptr);
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(limiter->Decide("flood-" + std::to_string(i)).allowed) << "allow_untracked";
  }
  EXPECT_LE(limiter->size(), 64u);
}

// max_keys bounds the limiter as a whole: shards that each rounded their share up (100 / 16)
// would hold 112.
TEST(LimiterTest, SizeStaysWithinMaxKeysThatAreNotAMultipleOfShards) {
  ManualClock clock(kLimiterT0);
  auto limiter =
      MustCreate(TenPerSecondBurst20(), {.clock = &clock, .max_keys = 100, .shards = 16});
  ASSERT_NE(limiter, nullptr);
  for (int i = 0; i < 10000; ++i) limiter->Decide("flood-" + std::to_string(i));
  EXPECT_LE(limiter->size(), 100u);
}

}  // namespace
}  // namespace sluice
