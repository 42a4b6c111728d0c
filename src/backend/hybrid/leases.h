// Leases: a backend that decides `consistency: leased` items (and `hot_keys: lease` items while
// hot) from units leased from the shared backend (Redis), so that most decisions cost it nothing;
// it never admits more than deciding each request there would.
//
// A request is decided here only when every item is leasable and its lease covers the cost,
// all-or-nothing; otherwise its items get leases, or `inner` (the over-limit cache and Redis)
// decides it exactly. So every denial is `inner`'s.
//
// Thread safety: safe for concurrent use if `inner` and `source` are.
// Ownership: neither `inner` nor `source` is owned. Units: microseconds; leases in cost units.
//
// Design: docs/hybrid.md#the-leases-backend (lease size and life, unspent units, resets,
// failure, hot keys); why a lease cannot over-admit: docs/algorithms.md#leases-consistency-leased.

#ifndef SLUICE_BACKEND_HYBRID_LEASES_H_
#define SLUICE_BACKEND_HYBRID_LEASES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "backend/hybrid/hot_keys.h"
#include "backend/reset_epoch.h"
#include "sluice/clock.h"

namespace sluice::backend {

// Where leases come from (Redis: redis::RedisStore).
class LeaseSource {
 public:
  struct Grant {
    uint64_t granted = 0;  // units taken (0: the state admits nothing now, or is not leasable)
    int64_t now_us = 0;    // when, in the source's clock: a time inside the lease
    int64_t ends_us = 0;   // when the lease ends, in the source's clock
    uint64_t left = 0;     // what a request could still take from the state after the grant
    bool fenced = false;   // nothing taken: an eventual copy of the state is in use (its merges
                           // fence it: SyncSource::Delta::fence_us)
  };
  using GrantDone = std::function<void(absl::StatusOr<Grant>)>;

  virtual ~LeaseSource() = default;
  // Takes up to `want` units of `item`'s state for at most `life_us`. Nothing in `item` needs to
  // outlive the call.
  virtual void Lease(const Item& item, uint64_t want, int64_t life_us, GrantDone done) = 0;
};

class Leases final : public Wrapper {
 public:
  struct Options {
    int64_t life_us = 100000;          // the target interval: a bucket's lease lives this long
    int64_t window_life_us = 1000000;  // a window's lease: at most this, and to its window's end
    size_t max_entries = 65536;        // states with a lease held at once; more are decided exactly
    size_t hot_key_slots = 256;        // states the hot-key tracker follows (HotKeys)
  };
  struct Stats {
    uint64_t local = 0;           // requests decided from leases, with no call
    uint64_t leases = 0;          // leases taken (calls)
    uint64_t units_granted = 0;   // units those leases got
    uint64_t units_returned = 0;  // unspent units given back
    uint64_t units_lost = 0;      // unspent units that ended with their lease (buckets, resets)
    uint64_t returns = 0;         // calls that gave units back (refunds)
    uint64_t sweeps = 0;          // scans of the lease table for leases that ended
    uint64_t fenced = 0;          // leases refused: an eventual copy of the state is in use
    uint64_t empty = 0;           // leases that got nothing (no units to spare, or not leasable)
  };

  Leases(Backend* inner, LeaseSource* source, const Clock* clock, Options options);
  ~Leases() override;

  void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
              Done done) override;
  // Resets on the backend, then drops this instance's leases of those states.
  void Reset(std::span<const Item> items, ResetDone done) override;

  // Gives back the unspent units of every lease (shutdown, reload); `done` once all calls are
  // answered.
  void ReturnAll(std::function<void()> done);

  // Ends the leases that are over, giving back their unspent units. Decide does it as it goes;
  // an instance with no leased traffic needs this called (Stack does, every lease interval), or
  // the units it holds stay counted until its window ends.
  void SweepEnded() { Sweep(clock_->MonotonicMicros()); }

  // Whether the state's last lease was refused because an eventual copy of it is in use
  // somewhere (LeaseSource::Grant::fenced), less than a lease interval before `mono`: Eventual
  // then decides it on a copy too.
  bool Fenced(const Item& item, int64_t mono) const;

  Stats GetStats() const;
  HotKeys::Stats GetHotKeyStats() const { return hot_keys_.GetStats(); }
  // The k promoted hot keys of highest rate now, highest first.
  std::vector<HotKeys::Hot> TopHotKeys(size_t k) const;

