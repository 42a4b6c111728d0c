// LocalLeases: units of a hot state leased to each thread from the memory store, so that an
// admitted hot key does not serialize the threads on its shard's lock either. Never over-admits;
// the price is bounded under-admission (units one thread holds that another needed).
//
// Thread safety: safe for concurrent use. Answers inline.
// Ownership: `inner` and `store` are not owned; `inner` must answer inline and decide on `store`.
// Bounded: kSlots leases per thread. Units: microseconds; leases in cost units.
//
// Design: docs/hybrid.md#localleases-each-threads-leases (which requests, lease sizes, time).

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
  std::string_view name() const override { return "memory"; }

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
