// A clock for tests against real processes: it follows the system's clock, so that real
// timeouts still pass, and a test can make it jump ahead at once where it would otherwise sleep
// (a hold of a second, a breaker's wait). Both readings jump together. Safe for concurrent use.
//
// A jump also passes the deadlines of calls in flight at that moment, as that much real time
// would: jump when nothing the test counts on is in flight.

#ifndef SLUICE_TESTS_SUPPORT_JUMP_CLOCK_H_
#define SLUICE_TESTS_SUPPORT_JUMP_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "sluice/clock.h"

namespace sluice::testing {

class JumpClock final : public Clock {
 public:
  int64_t NowMicros() const override { return SystemClock::Get()->NowMicros() + jumped_us(); }
  int64_t MonotonicMicros() const override {
    return SystemClock::Get()->MonotonicMicros() + jumped_us();
  }
  void Advance(std::chrono::microseconds by) {
    jumped_us_.fetch_add(by.count(), std::memory_order_relaxed);
  }

 private:
  int64_t jumped_us() const { return jumped_us_.load(std::memory_order_relaxed); }
  std::atomic<int64_t> jumped_us_{0};
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_JUMP_CLOCK_H_
