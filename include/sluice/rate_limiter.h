// sluice/rate_limiter.h — a rate limiter over several limits at once, in this process or on Redis:
// a request for a key is admitted only if every limit admits it, and then each consumes its cost.
//
//   auto limiter = sluice::RateLimiter::Create(
//       {{.algorithm = sluice::Algorithm::kTokenBucket, .requests = 10, .window_us = 1'000'000}},
//       sluice::RateLimiter::Options{});  // memory; set options.redis for Redis
//   absl::StatusOr<sluice::Verdict> verdict = (*limiter)->Decide(user_id);
//   if (verdict.ok() && !verdict->allowed) reply_429(verdict->retry_after_us);
//
// Thread safety: a RateLimiter is safe for concurrent use without external synchronization;
// Verdict and Consumption are values. Ownership: Options::clock is not owned. Units: integer
// microseconds (`_us`). Errors: absl::Status, never exceptions.
//
// Design: docs/library.md#the-contract (backends, sync and async calls, errors, failure policy).

#ifndef SLUICE_RATE_LIMITER_H_
#define SLUICE_RATE_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "sluice/on_full.h"

namespace sluice {

class RateLimiter;

// What an admitted request consumed, to give it back with RateLimiter::Refund (the work it was
// admitted for failed, was cancelled, ...). Move-only, so that it is given back at most once;
// empty when there is nothing to give back (a denied request, a peek, cost 0, an admission by
// the failure policy, or after Refund).
class Consumption {
 public:
  Consumption() = default;
  Consumption(Consumption&& other) noexcept { *this = std::move(other); }
  Consumption& operator=(Consumption&& other) noexcept {
    owner_ = std::exchange(other.owner_, nullptr);
    key_ = std::move(other.key_);
    other.key_.clear();
    cost_ = std::exchange(other.cost_, 0);
    decided_at_us_ = std::exchange(other.decided_at_us_, 0);
    return *this;
  }
  Consumption(const Consumption&) = delete;
  Consumption& operator=(const Consumption&) = delete;

  bool empty() const { return cost_ == 0; }
  const std::string& key() const { return key_; }
  // What each limit consumed.
  uint64_t cost() const { return cost_; }

 private:
  friend class RateLimiter;
  const RateLimiter* owner_ = nullptr;
  std::string key_;
  uint64_t cost_ = 0;
  int64_t decided_at_us_ = 0;  // in the backend's clock
};

// The answer to one request: every limit's decision, and the request's.
struct Verdict {
  // Every limit admitted the request (and each consumed its cost).
  bool allowed = false;
  // One per limit, in the order given to Create. When the request is denied, a limit that
  // would have admitted it says allowed, with nothing consumed.
  std::vector<Decision> decisions;
  // 0 when allowed; else the longest retry_after_us among the limits that deny (the wait until
  // the same request would be admitted with no other traffic), or Decision::kNever when one of
  // them never admits it (cost above its capacity, or N == 0).
  int64_t retry_after_us = 0;
  // The fewest remaining among the limits (requests of cost 1 still admitted after this one).
  int64_t remaining = 0;
  // leaky_bucket: the longest delay_us among the limits (hold the request that long).
  int64_t delay_us = 0;
  // Redis could not decide and the failure policy answered (nothing was consumed).
  bool fell_back = false;
  // What the request consumed; empty unless allowed with cost > 0 by the backend itself.
  Consumption consumption;
};

// What a RateLimiter on Redis answers while Redis cannot decide.
enum class FailurePolicy {
  kOpen,    // admit every request (availability over limits)
  kClosed,  // deny every request, retry after 1 s (limits over availability)
};

// How a RateLimiter reaches Redis (RateLimiter::RedisOptions).
struct RateLimiterRedisOptions {
  // redis://[user:pass@]host:port[/db]; the port defaults to 6379, the database to 0.
  std::string url;
  // `url` is one node of a Redis Cluster (the others are found from it).
  bool cluster = false;
  // Longest a decision may take on Redis (its wait for a connection included) before the
  // failure policy answers it. At least 1 ms.
  int64_t timeout_us = 50000;
  // Create waits this long for the first connection, so that a refused login is Create's
  // error. 0: do not wait.
  int64_t connect_wait_us = 1000000;
  // Prefix of every Redis key the limiter writes.
  std::string key_prefix = "sluice:";
  FailurePolicy on_failure = FailurePolicy::kOpen;
};

class RateLimiter {
 public:
  // How long a synchronous call on Redis waits beyond RedisOptions::timeout_us.
  static constexpr int64_t kSyncGraceUs = 1000000;

  struct MemoryOptions {
    // Upper bound on (limit, key) states held at once; a key with two limits holds two. A live
    // state is never dropped: when full, a new key is decided as `on_full` says.
    size_t max_keys = size_t{1} << 20;
    // Independent locks; more shards, less contention between threads.
    size_t shards = 16;
    OnFull on_full = OnFull::kShared;
  };

