// Tests for algo::ChargeCompact: recording units admitted elsewhere (consistency: eventual).
// A charge of what a decision would have admitted leaves the state the decision leaves; a charge
// may take a state past its limit, which then denies until it has paid that back; a charge for a
// window that no longer counts changes nothing.

#include <cstdint>
#include <string>

#include "algo/algorithms.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"

namespace sluice::algo {
namespace {

constexpr int64_t kMs = 1000;
constexpr int64_t kSecond = 1000 * kMs;
constexpr int64_t kT0 = int64_t{1700000040} * kSecond;  // a whole minute

class ChargeTest : public testing::TestWithParam<Algorithm> {
 protected:
  Limit limit_ = {
      .algorithm = GetParam(), .requests = 10, .window_us = kSecond, .burst = std::nullopt};
};

INSTANTIATE_TEST_SUITE_P(Eventual, ChargeTest,
                         testing::Values(Algorithm::kTokenBucket, Algorithm::kFixedWindow,
                                         Algorithm::kSlidingWindow),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

TEST_P(ChargeTest, ChargingWhatADecisionAdmitsLeavesTheSameState) {
  CompactState decided, charged;
  for (const int64_t t : {kT0, kT0 + 30 * kMs, kT0 + 1700 * kMs, kT0 + 1701 * kMs}) {
    for (const uint64_t cost : {1, 2}) {
      ASSERT_TRUE(DecideCompact(decided, t, limit_, cost).allowed) << t;
      ChargeCompact(charged, t, t, limit_, cost);
      EXPECT_EQ(charged, decided) << t << " cost " << cost;
    }
  }
}

TEST_P(ChargeTest, ChargeGoesPastTheLimitAndIsPaidBack) {
  CompactState state;
  ChargeCompact(state, kT0, kT0, limit_, 25);  // 2.5 times the limit, admitted elsewhere
  EXPECT_FALSE(DecideCompact(state, kT0 + 500 * kMs, limit_, 1).allowed);
  // A bucket pays back at its rate (25 units: 2.5 s to be full again, 1.5 s to hold one), a
  // fixed window when its window ends, a sliding window once the excess has weighed out.
  const int64_t open_at = GetParam() == Algorithm::kTokenBucket   ? kT0 + 1600 * kMs
                          : GetParam() == Algorithm::kFixedWindow ? kT0 + kSecond
                                                                  : kT0 + 1640 * kMs;
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
  ASSERT_TRUE(DecideCompact(state, kT0 + 2100 * kMs, limit_, 2).allowed);
  const CompactState before = state;
  ChargeCompact(state, kT0 + 50 * kMs, kT0 + 2100 * kMs, limit_, 5);  // two windows back
  EXPECT_EQ(state, before);
  if (GetParam() == Algorithm::kFixedWindow) {
    ChargeCompact(state, kT0 + 1050 * kMs, kT0 + 2100 * kMs, limit_, 5);  // the window before
    EXPECT_EQ(state, before);
  }
}

TEST(ChargeSlidingWindowTest, ChargeOfThePreviousWindowWeighsInTheEstimate) {
  const Limit limit = {.algorithm = Algorithm::kSlidingWindow,
                       .requests = 10,
                       .window_us = kSecond,
                       .burst = std::nullopt};
  CompactState state;
  ASSERT_TRUE(DecideCompact(state, kT0 + 1100 * kMs, limit, 1).allowed);
  // 8 admitted elsewhere in the window before: at 100 ms in, they weigh 8 * 0.9 = 7.2.
  ChargeCompact(state, kT0 + 900 * kMs, kT0 + 1100 * kMs, limit, 8);
  CompactState peek = state;
  EXPECT_EQ(DecideCompact(peek, kT0 + 1100 * kMs, limit, 0).remaining, 1);  // 10 - 1 - ceil(7.2)
  EXPECT_FALSE(DecideCompact(state, kT0 + 1100 * kMs, limit, 2).allowed);
}

TEST(ChargeBucketTest, AChargeIsCountedFromNowNotFromWhenItWasAdmitted) {
  // Units learnt of late drain from now: a bucket never forgets them early.
  const Limit limit = {.algorithm = Algorithm::kTokenBucket,
                       .requests = 10,
                       .window_us = kSecond,
                       .burst = std::nullopt};
  CompactState state;
  ChargeCompact(state, kT0, kT0 + 500 * kMs, limit, 10);
  EXPECT_FALSE(DecideCompact(state, kT0 + 599 * kMs, limit, 1).allowed);
  EXPECT_TRUE(DecideCompact(state, kT0 + 600 * kMs, limit, 1).allowed);
}

}  // namespace
}  // namespace sluice::algo
