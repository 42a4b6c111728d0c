// Tests for the refunds of algo/algorithms.h: giving back what an admitted request consumed.
// For every algorithm: consume then refund within the same window is as if never consumed; a
// refund after the window rolled (or the entry expired) changes nothing; refunds never leave a
// state better than a fresh key's.

#include <cstdint>
#include <vector>

#include "algo/algorithms.h"
#include "algo/algorithms_testing.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"
#include "tests/support/units.h"

namespace sluice::algo {
namespace {

using sluice::testing::kMinute;
using sluice::testing::kMs;
using sluice::testing::kSecond;
using test::kWholeMinute;  // an instant that starts a minute

using testing::MakeLimit;

// The compact algorithms, each with 5 per minute (leaky_bucket: a queue of 4, so 5 at once).
class CompactRefundTest : public ::testing::TestWithParam<Algorithm> {
 protected:
  void SetUp() override {
    if (GetParam() == Algorithm::kLeakyBucket) limit_.burst = 4;
  }
  Limit limit_ = MakeLimit(GetParam(), 5, kMinute);
};

INSTANTIATE_TEST_SUITE_P(All, CompactRefundTest,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kLeakyBucket,
                                           Algorithm::kFixedWindow, Algorithm::kSlidingWindow),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

TEST_P(CompactRefundTest, ConsumeThenRefundIsAsIfNeverConsumed) {
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute, limit_, 2).allowed);
  const CompactState after_two = state;
  const int64_t t = kWholeMinute + 10 * kMs;
  ASSERT_TRUE(DecideCompact(state, t, limit_, 1).allowed);
  RefundCompact(state, t, t, limit_, 1);
  EXPECT_EQ(state, after_two);
  RefundCompact(state, kWholeMinute, t, limit_, 2);
  // Back to a fresh key: the next decisions are a fresh key's.
  CompactState fresh;
  CompactState copy = state;
  EXPECT_EQ(DecideCompact(copy, t, limit_, 0), DecideCompact(fresh, t, limit_, 0));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(DecideCompact(state, t, limit_, 1).allowed) << i;
  EXPECT_FALSE(DecideCompact(state, t, limit_, 1).allowed);
}

TEST_P(CompactRefundTest, RefundLetsTheNextRequestIn) {
  CompactState state;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(DecideCompact(state, kWholeMinute, limit_, 1).allowed);
  ASSERT_FALSE(DecideCompact(state, kWholeMinute + kMs, limit_, 1).allowed);
  RefundCompact(state, kWholeMinute, kWholeMinute + 2 * kMs, limit_, 1);
  EXPECT_TRUE(DecideCompact(state, kWholeMinute + 3 * kMs, limit_, 1).allowed);
  EXPECT_FALSE(DecideCompact(state, kWholeMinute + 3 * kMs, limit_, 1).allowed);
}

TEST_P(CompactRefundTest, NeverBetterThanInitial) {
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute, limit_, 1).allowed);
  for (int i = 0; i < 10; ++i) RefundCompact(state, kWholeMinute, kWholeMinute + kMs, limit_, 3);
  EXPECT_EQ(state, CompactState{});
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(DecideCompact(state, kWholeMinute + kMs, limit_, 1).allowed) << i;
  EXPECT_FALSE(DecideCompact(state, kWholeMinute + kMs, limit_, 1).allowed);
}

TEST_P(CompactRefundTest, RefundOfAFreshKeyChangesNothing) {
  CompactState state;
  RefundCompact(state, kWholeMinute, kWholeMinute, limit_, 1);
  EXPECT_EQ(state, CompactState{});
}

TEST_P(CompactRefundTest, CostZeroRefundsNothing) {
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute, limit_, 2).allowed);
  const CompactState before = state;
  RefundCompact(state, kWholeMinute, kWholeMinute, limit_, 0);
  EXPECT_EQ(state, before);
}

