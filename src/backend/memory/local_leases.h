// LocalLeases: units of a hot key leased to each thread, so that an admitted hot key does not
// serialize the threads on its shard's lock either.
//
// Every admission on a key takes its shard's lock (LocalDenials answers only the denials). Here a
// thread that decides the same state often (kHotDecisions times within about a millisecond)
// takes a few units of it in one locked step (MemoryStore::Lease: recorded so that spending them
// at any moment until the lease ends cannot admit more than the store would, docs/algorithms.md
// "Leases") and admits that state's next requests from them with no lock and no shared write.
// The in-process cousin of backend::Leases, which leases from Redis.
//
// Never over-admits; the price is under-admission, bounded:
//   - a lease holds at most kMaxUnits and at most half of what the state had left (so near the
//     limit leases shrink to 1 and the threads share what is left), about as many as the thread
//     decided on that state in the last millisecond or two;
//   - fixed_window: the units are counted in their window when leased, and the lease ends with
//     the window. Units the thread does not spend go back (a refund in their window) when it
//     asks for a request they cannot cover; a thread that stops asking for the state (its
//     client moved to another thread, say) keeps them until the window ends, at most kMaxUnits
//     per thread and state (a live lease also keeps its slot from other states);
//   - token_bucket: a lease lives Options::life_us, and that life counts as consumed (the TAT
//     moves to the lease's end first); unspent units are not given back, so a lease holds no
//     more than the bucket refills in its life (what it loses comes back within that life), and
//     a bucket that refills less than the request's cost in a life is not leased.
// A request is decided here only when it has one item of a domain that chose leases
// (`consistency: leased` or `eventual`, or `hot_keys: lease`; an exact item is the store's), not
// shadow nor count_denied, of a token_bucket or fixed_window limit, and the thread's lease of that
// state covers its cost at a time inside the lease; everything else goes to `inner` (LocalDenials
// over the same store, in the memory-only stack). An admission here reports remaining = what the
// state had left after the lease plus the units still leased (what this thread knows), reset_after
// from the lease. A Reset through this ends every thread's leases of those states (the units are
// not spent; the state they were counted in is gone); a Refund passes through.
//
// Time: a lease's units are spent at max(now_us, the grant's time), never before a time the
// store used for the grant. Between threads whose now_us disagree (each read the clock once for
// a batch of requests), a window's units can be spent by a lagging thread up to that lag after
// another thread's time moved the store into the next window: at most what the lagging thread
// holds, within that lag.
//
// Bounded: kSlots leases per thread (a direct-mapped table), keys of at most kMaxKeyBytes.
// Safe for concurrent use. Answers inline. `inner` and `store` are not owned; `inner` must
// answer inline and decide on `store`.

#ifndef SLUICE_BACKEND_MEMORY_LOCAL_LEASES_H_
#define SLUICE_BACKEND_MEMORY_LOCAL_LEASES_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/base/attributes.h"
#include "backend/backend.h"
#include "backend/memory/memory_store.h"
#include "backend/memory/state_generations.h"

namespace sluice::store {

class LocalLeases final : public backend::Backend {
 public:
  using Item = backend::Item;

  static constexpr size_t kSlots = 256;         // per thread
  static constexpr size_t kMaxKeyBytes = 256;   // longer keys are not leased
  static constexpr uint64_t kMaxUnits = 64;     // per lease
  static constexpr uint32_t kHotDecisions = 8;  // in this millisecond and the one before
  // A state that had too little to lease (MemoryStore::LeaseGrant::exhausted: near or over its
  // limit) is
  // not asked for a lease again before this has passed (its requests go to `inner`, which
  // answers a denial from the thread's kept ones).
  static constexpr int64_t kNoLeaseRetryUs = 1000;

  struct Options {
    int64_t life_us = 1000;  // a token_bucket lease's life
  };

  LocalLeases(backend::Backend* inner, MemoryStore* store, Options options);
  ~LocalLeases() override;
  LocalLeases(const LocalLeases&) = delete;
  LocalLeases& operator=(const LocalLeases&) = delete;

  void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
              Done done) override;
  backend::Outcome DecideNow(std::span<const Item> items, int64_t now_us,
                             std::span<Decision> out) override;
  void Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
              RefundDone done) override {
    inner_->Refund(items, decided_at_us, now_us, std::move(done));
  }
  // Resets through `inner`, then ends every thread's leases of those states.
  void Reset(std::span<const Item> items, ResetDone done) override;
  bool answers_inline() const override { return true; }

  // Requests the calling thread has admitted from leases, and leases it has taken, over every
  // instance: for tests and `sluice bench store`.
  struct ThreadStats {
    uint64_t admitted = 0;
    uint64_t leases = 0;
  };
  static ThreadStats StatsOnThisThread();

 private:
  // DecideNow for a request of one item that leases may decide (Leasable); `out` has one
  // decision.
  ABSL_ATTRIBUTE_NOINLINE backend::Outcome DecideLeasable(const Item& item, int64_t now_us,
                                                          std::span<Decision> out);
  // Gives the unspent units of a fixed_window lease back to the store (a refund in their window).
  void GiveBack(const Item& item, uint64_t units, int64_t granted_at_us, int64_t now_us);

  backend::Backend* const inner_;
  MemoryStore* const store_;
  const Options options_;
  const uint64_t id_;  // names this instance in the threads' tables: never reused
  StateGenerations generations_;
};

}  // namespace sluice::store

#endif  // SLUICE_BACKEND_MEMORY_LOCAL_LEASES_H_
