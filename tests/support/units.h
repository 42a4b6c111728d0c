// Durations in µs (sluice's unit of time: Limit::window_us, Clock::NowUs) for tests to spell
// times with, and kT0, an instant well inside the Unix era (2023-11-14 22:13:20 UTC, 20 s into
// its minute) that a manual clock starts from. Constants only.

#ifndef SLUICE_TESTS_SUPPORT_UNITS_H_
#define SLUICE_TESTS_SUPPORT_UNITS_H_

#include <cstdint>

namespace sluice::testing {

inline constexpr int64_t kUs = 1;
inline constexpr int64_t kMs = 1000;
inline constexpr int64_t kSecond = 1000 * kMs;
inline constexpr int64_t kMinute = 60 * kSecond;
inline constexpr int64_t kHour = 60 * kMinute;
inline constexpr int64_t kDay = 24 * kHour;
inline constexpr int64_t kT0 = int64_t{1700000000} * kSecond;

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_UNITS_H_