TEST(FixedWindowRefundTest, AfterTheWindowRolledIsANoOp) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 5, kMinute);
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute + 59 * kSecond, limit, 3).allowed);
  // A request of the next window; then the refund of the old one arrives.
  ASSERT_TRUE(DecideCompact(state, kWholeMinute + kMinute + kSecond, limit, 1).allowed);
  const CompactState before = state;
  RefundCompact(state, kWholeMinute + 59 * kSecond, kWholeMinute + kMinute + 2 * kSecond, limit, 3);
  EXPECT_EQ(state, before);
  // Also when nothing was decided in the new window yet.
  CompactState old;
  ASSERT_TRUE(DecideCompact(old, kWholeMinute + 59 * kSecond, limit, 3).allowed);
  const CompactState old_before = old;
  RefundCompact(old, kWholeMinute + 59 * kSecond, kWholeMinute + kMinute + kSecond, limit, 3);
  EXPECT_EQ(old, old_before);
}

TEST(SlidingWindowRefundTest, AfterTheWindowRolledIsANoOp) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 5, kMinute);
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute + 59 * kSecond, limit, 3).allowed);
  const CompactState before = state;
  // The window rolled: the 3 now weigh as the previous window's count; a refund does nothing.
  RefundCompact(state, kWholeMinute + 59 * kSecond, kWholeMinute + kMinute + kSecond, limit, 3);
  EXPECT_EQ(state, before);
}

TEST(SlidingWindowRefundTest, KeepsThePreviousWindowsWeight) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 5, kMinute);
  CompactState state;
  ASSERT_TRUE(
      DecideCompact(state, kWholeMinute + 30 * kSecond, limit, 3).allowed);  // previous window
  const int64_t t = kWholeMinute + kMinute + kSecond;
  CompactState expected = state;
  ASSERT_TRUE(DecideCompact(expected, t, limit, 0).allowed);
  ASSERT_TRUE(DecideCompact(state, t, limit, 1).allowed);
  RefundCompact(state, t, t, limit, 1);
  CompactState a = state, b = expected;
  EXPECT_EQ(DecideCompact(a, t, limit, 0), DecideCompact(b, t, limit, 0));
  // The estimate still holds most of the previous window's 3 (2.95): two more fit, not three.
  EXPECT_TRUE(DecideCompact(state, t, limit, 1).allowed);
  EXPECT_TRUE(DecideCompact(state, t, limit, 1).allowed);
  EXPECT_FALSE(DecideCompact(state, t, limit, 1).allowed);
}

TEST(BucketRefundTest, PartlyRefilledBucketFillsUpToFullOnly) {
  // 5 per minute: one token every 12 s. Take 2, wait 18 s (1.5 back), refund 2: full, not more.
  for (Algorithm a : {Algorithm::kTokenBucket, Algorithm::kLeakyBucket}) {
    Limit limit = MakeLimit(a, 5, kMinute);
    if (a == Algorithm::kLeakyBucket) limit.burst = 4;
    CompactState state;
    ASSERT_TRUE(DecideCompact(state, kWholeMinute, limit, 2).allowed);
    RefundCompact(state, kWholeMinute, kWholeMinute + 18 * kSecond, limit, 2);
    EXPECT_EQ(state, CompactState{}) << AlgorithmName(a);
  }
}

TEST(BucketRefundTest, ExactInFractionsOfAnEmissionInterval) {
  // 7 per minute: the emission interval is 8571428.57 µs, kept exact in 1/N µs.
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 7, kMinute);
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute, limit, 3).allowed);
  const CompactState after_three = state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute, limit, 2).allowed);
  RefundCompact(state, kWholeMinute, kWholeMinute, limit, 2);
  EXPECT_EQ(state, after_three);
}

