// sluice/concurrency_limiter.h — at most N requests in flight per key, in this process or on
// Redis (then across every process that shares it).
//
//   auto reports = sluice::ConcurrencyLimiter::Create(3, 60'000'000);  // 3 at once, 60 s at most
//   if (!reports.ok()) ...;
//   absl::StatusOr<sluice::ConcurrencyLimiter::Hold> hold = (*reports)->Acquire(customer_id);
//   if (hold.ok() && !hold->held()) reply_429(hold->retry_after_us());
//   ...  // the work; the slot is given back when `hold` is destroyed (or hold->Release())
//
// A hold ends on its own max_hold after it was taken or renewed, so that the slot of a holder
// that crashed (or forgot) comes back. Thread safety: a ConcurrencyLimiter is safe for concurrent
// use; a Hold is a value that one thread at a time uses. Units: µs. Errors: absl::Status.

#ifndef SLUICE_CONCURRENCY_LIMITER_H_
#define SLUICE_CONCURRENCY_LIMITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/rate_limiter.h"

namespace sluice {

class ConcurrencyLimiter {
 public:
  // A hold of one of a key's slots, or a refusal (held() false). Move-only; gives its slot back
  // when destroyed, unless released already.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept { *this = std::move(other); }
    Hold& operator=(Hold&& other) noexcept;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { Release(); }

    bool held() const { return owner_ != nullptr; }
    // When not held: until the earliest of the key's holds ends (a release may come sooner);
    // -1 when the limit is 0.
    int64_t retry_after_us() const { return retry_after_us_; }
    // When held: the key's slots still free after this one.
    int64_t remaining() const { return remaining_; }
    // Gives the slot back now (nothing when not held, or released already).
    void Release();
    // Moves the hold's end to max_hold from now. NotFound when it had ended (its slot may be
    // another's by now: acquire again); FailedPrecondition when not held.
    absl::Status Renew();

   private:
    friend class ConcurrencyLimiter;
    ConcurrencyLimiter* owner_ = nullptr;  // null: not held (refused, released, moved from)
    std::string key_;
    uint64_t id_ = 0;
    int64_t retry_after_us_ = 0;
    int64_t remaining_ = 0;
  };

  // At most `n` holds at once per key, each lasting at most `max_hold_us` (> 0) unless renewed.
  // `options` as RateLimiter's: the clock (memory), the name (limiters of one name and equal n
  // and max_hold share their holds per key, on one Redis), memory sizes, or Redis.
  static absl::StatusOr<std::unique_ptr<ConcurrencyLimiter>> Create(
      uint64_t n, int64_t max_hold_us, const RateLimiter::Options& options);
  static absl::StatusOr<std::unique_ptr<ConcurrencyLimiter>> Create(uint64_t n,
                                                                    int64_t max_hold_us) {
    return Create(n, max_hold_us, RateLimiter::Options{});
  }
  // Holds still alive must not outlive the limiter.
  ~ConcurrencyLimiter();
  ConcurrencyLimiter(const ConcurrencyLimiter&) = delete;
  ConcurrencyLimiter& operator=(const ConcurrencyLimiter&) = delete;

  // A hold on one of `key`'s slots, or a refusal (held() false). An error when the store could
  // not answer (Redis unreachable or too slow): then nothing is held.
  absl::StatusOr<Hold> Acquire(std::string_view key);

 private:
  struct Impl;
  explicit ConcurrencyLimiter(std::unique_ptr<Impl> impl);
  absl::StatusOr<size_t> Finish(const Hold& hold, bool renew);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_CONCURRENCY_LIMITER_H_
