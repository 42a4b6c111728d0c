// sluice/limiter.h — an in-process rate limiter for one limit.
//
// For several limits decided together, refunds, or Redis, see sluice/rate_limiter.h.
//
//   auto limiter = sluice::Limiter::Create({.algorithm = sluice::Algorithm::kTokenBucket,
//                                           .requests = 10, .window_us = 1'000'000,
//                                           .burst = 20});
//   if (!limiter.ok()) ...;
//   sluice::Decision d = (*limiter)->Decide(user_id);
//   if (!d.allowed) reply_429(d.retry_after_us);
//
// A Limiter keeps the state of every key it has seen in memory (bounded by Options::max_keys;
// idle keys are reclaimed, see docs/algorithms.md). Safe for concurrent use without external
// synchronization.

#ifndef SLUICE_LIMITER_H_
#define SLUICE_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "sluice/on_full.h"

namespace sluice {

class Limiter {
 public:
  struct Options {
    // Not owned; must outlive the limiter.
    const Clock* clock = SystemClock::Get();
    // Upper bound on keys held at once. A key's state is never dropped while it is in use;
    // when the limiter is full, a new key is decided as `on_full` says (sluice/on_full.h).
    size_t max_keys = size_t{1} << 20;
    // Independent locks; more shards, less contention between threads.
    size_t shards = 16;
    OnFull on_full = OnFull::kShared;
  };

  // InvalidArgument when `limit` fails ValidateLimit.
  static absl::StatusOr<std::unique_ptr<Limiter>> Create(const Limit& limit,
                                                         const Options& options);
  static absl::StatusOr<std::unique_ptr<Limiter>> Create(const Limit& limit) {
    return Create(limit, Options{});
  }
  ~Limiter();

  // Decides a request of `cost` (0 = look without consuming) for `key` at the clock's time.
  Decision Decide(std::string_view key, uint64_t cost = 1);
  // Same at an explicit time in µs; a time earlier than one already used counts as that one.
  Decision DecideAt(std::string_view key, uint64_t cost, int64_t now_us);
  // Forgets one key's state. True if it had any.
  bool Reset(std::string_view key);

  const Limit& limit() const { return limit_; }
  // Keys currently holding state.
  size_t size() const;

 private:
  struct Store;  // the key states (defined in limiter.cc)
  Limiter(const Limit& limit, const Options& options);

  const Limit limit_;
  const uint64_t limit_id_;
  std::unique_ptr<Store> store_;
};

}  // namespace sluice

#endif  // SLUICE_LIMITER_H_