TEST(LeakyBucketRefundTest, RefundShortensTheNextDelay) {
  // 1 per 100 ms, queue of 4: each admitted request waits behind the previous ones.
  Limit limit = MakeLimit(Algorithm::kLeakyBucket, 1, 100 * kMs);
  limit.burst = 4;
  CompactState state;
  ASSERT_EQ(DecideCompact(state, kWholeMinute, limit, 1).delay_us, 0);
  ASSERT_EQ(DecideCompact(state, kWholeMinute, limit, 1).delay_us, 100 * kMs);
  ASSERT_EQ(DecideCompact(state, kWholeMinute, limit, 1).delay_us, 200 * kMs);
  RefundCompact(state, kWholeMinute, kWholeMinute, limit, 1);
  EXPECT_EQ(DecideCompact(state, kWholeMinute, limit, 1).delay_us, 200 * kMs);
}

TEST(SlidingLogRefundTest, ConsumeThenRefundIsAsIfNeverConsumed) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 3, kMinute);
  LogState state;
  ASSERT_TRUE(DecideSlidingLog(state, kWholeMinute, limit, 1).allowed);
  ASSERT_TRUE(DecideSlidingLog(state, kWholeMinute + kSecond, limit, 1).allowed);
  ASSERT_TRUE(DecideSlidingLog(state, kWholeMinute + 2 * kSecond, limit, 1).allowed);
  ASSERT_FALSE(DecideSlidingLog(state, kWholeMinute + 3 * kSecond, limit, 1).allowed);
  RefundSlidingLog(state, kWholeMinute + kSecond, kWholeMinute + 3 * kSecond, limit,
                   1);  // the middle one
  EXPECT_EQ(state.sum, 2u);
  EXPECT_EQ(state.LiveEntries(), 2u);
  EXPECT_EQ(state.idle_at_us, kWholeMinute + 2 * kSecond + kMinute);
  EXPECT_TRUE(DecideSlidingLog(state, kWholeMinute + 3 * kSecond, limit, 1).allowed);
  EXPECT_FALSE(DecideSlidingLog(state, kWholeMinute + 3 * kSecond, limit, 1).allowed);
}

TEST(SlidingLogRefundTest, SharedMicrosecondGivesBackOnlyTheCost) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 5, kMinute);
  LogState state;
  ASSERT_TRUE(DecideSlidingLog(state, kWholeMinute, limit, 2).allowed);
  ASSERT_TRUE(DecideSlidingLog(state, kWholeMinute, limit, 1).allowed);  // same entry
  RefundSlidingLog(state, kWholeMinute, kWholeMinute, limit, 1);
  EXPECT_EQ(state.sum, 2u);
  ASSERT_EQ(state.LiveEntries(), 1u);
  RefundSlidingLog(state, kWholeMinute, kWholeMinute, limit,
                   5);  // more than is there: down to fresh, no further
  EXPECT_EQ(state.sum, 0u);
  EXPECT_EQ(state.LiveEntries(), 0u);
  EXPECT_TRUE(state.IsIdle(kWholeMinute));
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(DecideSlidingLog(state, kWholeMinute, limit, 1).allowed) << i;
  EXPECT_FALSE(DecideSlidingLog(state, kWholeMinute, limit, 1).allowed);
}

TEST(SlidingLogRefundTest, ExpiredEntryIsANoOp) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 3, kMinute);
  LogState state;
  ASSERT_TRUE(DecideSlidingLog(state, kWholeMinute, limit, 1).allowed);
  ASSERT_TRUE(DecideSlidingLog(state, kWholeMinute + 30 * kSecond, limit, 1).allowed);
  RefundSlidingLog(state, kWholeMinute, kWholeMinute + kMinute, limit,
                   1);       // the first no longer counts
  EXPECT_EQ(state.sum, 2u);  // (forgotten only by the next evaluation)
  EXPECT_EQ(state.LiveEntries(), 2u);
  RefundSlidingLog(state, kWholeMinute + 5 * kSecond, kWholeMinute + kMinute, limit,
                   1);  // no such entry
  EXPECT_EQ(state.sum, 2u);
}

}  // namespace
}  // namespace sluice::algo
