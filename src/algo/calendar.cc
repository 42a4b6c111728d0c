#include "algo/calendar.h"

#include <string>

#include "absl/time/civil_time.h"

namespace sluice::algo {
namespace {

constexpr std::string_view kNames[] = {"calendar_day", "calendar_week", "calendar_month",
                                       "calendar_year"};

int64_t StartOf(absl::CivilSecond civil, const absl::TimeZone& zone) {
  // FromCivil: a skipped civil time maps to the instant of the jump, a repeated one to its first
  // occurrence: either way the earliest instant of the local day.
  return absl::ToUnixMicros(absl::FromCivil(civil, zone));
}

}  // namespace

std::optional<CalendarUnit> ParseCalendarUnit(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (name == kNames[i]) return static_cast<CalendarUnit>(i);
  }
  return std::nullopt;
}

std::string_view CalendarUnitName(CalendarUnit unit) { return kNames[static_cast<size_t>(unit)]; }

absl::StatusOr<absl::TimeZone> LoadCalendarZone(std::string_view name) {
  absl::TimeZone zone;
  if (name.empty() || !absl::LoadTimeZone(std::string(name), &zone)) {
    return absl::InvalidArgumentError("unknown time zone '" + std::string(name) +
                                      "' (an IANA name such as Europe/Berlin, from the system's "
                                      "tz database: Debian's tzdata)");
  }
  return zone;
}

CalendarBounds CalendarWindow(CalendarUnit unit, const absl::TimeZone& zone, int64_t t_us) {
  const absl::CivilDay day = absl::ToCivilDay(absl::FromUnixMicros(t_us), zone);
  absl::CivilSecond start, end;
  switch (unit) {
    case CalendarUnit::kDay:
      start = absl::CivilSecond(day);
      end = absl::CivilSecond(day + 1);
      break;
    case CalendarUnit::kWeek: {
      // ISO 8601: weeks start on Monday. The Monday on or before `day`.
      const absl::CivilDay monday = absl::PrevWeekday(day + 1, absl::Weekday::monday);
      start = absl::CivilSecond(monday);
      end = absl::CivilSecond(monday + 7);
      break;
    }
    case CalendarUnit::kMonth: {
      const absl::CivilMonth month(day);
      start = absl::CivilSecond(month);
      end = absl::CivilSecond(month + 1);
      break;
    }
    case CalendarUnit::kYear: {
      const absl::CivilYear year(day);
      start = absl::CivilSecond(year);
      end = absl::CivilSecond(year + 1);
      break;
    }
  }
  return {.start_us = StartOf(start, zone), .end_us = StartOf(end, zone)};
}

}  // namespace sluice::algo
