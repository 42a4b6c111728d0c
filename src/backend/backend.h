// Backend: where limiter states live and are decided. The engine decides every request through
// one Backend; implementations compose (a wrapper in front of another backend), and which ones
// exist and how `serve` stacks them is listed in docs/design.md#implementations.
//
// Every call is asynchronous: its completion runs exactly once, on any thread, perhaps before
// the call returns (a backend whose answers_inline() is true always runs it before returning).
// Nothing here depends on the rules or on a frontend: an Item is a limit, the identity of its
// state, a key and a cost. Units: microseconds (`_us`).
//
// Design: docs/design.md#the-backend-interface.

#ifndef SLUICE_BACKEND_BACKEND_H_
#define SLUICE_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sluice/limit.h"

namespace sluice::backend {

// What Failover answers for an item when the backend behind it cannot decide.
enum class FailureMode {
  kOpen,    // admit
  kClosed,  // refuse
  kLocal,   // decide in this process, the limit divided by the number of instances
};

// How a limit held across instances is decided (`consistency:`, docs/hybrid.md).
enum class Consistency {
  kExact,   // every decision by the shared backend (Redis)
  kLeased,  // from units leased from it, never admitting more than exact (backend/hybrid/leases.h)
  kEventual,  // on this instance's copy, merged into it every sync interval
              // (backend/hybrid/eventual.h)
};

// What a refusal for want of a backend (failure_mode closed, or a failure no policy answered)
// tells the client to wait.
inline constexpr int64_t kUnavailableRetryAfterUs = 1000000;

// One limit of one request.
struct Item {
  const Limit* limit = nullptr;  // must pass ValidateLimit
  uint64_t limit_id = 0;         // names the limit's state (backend::RuleLimitId)
  std::string_view key;          // the descriptor's key; with limit_id, the state's identity
  uint64_t cost = 1;             // 0: look without consuming
  // Record the cost even when denied, on every algorithm (envoyproxy/ratelimit's counting;
  // algo::DecideCompactCountingDenied); such items keep what they consumed or recorded whatever
  // the other items decide, and must reach the store (never leased, decided on an eventual copy
  // or answered from an over-limit cache).
  bool count_denied = false;
  // A shadow item's deny does not deny the request.
  bool shadow = false;
  // How the limit is shared with other instances, read only by the wrappers in front of a shared
  // backend (Failover, Leases, Eventual, HotKeys); a backend that decides alone ignores it.
  struct Sharing {
    // Failover: what to answer when the backend fails, and for kLocal how many instances share
    // the limit (each decides on limit / instances).
    FailureMode on_failure = FailureMode::kOpen;
    uint32_t instances = 1;
    // Leases, Eventual: whether the item may be decided from a lease or a copy.
    Consistency consistency = Consistency::kExact;
    // Leases, kExact items (`hot_keys: lease`): while this instance sees the state at more than
    // this many requests per second, it is decided as kLeased (backend/hybrid/hot_keys.h); 0:
    // never. Eventual, kEventual items (`cold_keys: lease`): under this rate the state is decided
    // from leases, over it on a copy; 0: always on a copy.
    uint32_t hot_key_rate = 0;
  } sharing = {};
};

// A state's identity as one string (limit_id's 8 bytes, then the key): for maps of states kept
// in this process (OverLimitCache, Leases).
std::string StateKey(const Item& item);

// How a Decide went.
struct Outcome {
  // Not ok: nothing was decided (the backend failed and no policy answered); `out` is undefined.
  absl::Status status;
  // Whether the request is admitted: every non-shadow item allowed.
  bool allowed = false;
  // The time the decision used, in the backend's clock (Redis's for Redis): Refund needs it.
  int64_t decided_at_us = 0;
  // Decided by Failover's policy because the backend behind it failed: each item as its
  // on_failure says.
  bool fell_back = false;
  // Answered in this process by a wrapper in front of the store: "lease" (spent from a lease
  // held), "lease_taken" (from one taken from the store for it), "copy" (an eventual copy),
  // "over_limit_cache" (a kept denial); a decision's trace says so. Null: by the store itself.
  const char* answered_by = nullptr;
};

class Backend {
 public:
  using Done = std::function<void(const Outcome&)>;
  using RefundDone = std::function<void(absl::Status)>;
  using ResetDone = std::function<void(absl::StatusOr<size_t>)>;
  using EpochDone = std::function<void(absl::StatusOr<int64_t>)>;

