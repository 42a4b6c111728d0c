// Calendar quotas through the engine (issue 37, item 2): rules with `window: calendar_month` and a
// time_zone, a domain's `calendar_units`, and a request's own limit (RLS) in such a domain. The
// manual clock is set to instants on either side of local midnights in three zones, one of them
// across a daylight-saving change; every answer's reset is the time to the zone's next boundary.

#include <cstdint>
#include <string>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using test::Desc;
using test::EngineTest;
using test::Req;
using Code = DescriptorResult::Code;

int64_t CalendarUtc(int y, int mo, int d, int h = 0, int mi = 0) {
  return absl::ToUnixMicros(
      absl::FromCivil(absl::CivilSecond(y, mo, d, h, mi, 0), absl::UTCTimeZone()));
}

constexpr std::string_view kCalendarRules = R"yaml(domain: api
time_zone: America/New_York
descriptors:
  - key: berlin
    rate_limit: {requests: 3, window: calendar_month, time_zone: Europe/Berlin}
  - key: kolkata
    rate_limit: {requests: 2, window: calendar_day, time_zone: Asia/Kolkata}
  - key: new_york
    rate_limit: {requests: 1, window: calendar_week}
)yaml";

class CalendarEngineTest : public EngineTest {
 protected:
  void SetUp() override { Load(kCalendarRules); }

  const AppliedLimit& At(int64_t t_us, const std::string& key, uint64_t cost = 1) {
    clock_.Set(t_us);
    last_ = Check1("api", {{key, "acme"}}, cost);
    EXPECT_EQ(last_.descriptors[0].limits.size(), 1u);
    return last_.descriptors[0].limits[0];
  }

  Response last_;
};

TEST_F(CalendarEngineTest, AMonthInBerlinEndsAtItsLocalMidnightAcrossTheSpringChange) {
  // March 2024 in Berlin: from Feb 29 23:00 UTC to Mar 31 22:00 UTC (clocks went forward on
  // the 31st), so the month is an hour short of 31 days.
  const int64_t start = CalendarUtc(2024, 2, 29, 23), end = CalendarUtc(2024, 3, 31, 22);
  EXPECT_EQ(At(start, "berlin", 3).decision.reset_after_us, end - start);
  const AppliedLimit& late = At(end - 1, "berlin");
  EXPECT_FALSE(late.decision.allowed);
  EXPECT_EQ(late.decision.retry_after_us, 1);
  EXPECT_EQ(late.limit.calendar->time_zone(), "Europe/Berlin");
  const AppliedLimit& april = At(end, "berlin", 3);
  EXPECT_TRUE(april.decision.allowed);
  EXPECT_EQ(april.decision.reset_after_us, CalendarUtc(2024, 4, 30, 22) - end);
}

TEST_F(CalendarEngineTest, ADayInKolkataStartsAt1830Utc) {
  const int64_t midnight = CalendarUtc(2024, 5, 16, 18, 30);
  EXPECT_TRUE(At(midnight - 60 * test::kSecondUs, "kolkata", 2).decision.allowed);
  EXPECT_EQ(last_.descriptors[0].code, Code::kOk);
  EXPECT_EQ(At(midnight - 1, "kolkata").decision.retry_after_us, 1);
  EXPECT_EQ(last_.descriptors[0].code, Code::kOverLimit);
  const AppliedLimit& next = At(midnight, "kolkata");
  EXPECT_TRUE(next.decision.allowed);
  EXPECT_EQ(next.decision.remaining, 1);
  EXPECT_EQ(next.decision.reset_after_us, test::kDayUs);
}

TEST_F(CalendarEngineTest, AWeekInTheDomainsZoneStartsOnMonday) {
  // The domain's time_zone is New York's: the ISO week of Sunday 3 November 2024 (the autumn
  // change) runs from Monday 28 October 04:00 UTC to Monday 4 November 05:00 UTC.
  const int64_t sunday = CalendarUtc(2024, 11, 3, 12);
  const AppliedLimit& first = At(sunday, "new_york");
  EXPECT_TRUE(first.decision.allowed);
  EXPECT_EQ(first.decision.reset_after_us, CalendarUtc(2024, 11, 4, 5) - sunday);
  EXPECT_FALSE(At(CalendarUtc(2024, 11, 4, 4, 59), "new_york").decision.allowed);
  EXPECT_TRUE(At(CalendarUtc(2024, 11, 4, 5), "new_york").decision.allowed);
}

TEST_F(CalendarEngineTest, ARequestsOwnMonthFollowsTheCalendarWhenTheDomainAsks) {
  Load(R"yaml(domain: llm
time_zone: Europe/Berlin
calendar_units: true
descriptors:
  - key: team
    rate_limit: {unit: month, requests_per_unit: 2}
)yaml");
  const int64_t t = CalendarUtc(2024, 2, 10);
  clock_.Set(t);
  const Response rule = Check1("llm", {{"team", "a"}});
  ASSERT_EQ(rule.descriptors[0].limits.size(), 1u);
  EXPECT_EQ(rule.descriptors[0].limits[0].decision.reset_after_us,
            CalendarUtc(2024, 2, 29, 23) - t);  // 1 March, Berlin's midnight
  // A request's own limit (RLS RateLimitOverride) of unit month: the same calendar.
  Descriptor own = Desc({{"other", "b"}});
  own.limit =
      LimitOverride{.requests_per_unit = 5, .window_us = 30 * test::kDayUs, .unit = "month"};
  const Response r = Check(Req("llm", {own}));
  ASSERT_EQ(r.descriptors[0].limits.size(), 1u);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.reset_after_us, CalendarUtc(2024, 2, 29, 23) - t);
  // And an hour is still an hour.
  own.limit =
      LimitOverride{.requests_per_unit = 5, .window_us = 3600 * test::kSecondUs, .unit = "hour"};
  EXPECT_EQ(Check(Req("llm", {own})).descriptors[0].limits[0].decision.reset_after_us,
            3600 * test::kSecondUs);
}

}  // namespace
}  // namespace sluice::engine
