// sluice/clock.h — the injected source of time.
//
// Nothing in sluice reads a clock except through this interface, so tests can jump time
// (`ManualClock`) and a Redis backend can use the server's time instead.
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
};

// The system's real-time clock.
class SystemClock final : public Clock {
 public:
  int64_t NowMicros() const override;
  // A process-wide instance; never destroyed.
  static const SystemClock* Get();
};

// A clock that only moves when told to. For tests and for replaying traces.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_us = 0) : now_us_(now_us) {}
  int64_t NowMicros() const override { return now_us_.load(std::memory_order_relaxed); }
  void Set(int64_t now_us) { now_us_.store(now_us, std::memory_order_relaxed); }
  void Advance(int64_t delta_us) { now_us_.fetch_add(delta_us, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_us_;
};

}  // namespace sluice

#endif  // SLUICE_CLOCK_H_