  // (Defined outside the class: clang cannot default-construct a nested struct with member
  // initializers inside std::optional, e.g. `options.redis.emplace()`.)
  using RedisOptions = RateLimiterRedisOptions;

  struct Options {
    // Not owned; must outlive the limiter. Memory backend only (Redis uses its own clock).
    const Clock* clock = SystemClock::Get();
    // Names the limiter's states: two limiters with the same name and an equal limit share that
    // limit's state per key (across processes on one Redis). Give limiters of different
    // purposes different names.
    std::string name;
    MemoryOptions memory;
    // Set: the states live on Redis; `memory` is unused.
    std::optional<RedisOptions> redis;
  };

  // Errors as the file comment says. On Redis, starts connecting in the background and waits
  // up to connect_wait_us for the first connection.
  static absl::StatusOr<std::unique_ptr<RateLimiter>> Create(std::vector<Limit> limits,
                                                             const Options& options);
  static absl::StatusOr<std::unique_ptr<RateLimiter>> Create(std::vector<Limit> limits) {
    return Create(std::move(limits), Options{});
  }
  // Calls still in flight complete (on Redis: the failure policy answers them) before the
  // destructor returns; no callback runs after it.
  ~RateLimiter();
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  using VerdictDone = std::function<void(absl::StatusOr<Verdict>)>;
  using RefundDone = std::function<void(absl::Status)>;
  using ResetDone = std::function<void(absl::StatusOr<size_t>)>;

  // Decides a request of `cost` for `key` against every limit, all-or-nothing (see above).
  // Cost 0 is Peek.
  absl::StatusOr<Verdict> Decide(std::string_view key, uint64_t cost = 1);
  void DecideAsync(std::string_view key, uint64_t cost, VerdictDone done);

  // Looks at `key`'s limits without consuming: a decision of cost 0, which every limit admits
  // (allowed is true). Each Decision's `remaining` and `reset_after_us` are the key's now; the
  // next request of cost 1 would be admitted if Verdict::remaining > 0.
  absl::StatusOr<Verdict> Peek(std::string_view key);
  void PeekAsync(std::string_view key, VerdictDone done);

  // Gives back what `consumption` (from a Verdict of this limiter) consumed, in every limit,
  // and empties it. Nothing to do for an empty one. Never makes a key's state better than a
  // fresh key's; what each algorithm gives back is in docs/algorithms.md. InvalidArgument for a
  // Consumption of another limiter.
  absl::Status Refund(Consumption& consumption);
  void RefundAsync(Consumption& consumption, RefundDone done);

  // Costs known only after the work (an LLM's tokens): decide on an estimate, then settle the
  // Consumption at what the work cost, once it is known. A lower cost gives the difference back
  // (as Refund); a higher one records the excess in every limit whatever they say, so the key
  // may go past its limits and then waits until it is back under (a penalty counts no offence
  // for it). Empties `consumption`; InvalidArgument for another limiter's.
  absl::Status Settle(Consumption& consumption, uint64_t actual_cost);
  void SettleAsync(Consumption& consumption, uint64_t actual_cost, RefundDone done);

  // Records a cost already spent in every limit, admitted or not (as envoyproxy/ratelimit's
  // count_denied counts a denied request): the Verdict says whether it fitted; it was counted
  // either way (unless the failure policy answered).
  absl::StatusOr<Verdict> Record(std::string_view key, uint64_t cost);

  // Forgets `key`'s state in every limit ("unblock this customer"): its next request is a
  // fresh key's. Answers how many states there were (0 to limits().size()).
  absl::StatusOr<size_t> Reset(std::string_view key);
  void ResetAsync(std::string_view key, ResetDone done);

  // Runtime overrides ("raise acme's limit for a week"): `key` is decided against `limits`
  // instead of the limiter's (its Verdict's decisions are theirs, in their order), counted in
  // states of its own from zero, until `until_us` (Unix µs in the limiter's clock; 0: until
  // removed), replacing an earlier override of `key`. Removing it brings back the limiter's
  // limits and the key's state in them. Kept in this object only: serve's admin API
  // (PUT /v1/overrides, docs/http-api.md) keeps them on Redis for every instance.
  // InvalidArgument for limits Create would refuse, or an end already past.
  absl::Status SetOverride(std::string_view key, std::vector<Limit> limits, int64_t until_us = 0);
  // Removes `key`'s override; whether it had one (an ended one counts as none).
  bool RemoveOverride(std::string_view key);

  const std::vector<Limit>& limits() const;
  // "memory", "redis 127.0.0.1:6379", "redis cluster via ...": for messages.
  const std::string& where() const;

 private:
  struct Impl;
  explicit RateLimiter(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice

#endif  // SLUICE_RATE_LIMITER_H_
