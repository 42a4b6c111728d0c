// Eventual: a backend that decides `consistency: eventual` items on this instance's copy of each
// state and merges what it admitted into the shared one (Redis) every sync interval, taking the
// merged state back (gubernator's GLOBAL behaviour). It may over-admit by a bounded amount: at
// most (instances - 1) x the local admission rate x (V + T + D), with T the sync interval, V the
// oldest copy decided on (Options::max_age_us) and D the longest sync round trip.
//
// Thread safety: safe for concurrent use if `inner`, `exact` and `source` are.
// Ownership: none of them is owned. Units: microseconds; copies in Redis's clock.
//
// Design: docs/hybrid.md#the-eventual-backend (which requests, Sync, cold keys and fences,
// resets); the bound: docs/algorithms.md#eventual-consistency-eventual-the-bound-on-over-admission.

#ifndef SLUICE_BACKEND_HYBRID_EVENTUAL_H_
#define SLUICE_BACKEND_HYBRID_EVENTUAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "algo/algorithms.h"
#include "backend/backend.h"
#include "backend/hybrid/hot_keys.h"
#include "backend/hybrid/leases.h"
#include "backend/ticker.h"
#include "sluice/clock.h"

namespace sluice::backend {

// Where the shared states are merged (Redis: redis::RedisStore).
class SyncSource {
 public:
  // Units admitted on one instance, to add to one state.
  struct Delta {
    Item item;              // its state (item.cost is not used)
    uint64_t units = 0;     // 0: only read the state back
    int64_t counted_at_us;  // when they were admitted, in the source's clock (windows)
    // > 0: for this long (µs, the source's clock) after the merge, no lease of the state is
    // granted (LeaseSource::Grant::fenced): a copy of it is in use, and a lease taken after its
    // merge would be hidden from it until the next one.
    int64_t fence_us = 0;
  };
  // One call's answer: the states of the deltas it carried, merged.
  struct Merged {
    absl::Status status;
    std::vector<size_t> deltas;              // their indexes in Sync's span
    int64_t now_us = 0;                      // the source's time of the merge
    std::vector<algo::CompactState> states;  // by the order of `deltas`
  };
  using MergedDone = std::function<void(Merged)>;

  virtual ~SyncSource() = default;
  // Merges `deltas` in as many calls as it takes (one per node, at most a few hundred states
  // each) and returns that number; `done` runs once per call, on any thread, perhaps before
  // Sync returns. Nothing in `deltas` needs to outlive the call.
  virtual size_t Sync(std::span<const Delta> deltas, MergedDone done) = 0;
};

class Eventual final : public Wrapper {
 public:
  struct Options {
    int64_t sync_interval_us = 100000;  // T: how often what was admitted here is merged
    int64_t max_age_us = 0;             // V: the oldest copy decided on; 0: 2 T
    size_t max_entries = 65536;         // states with a copy here; more are decided exactly
    bool ticker = false;                // Sync() from a thread every interval (else only Decide)
    // `inner`, when it is the Leases: the states of items with a hot_key_rate (cold_keys: lease)
    // that are cold here are decided there (the class comment). Null: every state on copies.
    const Leases* leases = nullptr;
  };
  struct Stats {
    uint64_t local = 0;             // requests decided on the copies, with no call
    uint64_t local_denied = 0;      // of those, denied
    uint64_t exact = 0;             // eventual requests decided by the backend (no fresh copy)
    uint64_t syncs = 0;             // merge calls
    uint64_t states_synced = 0;     // states those calls read and wrote
    uint64_t units_merged = 0;      // units they added
    uint64_t sync_errors = 0;       // failed merge calls (their units went again)
    uint64_t leased = 0;            // eventual requests sent to leases (cold_keys: lease)
    int64_t max_round_trip_us = 0;  // the longest merge call, D
  };

  // Requests with an item this does not decide go to `inner`; the eventual requests this cannot
  // decide on copies, to `exact`, whose Outcome::decided_at_us is the source's time.
  Eventual(Backend* inner, Backend* exact, SyncSource* source, const Clock* clock, Options options);
  ~Eventual() override;

  void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
              Done done) override;
  // Resets on the backend, then drops this instance's copies of those states.
  void Reset(std::span<const Item> items, ResetDone done) override;

  // Sends what was admitted here since the last sync and takes the merged states back (at most
  // one sync out at a time: a call while one is out does nothing). `done`, if given, runs once
  // its calls are answered (at once when there was nothing to send or one was out).
  void Sync(std::function<void()> done = nullptr);

  // Whether `item` is decided here (the class comment).
  static bool Decidable(const Item& item);

  // Stops the ticker (if any) and waits for it: before `source` goes.
  void StopTicker();

  Stats GetStats() const;

 private:
  // Units admitted here not yet merged, by the window they count in (a bucket's: one).
  struct Pending {
    int64_t counted_at_us = 0;
    uint64_t units = 0;
  };
  struct Entry {
    Limit limit;
    algo::CompactState state;  // the copy: the merged state, with what was admitted here since
    int64_t fresh_at = 0;      // monotonic: when the state it came from was read (call's send)
    int64_t used_at = 0;       // monotonic: the last decision on it
    bool used = false;         // decided on since the last sync
    bool fenced = false;       // cold_keys: lease: its merges fence leases; fresh only from one
    absl::InlinedVector<Pending, 2> unsent;   // admitted since the last sync's call went
    absl::InlinedVector<Pending, 2> sending;  // in the sync call out
  };

  // The source's time now, as estimated here; nullopt before the first reply.
  std::optional<int64_t> SourceNow(int64_t mono) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LearnOffset(int64_t sent_mono, int64_t source_us, int64_t arrived_mono)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `item`'s copy fences its state at each merge (cold_keys: lease).
  bool Fences(const Item& item) const;
  // cold_keys: lease, for a request with no copy here: whether it goes to the leases (every
  // item's state cold here, and none fenced by a copy elsewhere). Counts each item's request.
  bool ToLeases(std::span<const Item> items, int64_t mono);
  // Decides on the copies if every item has a fresh one: fills `out`, returns the outcome.
  // `copied`: some item has a copy here, fresh or not.
  std::optional<Outcome> TryLocal(std::span<const Item> items, int64_t mono,
                                  std::span<Decision> out, bool& copied);
  // Gives the items of an exact decision a copy, rebuilt from it.
  void Adopt(std::span<const Item> items, const Outcome& outcome, std::span<const Decision> out,
             int64_t sent_mono, int64_t arrived_mono);
  // Takes one merge call's answer: the merged states, with what was admitted here since.
  void Merge(const SyncSource::Merged& merged, std::span<const std::string> keys,
             std::span<const Limit> limits, std::span<const SyncSource::Delta> deltas,
             int64_t sent_mono);

  Backend* const exact_backend_;
  SyncSource* const source_;
  const Clock* const clock_;
  const Options options_;
  const int64_t max_age_us_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  bool offset_known_ ABSL_GUARDED_BY(mu_) = false;
  int64_t offset_us_ ABSL_GUARDED_BY(mu_) = 0;  // source time - monotonic time
  int64_t best_round_trip_ ABSL_GUARDED_BY(mu_) = 0;
  bool syncing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_sync_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> local_{0}, local_denied_{0}, exact_{0}, syncs_{0}, states_synced_{0},
      units_merged_{0}, sync_errors_{0}, leased_{0};
  HotKeys hot_keys_;  // cold_keys: lease: the states hot here
  std::atomic<int64_t> max_round_trip_us_{0};
  std::unique_ptr<Ticker> ticker_;  // Options::ticker
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_HYBRID_EVENTUAL_H_
