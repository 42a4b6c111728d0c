// MemoryStore: limiter state in this process, keyed by (limit id, key).
//
// Thread safety: safe for concurrent use without external synchronization; the key space is
// split over independent shards, each behind its own lock. A decision of one state locks its
// shard; a request of several items (DecideAll) locks the shards of its items, in address order.
// Bounded: at most Options::max_entries live states. Idle states are reclaimed as the store goes;
// a live state is never dropped to make room: a new key that finds its shard full is decided as
// Options::on_full says (sluice/on_full.h), so a flood of new keys cannot lift another key's limit.
// Units: microseconds; the store never decides at a time earlier than one it already used.
//
// Design: docs/algorithms.md#the-memorystore-contract (capacity, on_full modes, overflow states,
// memory per key, time).

#ifndef SLUICE_BACKEND_MEMORY_MEMORY_STORE_H_
#define SLUICE_BACKEND_MEMORY_MEMORY_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "algo/algorithms.h"
#include "algo/penalty.h"
#include "backend/backend.h"
#include "backend/memory/compact_table.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "sluice/on_full.h"
#include "util/spin_lock.h"

namespace sluice::store {

class MemoryStore final : public backend::Backend {
 public:
  struct Options {
    size_t max_entries = size_t{1} << 24;  // ~16.7M (limit, key) states in all
    size_t shards = 64;                    // rounded up to a power of two
    OnFull on_full = OnFull::kShared;      // a new key in a full shard; see above
  };

  // Overflow states one shard holds at most (on_full shared): one per limit id.
  static constexpr size_t kMaxOverflowStates = 4096;
  // on_full deny: the retry_after of a request denied for lack of room. Room comes back as
  // states go idle, which the store notices as new keys arrive.
  static constexpr int64_t kNoRoomRetryAfterUs = 1000000;

  struct Stats {
    OnFull on_full = OnFull::kShared;
    size_t entries = 0;          // tracked states, at most max_entries
    size_t overflow_states = 0;  // on_full shared: overflow states held (outside max_entries)
    size_t memory_bytes = 0;     // table slots (sliding logs and overflow states not included)
    uint64_t reclaimed = 0;      // idle states dropped
    // Decisions of new keys that found no room (their shard full, nothing idle): admitted
    // (shared: consumed from the overflow state; allow_untracked: not recorded) or denied
    // (shared: by the overflow state; deny: for lack of room).
    uint64_t no_room_allowed = 0;
    uint64_t no_room_denied = 0;
  };

  // `clock` is not owned and must outlive the store.
  MemoryStore(const Options& options, const Clock* clock);
  ~MemoryStore() override;

  // Decides one request of `cost` for `key` against `limit` at the clock's time.
  // `limit_id` names the limit's state (see LimitId); `limit` must pass ValidateLimit.
  Decision Decide(const Limit& limit, uint64_t limit_id, std::string_view key, uint64_t cost);

  // Same at an explicit time (clamped so that it never runs backwards; see above).
  Decision DecideAt(const Limit& limit, uint64_t limit_id, std::string_view key, uint64_t cost,
                    int64_t now_us);

  // One limit of a request, for DecideAll (see backend.h).
  using Item = backend::Item;

  // Decides several limits of one request at once, all-or-nothing: if every non-shadow item
  // allows, each consumes its cost; if any denies, none consumes anything (but count_denied
  // items). out[i] receives item i's decision; an item that would have allowed a denied request
  // reports allowed with nothing consumed. Returns whether the request is allowed.
  // Atomic with respect to every other decision: the shards involved are locked together.
  // `decided_at_us`, when given, receives the time the decision used (now_us, clamped to
  // [0, kMaxTimeUs], and never earlier than a time the shards involved have already used: a
  // state's clock does not go back when threads read the clock in one order and decide in
  // another): Refund needs it.
  bool DecideAll(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                 int64_t* decided_at_us = nullptr);
  // The same, for a caller that has hashed the items already: hashes[i] is StateHash(items[i])
  // (store/state_generations.h), which is the store's own hash of the state (with 0 read as 1).
  // The fronts in front of the store (LocalOverLimitCache) hash every item anyway: so the keys are
  // not hashed twice.
  bool DecideAll(std::span<const Item> items, std::span<const uint64_t> hashes, int64_t now_us,
                 std::span<Decision> out, int64_t* decided_at_us = nullptr);
  // The same for a request of one item, the usual one: DecideAll({item}, {hash}, ...).
  bool DecideOneHashed(const Item& item, uint64_t hash, int64_t now_us, Decision& out,
                       int64_t* decided_at_us = nullptr) {
    if (item.limit->penalty) [[unlikely]] {
      return DecidePenalized(std::span(&item, 1), now_us, std::span(&out, 1), decided_at_us);
    }
    return DecideSingle(item, CompactTable::NormalizeHash(hash), now_us, out, decided_at_us);
  }

