#include "sluice/clock.h"

#include <time.h>

namespace sluice {

int64_t SystemClock::NowMicros() const {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

const SystemClock* SystemClock::Get() {
  static const SystemClock* const clock = new SystemClock();
  return clock;
}

}  // namespace sluice
