// The rules behind sluice::Calendar (include/sluice/limit.h). Windows that follow the calendar of
// a time zone: a day from local midnight to the next, an ISO
// week from Monday's midnight, a month from the 1st, a year from January 1st. Their length
// varies (a day is 23 or 25 hours across a daylight-saving change, a month 28 to 31 days), so a
// quota over one is counted per window [start, end) found here, not per a fixed window_us.
// A midnight that a zone skips (its clocks jump past it) starts the day at the jump.
//
// Thread safety: pure functions (absl::TimeZone is a value, safe to share). Units: µs since the
// Unix epoch. Zones come from the system's tz database (/usr/share/zoneinfo, Debian's tzdata).

#ifndef SLUICE_TYPES_CALENDAR_H_
#define SLUICE_TYPES_CALENDAR_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sluice/limit.h"

namespace sluice::types {

using CalendarUnit = Calendar::Unit;
using CalendarBounds = Calendar::Window;

// "calendar_day", "calendar_week", "calendar_month", "calendar_year"; nullopt for anything else.
std::optional<CalendarUnit> ParseCalendarUnit(std::string_view name);
std::string_view CalendarUnitName(CalendarUnit unit);

// The zone of an IANA name ("Europe/Berlin", "UTC"); an error naming it when the system's tz
// database does not have it.
absl::StatusOr<absl::TimeZone> LoadCalendarZone(std::string_view name);

// The window of `unit` in `zone` that holds the instant `t_us`: start_us <= t_us < end_us.
CalendarBounds CalendarWindow(CalendarUnit unit, const absl::TimeZone& zone, int64_t t_us);

}  // namespace sluice::types

#endif  // SLUICE_TYPES_CALENDAR_H_