  // Gives back what `items` consumed when DecideAll admitted them at `decided_at_us` (e.g. the
  // upstream failed); see algo::RefundCompact for what each algorithm gives back. Pass only
  // items that consumed (their decision allowed, cost > 0). A key whose state is gone (idle,
  // reclaimed, reset) or was never stored (decided without room) is left alone: the overflow
  // state is shared, so nothing is given back to it (conservative). Never makes a state better
  // than a fresh key's.
  void Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us);

  // A lease: units of a state taken in one locked step, recorded so that spending them at any
  // moment in [now_us, ends_us) cannot admit more than deciding each request here would
  // (docs/algorithms.md, "Leases"; store::LocalLeases spends them, one thread each).
  struct LeaseGrant {
    uint64_t granted = 0;        // 0: none (the state admits nothing now, or is not leasable)
    bool exhausted = false;      // none: what it could grant would not cover item.cost
    int64_t now_us = 0;          // the time the grant used
    int64_t ends_us = 0;         // spend before then
    uint64_t left = 0;           // what cost-1 requests could still take from the state after it
    int64_t reset_until_us = 0;  // when the state is back to a new key's (with no other traffic)
  };
  // Takes up to `want` units of `item`'s state, at most half of what it has left (rounded up),
  // so that near the limit leases shrink to 1 and other threads get their share; none when that
  // would not cover `item.cost` (the request asking is better decided by the store). Only a state
  // that is stored (a tracked key: a hot one is), of a fixed_window limit (the units are counted
  // now in the current window, as a request of that cost; the lease ends with the window) or a
  // token_bucket one (its TAT is first moved on to now + life_us if earlier, then the units are
  // taken as a request of that cost: the lease's life counts as consumed, and units spent any
  // time before its end never find a refill that others took meanwhile). `item`'s shadow and
  // count_denied are ignored.
  LeaseGrant Lease(const Item& item, uint64_t want, int64_t now_us, int64_t life_us);

  // Starts fetching the state of (limit_id, key) into the cache, without locking: a caller with
  // several decisions at hand prefetches the next ones while deciding the current one, so that
  // their memory latencies overlap. Purely a hint.
  void Prefetch(uint64_t limit_id, std::string_view key) const;

  // Forgets the state of one key ("unblock this customer"). True if there was one. The overflow
  // states are left alone: while its limit's overflow state in its shard is busy, a reset key
  // starts from a copy of it (on_full shared), as any new key does.
  bool Reset(uint64_t limit_id, std::string_view key);

  Stats GetStats() const;

