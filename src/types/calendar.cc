#include "types/calendar.h"

#include <array>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/civil_time.h"

namespace sluice::types {
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

}  // namespace sluice::types

namespace sluice {

struct Calendar::Impl {
  Unit unit;
  std::string name;
  absl::TimeZone zone;
};

namespace {

// Every calendar loaded, by unit and zone name; never freed, so that a Calendar is a pointer.
struct LoadedCalendars {
  absl::Mutex mu;
  absl::flat_hash_map<std::pair<Calendar::Unit, std::string>, std::unique_ptr<Calendar::Impl>>
      by_name ABSL_GUARDED_BY(mu);
};

LoadedCalendars& Loaded() {
  static auto* loaded = new LoadedCalendars;  // never destroyed: calendars outlive statics
  return *loaded;
}

// The last windows this thread found, by calendar; a new one replaces the oldest.
struct RecentWindow {
  const void* calendar = nullptr;
  Calendar::Window window;
};
struct RecentWindows {
  std::array<RecentWindow, 4> slots;
  size_t next = 0;
};
thread_local RecentWindows recent_windows;

}  // namespace

absl::StatusOr<Calendar> Calendar::Make(std::string_view unit, std::string_view time_zone) {
  const std::optional<Unit> parsed = types::ParseCalendarUnit(unit);
  if (!parsed) {
    return absl::InvalidArgumentError(
        "unknown calendar window '" + std::string(unit) +
        "' (calendar_day, calendar_week, calendar_month or calendar_year)");
  }
  return Make(*parsed, time_zone);
}

absl::StatusOr<Calendar> Calendar::Make(Unit unit, std::string_view time_zone) {
  LoadedCalendars& loaded = Loaded();
  absl::MutexLock lock(&loaded.mu);
  auto [it, fresh] = loaded.by_name.try_emplace({unit, std::string(time_zone)}, nullptr);
  if (fresh) {
    absl::StatusOr<absl::TimeZone> zone = types::LoadCalendarZone(time_zone);
    if (!zone.ok()) {
      loaded.by_name.erase(it);
      return zone.status();
    }
    it->second = std::make_unique<Impl>(Impl{unit, std::string(time_zone), *zone});
  }
  return Calendar(it->second.get());
}

Calendar::Unit Calendar::unit() const { return impl_->unit; }

std::string_view Calendar::unit_name() const { return types::CalendarUnitName(impl_->unit); }

const std::string& Calendar::time_zone() const { return impl_->name; }

int64_t Calendar::NominalUs() const {
  constexpr int64_t kDayUs = int64_t{86400} * 1000000;
  switch (impl_->unit) {
    case Unit::kDay:
      return kDayUs;
    case Unit::kWeek:
      return 7 * kDayUs;
    case Unit::kMonth:
      return 30 * kDayUs;
    case Unit::kYear:
      return 365 * kDayUs;
  }
  return kDayUs;
}

Calendar::Window Calendar::WindowAt(int64_t t_us) const {
  RecentWindows& recent = recent_windows;
  for (const RecentWindow& r : recent.slots) {
    if (r.calendar == impl_ && r.window.start_us <= t_us && t_us < r.window.end_us) {
      return r.window;
    }
  }
  const Window window = types::CalendarWindow(impl_->unit, impl_->zone, t_us);
  recent.slots[recent.next] = {impl_, window};
  recent.next = (recent.next + 1) % recent.slots.size();
  return window;
}

}  // namespace sluice
