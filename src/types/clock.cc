#include "sluice/clock.h"

#include <time.h>

#include <chrono>

namespace sluice {

int64_t SystemClock::NowMicros() const {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

int64_t SystemClock::MonotonicMicros() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const SystemClock* SystemClock::Get() {
  static const SystemClock* const clock = new SystemClock();
  return clock;
}

}  // namespace sluice
