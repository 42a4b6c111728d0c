// The RLS v3 codec's current_limit (codec.h, CurrentLimit): a limit of N per W sent as
// requests_per_unit and a unit, exactly when W is one unit, else at the same rate over the longest
// unit not longer than W (docs/rls.md §3).

#include <cstdint>
#include <utility>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "gtest/gtest.h"
#include "rls/codec.h"
#include "rls/codec_testing.h"
#include "tests/support/limits.h"

namespace sluice::rls {
namespace {

using RateLimit = RateLimitResponse::RateLimit;
using test::kDayUs;
using test::kHourUs;
using test::kMinuteUs;
using test::kSecondUs;

using testing::FixedWindow;

std::pair<uint32_t, RateLimit::Unit> Current(uint64_t n, int64_t window_us) {
  const RateLimit r = CurrentLimit(FixedWindow(n, window_us));
  EXPECT_EQ(r.name(), "");
  return {r.requests_per_unit(), r.unit()};
}

TEST(CurrentLimitTest, WindowOfExactlyOneUnitIsSentAsIs) {
  EXPECT_EQ(Current(10, kSecondUs), std::make_pair(10u, RateLimit::SECOND));
  EXPECT_EQ(Current(5, kMinuteUs), std::make_pair(5u, RateLimit::MINUTE));
  EXPECT_EQ(Current(1000, kHourUs), std::make_pair(1000u, RateLimit::HOUR));
  EXPECT_EQ(Current(7, kDayUs), std::make_pair(7u, RateLimit::DAY));
  EXPECT_EQ(Current(3, 7 * kDayUs), std::make_pair(3u, RateLimit::WEEK));
  EXPECT_EQ(Current(2, 30 * kDayUs), std::make_pair(2u, RateLimit::MONTH));
  EXPECT_EQ(Current(1, 365 * kDayUs), std::make_pair(1u, RateLimit::YEAR));
  EXPECT_EQ(Current(0, kSecondUs), std::make_pair(0u, RateLimit::SECOND));  // a block stays one
  EXPECT_EQ(Current(0xFFFFFFFFu, kSecondUs), std::make_pair(0xFFFFFFFFu, RateLimit::SECOND));
}

TEST(CurrentLimitTest, OtherWindowsKeepTheRateOverTheLongestUnitNotLongerThanTheWindow) {
  EXPECT_EQ(Current(100, 10 * kSecondUs), std::make_pair(10u, RateLimit::SECOND));
  EXPECT_EQ(Current(5, 90 * kMinuteUs), std::make_pair(3u, RateLimit::HOUR));  // 3.33, rounded down
  EXPECT_EQ(Current(1000, 10 * kDayUs),
            std::make_pair(100u, RateLimit::DAY));  // WEEK is not scaled to
  EXPECT_EQ(Current(600, kDayUs * 365 * 2), std::make_pair(300u, RateLimit::YEAR));
  EXPECT_EQ(Current(0, 10 * kSecondUs), std::make_pair(0u, RateLimit::SECOND));
}

TEST(CurrentLimitTest, APositiveLimitNeverReadsAsZero) {
  EXPECT_EQ(Current(1, 90 * kSecondUs), std::make_pair(40u, RateLimit::HOUR));
  EXPECT_EQ(Current(1, 5 * kSecondUs), std::make_pair(12u, RateLimit::MINUTE));
  EXPECT_EQ(Current(1, kDayUs * 365 * 3), std::make_pair(1u, RateLimit::YEAR));  // beyond a year
}

TEST(CurrentLimitTest, SubSecondWindowsScaleUpToASecondAndCap) {
  EXPECT_EQ(Current(1, 100000), std::make_pair(10u, RateLimit::SECOND));
  EXPECT_EQ(Current(3, 250000), std::make_pair(12u, RateLimit::SECOND));
  EXPECT_EQ(Current(0xFFFFFFFFu, 1), std::make_pair(0xFFFFFFFFu, RateLimit::SECOND));  // capped
}

TEST(CurrentLimitTest, TokenBucketReportsItsRateNotItsBurst) {
  const RateLimit r = CurrentLimit(Limit{
      .algorithm = Algorithm::kTokenBucket, .requests = 100, .window_us = kSecondUs, .burst = 200});
  EXPECT_EQ(r.requests_per_unit(), 100u);
  EXPECT_EQ(r.unit(), RateLimit::SECOND);
}

}  // namespace
}  // namespace sluice::rls
