// Tests for algo::ChargeCompact: recording units admitted elsewhere (consistency: eventual).
// A charge of what a decision would have admitted leaves the state the decision leaves; a charge
// may take a state past its limit, which then denies until it has paid that back; a charge for a
// window that no longer counts changes nothing.

#include <cstdint>
#include <string>

#include "algo/algorithms.h"
#include "algo/algorithms_testing.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/units.h"

namespace sluice::algo {
namespace {

using sluice::testing::kMs;
using sluice::testing::kSecond;
using test::kWholeMinute;  // an instant that starts a minute

class ChargeTest : public ::testing::TestWithParam<Algorithm> {
 protected:
  Limit limit_ = {
      .algorithm = GetParam(), .requests = 10, .window_us = kSecond, .burst = std::nullopt};
};

INSTANTIATE_TEST_SUITE_P(Eventual, ChargeTest,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kFixedWindow,
                                           Algorithm::kSlidingWindow),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

TEST_P(ChargeTest, ChargingWhatADecisionAdmitsLeavesTheSameState) {
  CompactState decided, charged;
  for (const int64_t t : {kWholeMinute, kWholeMinute + 30 * kMs, kWholeMinute + 1700 * kMs,
                          kWholeMinute + 1701 * kMs}) {
    for (const uint64_t cost : {1, 2}) {
      ASSERT_TRUE(DecideCompact(decided, t, limit_, cost).allowed) << t;
      ChargeCompact(charged, t, t, limit_, cost);
      EXPECT_EQ(charged, decided) << t << " cost " << cost;
    }
  }
}

TEST_P(ChargeTest, ChargeGoesPastTheLimitAndIsPaidBack) {
  CompactState state;
  ChargeCompact(state, kWholeMinute, kWholeMinute, limit_,
                25);  // 2.5 times the limit, admitted elsewhere
  EXPECT_FALSE(DecideCompact(state, kWholeMinute + 500 * kMs, limit_, 1).allowed);
  // A bucket pays back at its rate (25 units: 2.5 s to be full again, 1.5 s to hold one), a
  // fixed window when its window ends, a sliding window once the excess has weighed out.
  const int64_t open_at = GetParam() == Algorithm::kTokenBucket   ? kWholeMinute + 1600 * kMs
                          : GetParam() == Algorithm::kFixedWindow ? kWholeMinute + kSecond
                                                                  : kWholeMinute + 1640 * kMs;
  CompactState before = state;
  EXPECT_FALSE(DecideCompact(before, open_at - 101 * kMs, limit_, 1).allowed);
  EXPECT_TRUE(DecideCompact(state, open_at, limit_, 1).allowed);
  // The denial before says so (a charge is not carried into later windows as count_denied's
  // recorded overdrafts are: a fixed window's count ends with its window).
  EXPECT_EQ(DecideCompact(before, open_at - 101 * kMs, limit_, 1).retry_after_us, 101 * kMs);
}

TEST_P(ChargeTest, ChargeOfAnEndedWindowChangesNothing) {
  if (GetParam() == Algorithm::kTokenBucket) GTEST_SKIP() << "a bucket has no windows";
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute + 2100 * kMs, limit_, 2).allowed);
  const CompactState before = state;
  ChargeCompact(state, kWholeMinute + 50 * kMs, kWholeMinute + 2100 * kMs, limit_,
                5);  // two windows back
  EXPECT_EQ(state, before);
  if (GetParam() == Algorithm::kFixedWindow) {
    ChargeCompact(state, kWholeMinute + 1050 * kMs, kWholeMinute + 2100 * kMs, limit_,
                  5);  // the window before
    EXPECT_EQ(state, before);
  }
}

TEST(ChargeSlidingWindowTest, ChargeOfThePreviousWindowWeighsInTheEstimate) {
  const Limit limit = {.algorithm = Algorithm::kSlidingWindow,
                       .requests = 10,
                       .window_us = kSecond,
                       .burst = std::nullopt};
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kWholeMinute + 1100 * kMs, limit, 1).allowed);
  // 8 admitted elsewhere in the window before: at 100 ms in, they weigh 8 * 0.9 = 7.2.
  ChargeCompact(state, kWholeMinute + 900 * kMs, kWholeMinute + 1100 * kMs, limit, 8);
  CompactState peek = state;
  EXPECT_EQ(DecideCompact(peek, kWholeMinute + 1100 * kMs, limit, 0).remaining,
            1);  // 10 - 1 - ceil(7.2)
  EXPECT_FALSE(DecideCompact(state, kWholeMinute + 1100 * kMs, limit, 2).allowed);
}

TEST(ChargeBucketTest, AChargeIsCountedFromNowNotFromWhenItWasAdmitted) {
  // Units learnt of late drain from now: a bucket never forgets them early.
  const Limit limit = {.algorithm = Algorithm::kTokenBucket,
                       .requests = 10,
                       .window_us = kSecond,
                       .burst = std::nullopt};
  CompactState state;
  ChargeCompact(state, kWholeMinute, kWholeMinute + 500 * kMs, limit, 10);
  EXPECT_FALSE(DecideCompact(state, kWholeMinute + 599 * kMs, limit, 1).allowed);
  EXPECT_TRUE(DecideCompact(state, kWholeMinute + 600 * kMs, limit, 1).allowed);
}

}  // namespace
}  // namespace sluice::algo
