// A circuit breaker: after `failures_to_open` consecutive failures (timeouts, lost connections)
// calls are refused at once for `open_for`, so a dead Redis costs microseconds per request, not a
// timeout each; then one call at a time is let through as a probe (half-open) until one succeeds,
// which closes the breaker again. With the default 1 s, decisions go back to Redis within about
// a second of it returning. Time is the injected clock's monotonic reading. Safe for concurrent
// use.

#ifndef SLUICE_REDIS_BREAKER_H_
#define SLUICE_REDIS_BREAKER_H_

#include <chrono>
#include <cstdint>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sluice/clock.h"

namespace sluice::redis {

class Breaker {
 public:
  enum class State { kClosed, kOpen, kHalfOpen };

  struct Options {
    int failures_to_open = 5;
    std::chrono::milliseconds open_for{1000};
  };

  // `clock` is not owned and must outlive the breaker.
  explicit Breaker(Options options, const Clock* clock = SystemClock::Get())
      : options_(options), clock_(clock) {}

  // May a call go ahead now? When open and the wait is over, the first caller gets to probe.
  bool Allow();
  // The outcome of a call that was allowed.
  void Succeeded();
  void Failed();

  State state() const;
  uint64_t opened() const;  // how many times it has opened
  // Closed, and the last call did not fail (readiness asks this, and more: RedisStore::GetHealth).
  bool Healthy() const;

  static std::string_view Name(State s);

 private:
  const Options options_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kClosed;
  int consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  bool probing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t retry_at_us_ ABSL_GUARDED_BY(mu_) = 0;  // while open: the monotonic time a probe may go
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_BREAKER_H_