  // As a Backend: each call answers inline (DecideAll, Refund, Reset on every item).
  void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
              Done done) override;
  backend::Outcome DecideNow(std::span<const Item> items, int64_t now_us,
                             std::span<Decision> out) override;
  void Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
              RefundDone done) override;
  void Reset(std::span<const Item> items, ResetDone done) override;
  bool answers_inline() const override { return true; }
  std::string_view name() const override { return "memory"; }

 private:
  struct Shard;
  struct Work;  // a state DecideAll decides

  // DecideAll's work. A request of one item (the usual one) takes DecideSingle: the steps below
  // for one state, with one lock, no lists, and no Work at all for a compact state that is
  // stored or finds room (`hash`: normalized, never 0). The others take DecideMany, with item
  // i's hash given by hash_of(i) (normalized); not inlined, as its lists would cost the single
  // path a big stack frame.
  template <typename HashOf>
  ABSL_ATTRIBUTE_NOINLINE bool DecideMany(std::span<const Item> items, const HashOf& hash_of,
                                          int64_t now_us, std::span<Decision> out,
                                          int64_t* decided_at_us);
  bool DecideSingle(const Item& item, uint64_t hash, int64_t now_us, Decision& d,
                    int64_t* decided_at_us);
  // DecideAll's steps. Plan: each item's state (hash, shard, the first item with the same
  // state) and the shards to lock, in address order. The others require those shards locked:
  // FindStates looks the states up and places new keys; DecideOne decides item `i` (returns
  // whether it lets the request through); UndoOne gives back what a denied request took of item
  // `i` (count_denied items aside), UndoDenied of every item; KeepNewStates stores the new keys'
  // states that hold something and counts the decisions that found no room (CountPlaced, each
  // item's count). All but StartNewKey (new keys only) are inlined into DecideMany and
  // DecideSingle, the hot path: as calls they cost it ~90 instructions a decision.
  template <typename HashOf>
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Plan(std::span<const Item> items, const HashOf& hash_of,
                                         std::span<Work> work,
                                         absl::InlinedVector<Shard*, 8>& locked) const;
  ABSL_ATTRIBUTE_ALWAYS_INLINE void FindStates(std::span<Work> work, int64_t now);
  // Looks up the stored state of `w` (an owner); false when there is none. Requires its shard.
  ABSL_ATTRIBUTE_ALWAYS_INLINE static bool LookUp(Work& w);
  void StartNewKey(const Item& item, Work& w, int64_t now);
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool DecideOne(const Item& item, size_t i, std::span<Work> work,
                                              int64_t now, Decision& d);
  ABSL_ATTRIBUTE_ALWAYS_INLINE static void UndoOne(const Item& item, Work& w, int64_t now,
                                                   Decision& d);
  ABSL_ATTRIBUTE_ALWAYS_INLINE void UndoDenied(std::span<const Item> items, std::span<Work> work,
                                               int64_t now, std::span<Decision> out);
  ABSL_ATTRIBUTE_ALWAYS_INLINE void CountPlaced(const Work& w, const Work& owner, const Decision& d,
                                                bool allowed);
  ABSL_ATTRIBUTE_ALWAYS_INLINE void KeepNewStates(std::span<Work> work,
                                                  std::span<const Decision> out, bool allowed,
                                                  int64_t now);

  // Penalties (Limit::penalty): a request with a penalized item takes DecidePenalized (from
  // DecideAll, DecideOneHashed and DecideMany; never DecideSingle's own hot path): the blocks
  // first, then the limits as without penalties, then each penalized item's denial recorded
  // (algo::RecordDenial). The penalty states are kept apart from the limits' (at most max_entries;
  // idle ones dropped first, and when every one is busy a new one is not kept: the key is judged by
  // its limit alone).
  struct PenaltyEntry {
    algo::PenaltyState state;
    int64_t idle_at_us = 0;  // from then on it holds nothing (block, span and offences over)
  };
  bool DecidePenalized(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                       int64_t* decided_at_us);
  static uint64_t PenaltyKey(uint64_t state_hash) { return state_hash ^ 0x9e3779b97f4a7c15u; }

  uint64_t Hash(uint64_t limit_id, std::string_view key) const;
  Shard& ShardFor(uint64_t hash) const { return *shards_[hash & shard_mask_]; }
  // Where a key seen for the first time is decided.
  enum class Placement {
    kTracked,    // it gets a slot (if it consumes)
    kOverflow,   // against its limit's overflow state (on_full shared)
    kDenied,     // denied if it would consume (on_full deny; shared with no overflow state left)
    kUntracked,  // as a fresh key, not recorded (on_full allow_untracked)
  };
  // Housekeeping for a new key in `shard`: sweeps a few slots, and the whole shard when it is
  // full or about to grow (rate-limited). Returns how many states it erased; when any, slot and
  // log pointers are invalid. Requires shard.mu.
  size_t Reclaim(Shard& shard, int64_t now);
  // Where a new key goes when `reserved` more keys are already promised a place in `shard`:
  // kTracked while the shard holds fewer than max_entries - reserved states, else per on_full.
  // Requires shard.mu.
  Placement Place(const Shard& shard, size_t reserved) const;
  // The overflow state of `limit_id` in `shard`, created if needed; nullptr when the shard holds
  // kMaxOverflowStates already (Reclaim drops the idle ones). Pointers stay valid until Reclaim.
  // Require shard.mu.
  algo::CompactState* OverflowState(Shard& shard, uint64_t limit_id);
  algo::LogState* OverflowLog(Shard& shard, uint64_t limit_id);
  // What a new tracked key starts from (on_full shared: a copy of its limit's overflow state
  // while that is busy; else a fresh state). Require shard.mu.
  algo::CompactState StartState(Shard& shard, uint64_t limit_id, int64_t now) const;
  algo::LogState StartLog(Shard& shard, uint64_t limit_id, int64_t now) const;
  // Store the state of a key seen for the first time, placed kTracked. Require shard.mu.
  void StoreFresh(Shard& shard, uint64_t hash, const algo::CompactState& state);
  void StoreFreshLog(Shard& shard, uint64_t hash, algo::LogState&& log, int64_t now);
  // A new key's decision when it would consume and has no room (deny, or no overflow state).
  static Decision NoRoomDecision();
  void CountNoRoom(bool allowed);

  const Clock* clock_;
  const size_t max_penalties_;
  mutable absl::Mutex penalties_mu_;
  absl::flat_hash_map<uint64_t, PenaltyEntry> penalties_ ABSL_GUARDED_BY(penalties_mu_);
  std::vector<std::unique_ptr<Shard>> shards_;
  uint64_t shard_mask_;
  const OnFull on_full_;
  std::atomic<uint64_t> reclaimed_{0};
  std::atomic<uint64_t> no_room_allowed_{0};
  std::atomic<uint64_t> no_room_denied_{0};
};

}  // namespace sluice::store

#endif  // SLUICE_BACKEND_MEMORY_MEMORY_STORE_H_
