// What a connection knows of its Redis server's clock, so that it can hand the server a deadline
// in the server's own time (decide.lua changes nothing once TIME is past it). The estimate is a
// lower bound of the offset (Redis time - steady time), so a deadline passed through it errs
// early, never late; samples older than 2 x kPeriod are forgotten (the clock may step back).
//
// Thread safety: requires external synchronization (one connection's I/O thread uses it).
// Units: microseconds; steady times are the connection's monotonic times (MonoTime).
//
// Design: docs/redis.md#the-connection-and-rediss-clock.

#ifndef SLUICE_REDIS_REDIS_CLOCK_H_
#define SLUICE_REDIS_REDIS_CLOCK_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

namespace sluice::redis {

class RedisClock {
 public:
  using SteadyClock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kPeriod{10};

  // A reply carrying Redis's time `redis_us` (µs since the epoch) arrived at `received`.
  void Sample(int64_t redis_us, SteadyClock::time_point received) {
    if (!current_ || received - period_start_ >= kPeriod) {
      // A new period: the last one stays for one more, unless it ended long ago.
      previous_ = current_ && received - period_start_ < 2 * kPeriod ? current_ : std::nullopt;
      current_.reset();
      period_start_ = received;
    }
    const int64_t offset = redis_us - Micros(received);
    current_ = current_ ? std::max(*current_, offset) : offset;
  }

  // The earliest Redis time (µs since the epoch) that steady time `at` can be; nullopt before
  // the first sample.
  std::optional<int64_t> EarliestRedisTime(SteadyClock::time_point at) const {
    if (!current_) return std::nullopt;
    const int64_t offset = previous_ ? std::max(*previous_, *current_) : *current_;
    return Micros(at) + offset;
  }

 private:
  static int64_t Micros(SteadyClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  }

  SteadyClock::time_point period_start_{};
  std::optional<int64_t> current_;   // the best lower bound of the offset in this period
  std::optional<int64_t> previous_;  // and in the one before
};

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_REDIS_CLOCK_H_
