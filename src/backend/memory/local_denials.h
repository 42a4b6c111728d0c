// LocalDenials: an over-limit cache per thread in front of the memory store, so that a key over
// its limit does not serialize the threads on its shard's lock.
//
// Every decision on a key locks that key's shard: under a flood on one key every thread takes
// the same lock, its cache line bounces between the cores, and more threads add nothing. Here,
// when the store denies an item with retry_after r (backend/held_denial.h says which denials may
// be kept), the thread that asked keeps the denial in a small table of its own and answers the
// same request from it until r: no lock and no shared write, one read of a generation counter
// (below). It is the in-process cousin of backend::OverLimitCache, which does the same in front
// of Redis for all of an instance's threads together.
//
// Exact: a request answered here gets the answer the store would give it (other threads'
// traffic in between only makes the store's answer stricter; this thread's own ends what it
// kept of the states it touched):
//   - denied until the store would admit it, no longer: the denial's end counts from the time the
//     store decided it, in the store's clock;
//   - the same retry_after, reset_after and remaining: only a request of the same cost is
//     answered, and only from a denial that left remaining = cost - 1 (for cost 1, every denial),
//     which stays so until the request is admitted.
// What gives quota back ends the denials it concerns:
//   - a Reset or Refund through this wrapper moves the generation of the states it touches (one
//     of StateGenerations::kCount counters, chosen by the state's hash). A denial is kept with the
//     generation read before the store decided it and answered only while that has not moved, so a
//     denial that raced with a reset is never answered. (A Reset or Refund on the store directly is
//     not seen: go through this.)
//   - a changed limit: an entry keeps the limit it was decided on, and another one misses;
//   - room coming back: a denial for want of room (MemoryStore::kNoRoomRetryAfterUs, on_full deny
//     or no overflow state left) is not kept.
// Only a request all of whose items are kept denials is answered here, so all-or-nothing stays
// the store's: a request with a count_denied item (the store must count it), a shadow item, a
// look, or any item not denied here goes to the store whole.
//
// Time: an answer uses max(now_us, the time the store decided the denial), as the store would
// (it never decides at a time before one the key's shard has used, for any key). A now_us
// earlier than one the same thread passed already goes to the store, which may have decided
// another key of the shard at that later time; so one thread alone is answered exactly as the
// store would, even as its clock steps back. Between threads whose now_us disagree (each read
// the clock once for a batch of requests), a lagging thread can be denied here until the
// denial's end by its own time where the store would already use another thread's later time:
// longer by at most that lag, never past the end the caller is told.
//
// Bounded: kEntries entries per thread, for all instances together (a 4-way set-associative
// table: the entry that ends soonest makes room), keys of at most kMaxKeyBytes (longer ones are
// not kept); a flood of denied keys costs store decisions, never a wrong answer.
// Safe for concurrent use without external synchronization. Answers inline. `store` is not owned
// and must outlive this.

#ifndef SLUICE_BACKEND_MEMORY_LOCAL_DENIALS_H_
#define SLUICE_BACKEND_MEMORY_LOCAL_DENIALS_H_

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

class LocalDenials final : public backend::Backend {
 public:
  using Item = backend::Item;

  static constexpr size_t kEntries = 256;      // per thread
  static constexpr size_t kMaxKeyBytes = 256;  // longer keys are not kept

  explicit LocalDenials(MemoryStore* store);
  ~LocalDenials() override;
  LocalDenials(const LocalDenials&) = delete;
  LocalDenials& operator=(const LocalDenials&) = delete;

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

#endif  // SLUICE_BACKEND_MEMORY_LOCAL_DENIALS_H_