  struct Health {
    bool up = true;
    std::string detail;  // why not, or what is checked
  };

  virtual ~Backend() = default;

  // Decides the items of one request at once, all-or-nothing: if every non-shadow item allows,
  // each consumes its cost; if any denies, none consumes anything (but count_denied items).
  // out[i] receives item i's decision (as many as items); an item that would have allowed a
  // denied request reports allowed with nothing consumed. `now_us` is this process's time (a
  // backend with a clock of its own uses that one). `items`, what they point to and `out` must
  // stay valid until `done` has run.
  virtual void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                      Done done) = 0;

  // Decide on a backend that answers inline (answers_inline()), its outcome returned: for a
  // caller that waits for it anyway (Engine::CheckAll), with no completion to build and call
  // through each layer. The default runs Decide and keeps what its completion is given; the
  // backends in this process override it and decide directly (Decide then calls it).
  virtual Outcome DecideNow(std::span<const Item> items, int64_t now_us, std::span<Decision> out);

  // Decide without consuming anything: every item's cost taken as 0.
  void Peek(std::span<const Item> items, int64_t now_us, std::span<Decision> out, Done done);

  // Records `items`' costs whatever their limits say, as count_denied records a denied request
  // (a state may go past its limit): a cost found after the decision, more than was taken then.
  // A limit's penalty takes no part (such a cost is no offence). Nothing in `items` needs to
  // outlive the call; `done` gets Unavailable when the failure policy answered (nothing recorded).
  void RecordPastLimits(std::span<const Item> items, int64_t now_us, RefundDone done);

  // Gives back what `items` (their cost) consumed when Decide admitted them at `decided_at_us`
  // (Outcome's), e.g. the upstream failed: see algo::RefundCompact for what that means per
  // algorithm. Pass only items that consumed. Never makes a state better than a fresh key's.
  virtual void Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
                      RefundDone done) = 0;

  // Forgets the states of `items` ("unblock this customer"); `done` gets how many there were.
  // Nothing in `items` needs to outlive the call (`done` may run much later).
  virtual void Reset(std::span<const Item> items, ResetDone done) = 0;

  // Whether every call completes before it returns (then a caller may wait for it inline).
  virtual bool answers_inline() const { return false; }
  // What decides, as traces name a backend call's span ("memory", "redis"; a wrapper: what it
  // wraps).
  virtual std::string_view name() const { return "backend"; }

  // Whether decisions work now (readiness); a backend in this process is always up.
  virtual Health GetHealth() { return {}; }

  // The reset epoch: a number that changes with every Reset through any instance sharing this
  // backend's states (Redis: a counter next to them), so that what an instance keeps of those
  // states (OverLimitCache) can be dropped soon after a reset anywhere. A backend no other
  // instance shares: Unimplemented.
  virtual void ReadResetEpoch(EpochDone done) {
    done(absl::UnimplementedError("this backend has no reset epoch"));
  }
};

// A backend in front of another (`inner`, not owned), which decides and resets in its own way
// and passes the rest through: refunds, the reset epoch and health are the inner backend's.
class Wrapper : public Backend {
 public:
  explicit Wrapper(Backend* inner) : inner_(inner) {}

  void Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
              RefundDone done) override {
    inner_->Refund(items, decided_at_us, now_us, std::move(done));
  }
  void ReadResetEpoch(EpochDone done) override { inner_->ReadResetEpoch(std::move(done)); }
  Health GetHealth() override { return inner_->GetHealth(); }
  std::string_view name() const override { return inner_->name(); }

 protected:
  // Resets `items` on `inner`, then runs `forget` with their states' keys (StateKey), to drop
  // what this keeps of them, and then `done`. The items need not outlive the call.
  void ResetThenForget(std::span<const Item> items, ResetDone done,
                       std::function<void(std::span<const std::string> keys)> forget);

  Backend* const inner_;
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_BACKEND_H_