 private:
  struct Call;  // one request waiting for its leases
  struct Entry {
    Limit limit;
    uint64_t units = 0;         // unspent
    int64_t ends = 0;           // monotonic: the lease's end, as seen here
    int64_t granted_at_us = 0;  // the source's time of the grant (for the return)
    int64_t started = 0;        // monotonic: when it was granted
    uint64_t granted = 0;
    uint64_t left = 0;         // what the state had left after the grant
    int64_t dry_until = 0;     // monotonic: the last lease came back empty; exact until then
    int64_t dry_since_us = 0;  // the source's time of the first of the empty leases in a row
    int64_t fenced_until = 0;  // monotonic: the last lease was fenced (an eventual copy is used)
    double rate = 0;      // units per µs the last ended lease was spent at (granted is then 0)
    bool taking = false;  // a lease call in flight
    std::vector<std::shared_ptr<Call>> waiters;  // requests of one item waiting for that call
  };

  // Whether an item's limit and cost can be decided from a lease.
  static bool Leasable(const Item& item);
  // Whether every item is decided from leases now: kLeased ones, and kExact ones of a promoted
  // hot key. Counts each request of an item with a hot_key_rate, reading the clock into `mono`
  // (for them or, when every item is leased, for the request).
  bool LeasedNow(std::span<const Item> items, std::optional<int64_t>& mono);
  // Spends the request's units if every item's lease covers it: fills `out` and returns the
  // decision's time in the source's clock (Outcome::decided_at_us); nullopt if not covered.
  std::optional<int64_t> TrySpend(std::span<const Item> items, int64_t mono,
                                  std::span<Decision> out);
  static std::shared_ptr<Call> MakeCall(std::span<const Item> items, int64_t now_us,
                                        std::span<Decision> out, Done done, size_t waiting);
  // Decides a request whose leases came: from them, else on the backend.
  void Finish(Call& call);
  // Takes a lease's answer into its state's entry, then decides the requests that waited for it.
  void Granted(const Item& item, const absl::StatusOr<LeaseSource::Grant>& grant);
  // How long a lease of `limit` may live.
  int64_t LifeOf(const Limit& limit) const;
  // How long a state whose lease came back empty at `source_now` (the source's time) is decided
  // by `inner` before it is leased again; keeps the entry's count of how long it has been dry.
  int64_t DryFor(Entry& entry, const Limit& limit, int64_t source_now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many units to ask for next (see the class comment).
  static uint64_t NextWant(const Entry* entry, const Item& item, int64_t life_us, int64_t mono);
  // The rate (units per µs) an entry's lease has been spent at, until `mono` or its end.
  static double SpendRate(const Entry& entry, int64_t mono);
  // Gives back an entry's unspent units (a window's, while its window lasts) or counts them
  // lost (a bucket's).
  void GiveBack(const std::string& entry_key, const Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the leases that are over (at most every 100 ms, and only once one is due): gives back
  // their units, keeps their rate for a lease life, then forgets them.
  void Sweep(int64_t mono);
  // When the sweep next has something to do for `entry` (its lease or dry spell ends, or, once
  // ended, its remembered rate expires); `crowded`: ended leases are not remembered.
  int64_t DueAt(const Entry& entry, bool crowded) const;
  // How long an ended lease of `limit` is remembered: a lease life, no longer than its window.
  int64_t RememberedFor(const Limit& limit) const;
  // Brings the next sweep forward to `due` (no sooner than kSweepEveryUs after the last one).
  void SweepBy(int64_t due) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops every lease's units without giving them back (a reset elsewhere emptied the states
  // they came from) and forgets the entries no lease call waits on.
  void DropAll();

  LeaseSource* const source_;
  const Clock* const clock_;
  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t last_sweep_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> next_sweep_{0};  // when a sweep is next due, read without the lock
  std::atomic<uint64_t> local_{0}, leases_{0}, units_granted_{0}, units_returned_{0}, empty_{0},
      units_lost_{0}, returns_{0}, sweeps_{0}, fenced_{0};
  ResetEpochWatch epoch_;
  mutable HotKeys hot_keys_;  // (Top, for the metrics, rolls its seconds)
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_HYBRID_LEASES_H_
