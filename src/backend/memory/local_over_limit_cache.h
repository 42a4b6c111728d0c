// LocalOverLimitCache: an over-limit cache per thread in front of the memory store, so that a key
// over its limit does not serialize the threads on its shard's lock. A thread keeps the denials the
// store gave it and answers the same request from them until the denial ends, with no lock: the
// exact answer the store would give. Reset and Refund must go through this wrapper.
//
// Thread safety: safe for concurrent use without external synchronization. Answers inline.
// Ownership: `store` is not owned and must outlive this. Bounded: kEntries entries per thread.
// Units: microseconds, in the store's clock.
//
// Design: docs/hybrid.md#localoverlimitcache-each-threads-over-limit-cache (what is kept, what ends
// it, time).

#ifndef SLUICE_BACKEND_MEMORY_LOCAL_OVER_LIMIT_CACHE_H_
#define SLUICE_BACKEND_MEMORY_LOCAL_OVER_LIMIT_CACHE_H_

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

class LocalOverLimitCache final : public backend::Backend {
 public:
  using Item = backend::Item;

  static constexpr size_t kEntries = 256;      // per thread
  static constexpr size_t kMaxKeyBytes = 256;  // longer keys are not kept

  explicit LocalOverLimitCache(MemoryStore* store);
  ~LocalOverLimitCache() override;
  LocalOverLimitCache(const LocalOverLimitCache&) = delete;
  LocalOverLimitCache& operator=(const LocalOverLimitCache&) = delete;

  void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
              Done done) override;
  backend::Outcome DecideNow(std::span<const Item> items, int64_t now_us,
                             std::span<Decision> out) override;
  // Refunds on the store, then ends every kept denial of those states (on every thread).
  void Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
              RefundDone done) override;
  // Resets on the store, then ends every kept denial of those states (on every thread).
  void Reset(std::span<const Item> items, ResetDone done) override;
  bool answers_inline() const override { return true; }
  std::string_view name() const override { return "memory"; }

  // Requests the calling thread has answered from its kept denials, over every instance (a
  // shared counter would be the one written line this class exists to avoid): for tests and
  // `sluice bench store`.
  static uint64_t HitsOnThisThread();

 private:
  struct Probe;
  // DecideNow for a request of one item (the usual one): the same steps with no lists; and for
  // the others (not inlined, so that the single path needs no big stack frame).
  backend::Outcome DecideSingle(const Item& item, int64_t now_us, Decision& d);
  ABSL_ATTRIBUTE_NOINLINE backend::Outcome DecideMany(std::span<const Item> items, int64_t now_us,
                                                      std::span<Decision> out);
  // Answers the request from this thread's kept denials if all its items are (into `out` and
  // `outcome`); else false. Either way `probes` and `hashes` (each item's StateHash) hold what
  // the store and Remember need.
  bool Answer(std::span<const Item> items, int64_t now_us, std::span<Probe> probes,
              std::span<uint64_t> hashes, std::span<Decision> out, backend::Outcome& outcome);
  // Answer's look at one item: its StateHash into `hash`, what Remember needs into `p`; true
  // when this thread keeps a denial that may answer it (then `now` is moved on to that
  // denial's time, if later).
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool ProbeItem(const Item& item, Probe& p, uint64_t& hash,
                                              int64_t& now) const;
  // Keeps the denials of a request the store denied at `decided_at_us`.
  void Remember(std::span<const Item> items, std::span<const Decision> out,
                std::span<const Probe> probes, std::span<const uint64_t> hashes,
                int64_t decided_at_us) const;

  MemoryStore* const store_;
  const uint64_t id_;  // names this instance's entries in the threads' tables: never reused
  StateGenerations generations_;
};

}  // namespace sluice::store

#endif  // SLUICE_BACKEND_MEMORY_LOCAL_OVER_LIMIT_CACHE_H_
