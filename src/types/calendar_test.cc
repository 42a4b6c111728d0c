// Tests for types/calendar.h against the system's tz database (Debian's tzdata): day, ISO week,
// month and year windows in zones east and west of UTC, across daylight-saving changes (a 23- and
// a 25-hour day in Berlin, a skipped midnight in Santiago), months of 28 to 31 days, and instants
// on a window's edges.

#include "types/calendar.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/units.h"

namespace sluice::types {
namespace {

using sluice::testing::kHour;
using sluice::testing::kMinute;

absl::TimeZone Zone(const std::string& name) {
  auto zone = LoadCalendarZone(name);
  EXPECT_TRUE(zone.ok()) << zone.status();
  return zone.value_or(absl::UTCTimeZone());
}

// The instant of a UTC date and time, in µs.
int64_t Utc(int y, int mo, int d, int h = 0, int mi = 0) {
  return absl::ToUnixMicros(
      absl::FromCivil(absl::CivilSecond(y, mo, d, h, mi, 0), absl::UTCTimeZone()));
}

TEST(CalendarTest, UnitsAreNamedAsInTheRules) {
  for (const auto unit :
       {CalendarUnit::kDay, CalendarUnit::kWeek, CalendarUnit::kMonth, CalendarUnit::kYear}) {
    EXPECT_EQ(ParseCalendarUnit(CalendarUnitName(unit)), unit);
  }
  EXPECT_EQ(CalendarUnitName(CalendarUnit::kMonth), "calendar_month");
  EXPECT_EQ(ParseCalendarUnit("month"), std::nullopt);
  EXPECT_EQ(ParseCalendarUnit("calendar_hour"), std::nullopt);
}

TEST(CalendarTest, AnUnknownZoneIsAnErrorNamingIt) {
  const auto zone = LoadCalendarZone("Mars/Olympus_Mons");
  ASSERT_FALSE(zone.ok());
  EXPECT_NE(zone.status().message().find("'Mars/Olympus_Mons'"), std::string::npos);
  EXPECT_FALSE(LoadCalendarZone("").ok());
}

TEST(CalendarTest, AUtcDayIsAnEpochAlignedDay) {
  const int64_t t = Utc(2024, 5, 17, 13, 5);
  EXPECT_EQ(CalendarWindow(CalendarUnit::kDay, Zone("UTC"), t),
            (CalendarBounds{Utc(2024, 5, 17), Utc(2024, 5, 18)}));
}

TEST(CalendarTest, ALocalDayStartsAtLocalMidnight) {
  // Kolkata is UTC+5:30: its 17 May starts at 18:30 UTC on the 16th.
  EXPECT_EQ(CalendarWindow(CalendarUnit::kDay, Zone("Asia/Kolkata"), Utc(2024, 5, 16, 20)),
            (CalendarBounds{Utc(2024, 5, 16, 18, 30), Utc(2024, 5, 17, 18, 30)}));
  // New York in summer is UTC-4: 16 May local ends at 04:00 UTC on the 17th.
  EXPECT_EQ(CalendarWindow(CalendarUnit::kDay, Zone("America/New_York"), Utc(2024, 5, 17, 3)),
            (CalendarBounds{Utc(2024, 5, 16, 4), Utc(2024, 5, 17, 4)}));
}

TEST(CalendarTest, DaysAcrossDaylightSavingChangesAre23Or25Hours) {
  const absl::TimeZone berlin = Zone("Europe/Berlin");
  // 31 March 2024: clocks go from 02:00 to 03:00 (UTC+1 to UTC+2).
  const CalendarBounds spring = CalendarWindow(CalendarUnit::kDay, berlin, Utc(2024, 3, 31, 12));
  EXPECT_EQ(spring, (CalendarBounds{Utc(2024, 3, 30, 23), Utc(2024, 3, 31, 22)}));
  EXPECT_EQ(spring.end_us - spring.start_us, 23 * kHour);
  // 27 October 2024: from 03:00 back to 02:00.
  const CalendarBounds autumn = CalendarWindow(CalendarUnit::kDay, berlin, Utc(2024, 10, 27, 1));
  EXPECT_EQ(autumn, (CalendarBounds{Utc(2024, 10, 26, 22), Utc(2024, 10, 27, 23)}));
  EXPECT_EQ(autumn.end_us - autumn.start_us, 25 * kHour);
}

TEST(CalendarTest, ASkippedMidnightStartsTheDayAtTheJump) {
  // Santiago, 8 September 2024: at midnight (UTC-4) clocks jump to 01:00 (UTC-3); the day
  // starts at 04:00 UTC and lasts 23 hours.
  const absl::TimeZone santiago = Zone("America/Santiago");
  const CalendarBounds day = CalendarWindow(CalendarUnit::kDay, santiago, Utc(2024, 9, 8, 12));
  EXPECT_EQ(day, (CalendarBounds{Utc(2024, 9, 8, 4), Utc(2024, 9, 9, 3)}));
  // The instant just before the jump is still the 7th.
  EXPECT_EQ(CalendarWindow(CalendarUnit::kDay, santiago, day.start_us - 1).end_us, day.start_us);
}

TEST(CalendarTest, IsoWeeksStartOnMonday) {
  const absl::TimeZone berlin = Zone("Europe/Berlin");
  // Wednesday 3 January 2024: the week of Monday 1 January (local midnight: 23:00 UTC before).
  const CalendarBounds week = CalendarWindow(CalendarUnit::kWeek, berlin, Utc(2024, 1, 3, 12));
  EXPECT_EQ(week, (CalendarBounds{Utc(2023, 12, 31, 23), Utc(2024, 1, 7, 23)}));
  // A Sunday belongs to the week before it; a Monday starts one.
  EXPECT_EQ(CalendarWindow(CalendarUnit::kWeek, berlin, Utc(2024, 1, 7, 12)), week);
  EXPECT_EQ(CalendarWindow(CalendarUnit::kWeek, berlin, week.end_us).start_us, week.end_us);
  // The week of the spring change is an hour short.
  const CalendarBounds short_week =
      CalendarWindow(CalendarUnit::kWeek, berlin, Utc(2024, 3, 28, 12));
  EXPECT_EQ(short_week.end_us - short_week.start_us, 7 * 24 * kHour - kHour);
}

TEST(CalendarTest, MonthsHaveTheirOwnLengths) {
  const absl::TimeZone berlin = Zone("Europe/Berlin");
  const auto hours = [&](int y, int m) {
    const CalendarBounds b = CalendarWindow(CalendarUnit::kMonth, berlin, Utc(y, m, 15, 12));
    return (b.end_us - b.start_us) / kHour;
  };
  EXPECT_EQ(hours(2024, 2), 29 * 24);  // a leap February
  EXPECT_EQ(hours(2023, 2), 28 * 24);
  EXPECT_EQ(hours(2024, 4), 30 * 24);
  EXPECT_EQ(hours(2024, 3), 31 * 24 - 1);   // with the spring change
  EXPECT_EQ(hours(2024, 10), 31 * 24 + 1);  // with the autumn change
  // "Reset on the 1st at midnight in the customer's time zone".
  EXPECT_EQ(CalendarWindow(CalendarUnit::kMonth, Zone("America/New_York"), Utc(2024, 3, 1, 3)),
            (CalendarBounds{Utc(2024, 2, 1, 5), Utc(2024, 3, 1, 5)}));
}

TEST(CalendarTest, AYearRunsFromJanuaryFirstToJanuaryFirst) {
  EXPECT_EQ(CalendarWindow(CalendarUnit::kYear, Zone("America/New_York"), Utc(2024, 7, 4)),
            (CalendarBounds{Utc(2024, 1, 1, 5), Utc(2025, 1, 1, 5)}));
  EXPECT_EQ(CalendarWindow(CalendarUnit::kYear, Zone("UTC"), Utc(2024, 12, 31, 23, 59)).end_us,
            Utc(2025, 1, 1));
}

TEST(CalendarTest, EveryInstantIsInItsWindowAndWindowsTileTime) {
  // A year of instants 7 h 13 min apart, in three zones and every unit: start <= t < end, and
  // the window after a window starts where it ends.
  for (const char* name : {"Europe/Berlin", "America/Santiago", "Australia/Lord_Howe"}) {
    const absl::TimeZone zone = Zone(name);
    for (const auto unit :
         {CalendarUnit::kDay, CalendarUnit::kWeek, CalendarUnit::kMonth, CalendarUnit::kYear}) {
      for (int64_t t = Utc(2024, 1, 1); t < Utc(2025, 1, 1); t += 7 * kHour + 13 * kMinute) {
        const CalendarBounds b = CalendarWindow(unit, zone, t);
        ASSERT_LE(b.start_us, t) << name << " " << CalendarUnitName(unit);
        ASSERT_LT(t, b.end_us) << name << " " << CalendarUnitName(unit);
        ASSERT_EQ(CalendarWindow(unit, zone, b.end_us).start_us, b.end_us) << name;
        ASSERT_EQ(CalendarWindow(unit, zone, b.end_us - 1), b) << name;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::types

namespace sluice {
namespace {

constexpr int64_t kCalendarHour = sluice::testing::kHour;

int64_t UtcAt(int y, int mo, int d, int h = 0) {
  return absl::ToUnixMicros(
      absl::FromCivil(absl::CivilSecond(y, mo, d, h, 0, 0), absl::UTCTimeZone()));
}

TEST(CalendarValueTest, MakeNamesWhatIsUnknown) {
  const auto unit = Calendar::Make("calendar_fortnight", "UTC");
  ASSERT_FALSE(unit.ok());
  EXPECT_THAT(std::string(unit.status().message()), ::testing::HasSubstr("calendar_fortnight"));
  const auto zone = Calendar::Make("calendar_day", "Europe/Atlantis");
  ASSERT_FALSE(zone.ok());
  EXPECT_THAT(std::string(zone.status().message()), ::testing::HasSubstr("Europe/Atlantis"));
}

TEST(CalendarValueTest, WindowsAgreeWithTheZoneRulesWhateverTheCacheHolds) {
  // Six calendars asked in turn (more than a thread remembers), and a calendar made again after
  // another was dropped: each answer is the zone's own.
  std::vector<Calendar> calendars;
  for (const char* zone : {"Europe/Berlin", "America/New_York", "Asia/Kolkata"}) {
    for (const char* unit : {"calendar_day", "calendar_month"}) {
      calendars.push_back(*Calendar::Make(unit, zone));
    }
  }
  for (int64_t t = UtcAt(2024, 3, 1); t < UtcAt(2024, 4, 15); t += 5 * kCalendarHour + 7) {
    for (const Calendar& c : calendars) {
      const auto zone = *types::LoadCalendarZone(c.time_zone());
      ASSERT_EQ(c.WindowAt(t), types::CalendarWindow(c.unit(), zone, t))
          << c.unit_name() << " " << c.time_zone();
    }
  }
  calendars.clear();
  const Calendar fresh = *Calendar::Make("calendar_year", "UTC");
  EXPECT_EQ(fresh.WindowAt(UtcAt(2024, 3, 31, 12)),
            (Calendar::Window{UtcAt(2024, 1, 1), UtcAt(2025, 1, 1)}));
}

TEST(CalendarValueTest, EqualByUnitAndZoneAndSoAreTheirLimitIds) {
  const Calendar a = *Calendar::Make("calendar_month", "Europe/Berlin");
  const Calendar b = *Calendar::Make("calendar_month", "Europe/Berlin");
  const Calendar other_zone = *Calendar::Make("calendar_month", "America/New_York");
  const Calendar other_unit = *Calendar::Make("calendar_week", "Europe/Berlin");
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a == other_zone);
  EXPECT_FALSE(a == other_unit);
  EXPECT_EQ(LimitId(CalendarLimit(100, a)), LimitId(CalendarLimit(100, b)));
  EXPECT_NE(LimitId(CalendarLimit(100, a)), LimitId(CalendarLimit(100, other_zone)));
  Limit plain = CalendarLimit(100, a);
  plain.calendar.reset();
  EXPECT_NE(LimitId(CalendarLimit(100, a)), LimitId(plain));  // not a 30-day window's state
  EXPECT_EQ(DescribeLimit(CalendarLimit(100, a)), "100/calendar_month(Europe/Berlin) fixed_window");
}

TEST(CalendarValueTest, ACalendarLimitIsAFixedWindowOfItsNominalSpan) {
  const Calendar week = *Calendar::Make("calendar_week", "UTC");
  Limit limit = CalendarLimit(5, week);
  EXPECT_EQ(limit.window_us, 7 * 24 * kCalendarHour);
  EXPECT_TRUE(ValidateLimit(limit).ok());
  limit.algorithm = Algorithm::kTokenBucket;
  EXPECT_THAT(std::string(ValidateLimit(limit).message()),
              ::testing::HasSubstr("applies to fixed_window, not token_bucket"));
  limit = CalendarLimit(5, week);
  limit.window_us = kCalendarHour;
  EXPECT_FALSE(ValidateLimit(limit).ok());
}

}  // namespace
}  // namespace sluice
