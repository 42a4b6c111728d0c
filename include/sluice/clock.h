// sluice/clock.h — the injected source of time.
//
// Nothing in sluice reads a clock except through this interface, so tests can jump time
// (`ManualClock`) and a Redis backend can use the server's time instead. A clock has two
// readings, both in µs: wall time (NowMicros), which windows are aligned to, and monotonic time
// (MonotonicMicros), which durations are measured in: latencies, timeouts and deadlines, the
// Redis circuit breaker.
// Implementations must be safe for concurrent use without external synchronization.

#ifndef SLUICE_CLOCK_H_
#define SLUICE_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace sluice {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds since the unix epoch. Window algorithms align windows to the epoch, so this is
  // wall time. It may jump backwards; the store clamps it (see MemoryStore).
  virtual int64_t NowMicros() const = 0;
  // Microseconds since an arbitrary, fixed start (the boot, for the system's clock). Never goes
  // back and does not follow steps of the wall clock; only differences of two readings of the
  // same clock mean anything.
  virtual int64_t MonotonicMicros() const = 0;
};

// The system's clocks: real time (CLOCK_REALTIME) and std::chrono::steady_clock.
class SystemClock final : public Clock {
 public:
  int64_t NowMicros() const override;
  int64_t MonotonicMicros() const override;
  // A process-wide instance; never destroyed.
  static const SystemClock* Get();
};

// A clock that only moves when told to. For tests and for replaying traces.
class ManualClock final : public Clock {
 public:
  // Where monotonic time starts unless told: a day after its origin, so that code which takes
  // a zero reading for "never" sees a time well after it, as with the system's clock.
  static constexpr int64_t kMonotonicStartMicros = int64_t{86400} * 1000000;

  explicit ManualClock(int64_t now_us = 0, int64_t monotonic_us = kMonotonicStartMicros)
      : now_us_(now_us), monotonic_us_(monotonic_us) {}
  int64_t NowMicros() const override { return now_us_.load(std::memory_order_relaxed); }
  int64_t MonotonicMicros() const override { return monotonic_us_.load(std::memory_order_relaxed); }
  // Steps wall time only, as NTP steps the system's clock: monotonic time does not move.
  void Set(int64_t now_us) { now_us_.store(now_us, std::memory_order_relaxed); }
  // Time passes: both readings move by `delta_us` (>= 0; monotonic time never goes back).
  void Advance(int64_t delta_us) {
    now_us_.fetch_add(delta_us, std::memory_order_relaxed);
    monotonic_us_.fetch_add(delta_us, std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> now_us_;
  std::atomic<int64_t> monotonic_us_;
};

}  // namespace sluice

#endif  // SLUICE_CLOCK_H_
