// The algorithms of algo/algorithms.h near the bounds of sluice/limit.h (the largest requests,
// burst and window, the last usable instant): no overflow, and the same exact answers.

#include <cstdint>

#include "algo/algorithms.h"
#include "algo/algorithms_testing.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"

namespace sluice::algo {
namespace {

using test::AlignDown;
using test::Allow;
using test::Decide;
using test::Deny;
using test::KeyState;
using testing::MakeLimit;

// --- Overflow safety near the limits ---------------------------------------------------------

constexpr int64_t kW = kMaxWindowUs;  // 316224000000000 µs

constexpr uint64_t kN = kMaxRequests;  // 4294967295

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
}  // namespace sluice::algo
