// Durations in whole milliseconds, for the outputs that speak them (the JSON check API, replay).

#ifndef SLUICE_UTIL_MILLIS_H_
#define SLUICE_UTIL_MILLIS_H_

#include <cstdint>

namespace sluice {

// Rounds microseconds up to whole milliseconds; a negative value (Decision::kNever) stays as it
// is.
inline int64_t CeilMillis(int64_t us) { return us < 0 ? us : (us + 999) / 1000; }

}  // namespace sluice

#endif  // SLUICE_UTIL_MILLIS_H_
