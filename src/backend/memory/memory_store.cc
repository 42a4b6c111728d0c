#include "backend/memory/memory_store.h"

#include <algorithm>
#include <bit>

#include "absl/container/inlined_vector.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::store {
namespace {

constexpr size_t kSweepPerNewKey = 2;  // slots examined for idle entries on each new key

// Takes back the last CommitSlidingLog of `cost` (DecideAll's undo).
void UndoLogCommit(algo::LogState& log, uint64_t cost, int64_t saved_idle_at_us) {
  log.entries.back().cost -= cost;
  if (log.entries.back().cost == 0) log.entries.pop_back();
  log.sum -= cost;
  log.idle_at_us = saved_idle_at_us;
}

// count_denied applies to fixed_window only: such an item is counted even when denied.
bool CountsDenied(const backend::Item& item) {
  return item.count_denied && item.limit->algorithm == Algorithm::kFixedWindow;
}

// Decides `item` on a compact state (DecideAll's decision of one item, before any undo).
Decision DecideCompactItem(const backend::Item& item, algo::CompactState& state, int64_t now) {
  if (CountsDenied(item)) {
    return algo::DecideFixedWindowCountingDenied(state, now, *item.limit, item.cost);
  }
  return algo::DecideCompact(state, now, *item.limit, item.cost);
}

// What a denied request's item reports once what it consumed is given back: the state's
// remaining and reset, looked at without consuming.
void ReportUnconsumed(const Decision& peek, Decision& d) {
  d.remaining = peek.remaining;
  d.reset_after_us = peek.reset_after_us;
  d.delay_us = 0;
}

// DecideAll's DecideOne and UndoOne for a request of one item on a compact state with room (a
// stored one, or a new key's own): returns whether the item lets the request through;
// `consumed`, whether the state keeps what it took.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool DecideCompactAlone(const backend::Item& item,
                                                            algo::CompactState& state, int64_t now,
                                                            Decision& d, bool& consumed) {
  const algo::CompactState saved = state;
  d = DecideCompactItem(item, state, now);
  const bool allowed = d.allowed || item.shadow;
  consumed = !(state == saved);
  if (!allowed && consumed && !CountsDenied(item)) {
    state = saved;
    consumed = false;
    algo::CompactState copy = state;
    ReportUnconsumed(algo::DecideCompact(copy, now, *item.limit, 0), d);
  }
  return allowed;
}

}  // namespace

// Aligned so that neighbouring shards' locks never share a cache line.
struct alignas(64) MemoryStore::Shard {
  explicit Shard(size_t max_entries) : max_entries(max_entries), table(max_entries) {}

  mutable util::SpinLock mu;
  const size_t max_entries;
  CompactTable table ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, algo::LogState> logs ABSL_GUARDED_BY(mu);
  size_t log_inserts_since_sweep ABSL_GUARDED_BY(mu) = 0;
  // The latest time a decision here used. Per shard, under its lock, so that no decision writes
  // anything shared by every thread (a store-wide latest time bounced one cache line between
  // all of them); a key's states live in one shard, so its clock still never goes back.
  int64_t latest_now_us ABSL_GUARDED_BY(mu) = 0;

  // The time a decision here uses for `proposed_us`: clamped, and not before the latest used.
  int64_t Now(int64_t proposed_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    latest_now_us = std::max(latest_now_us, std::clamp<int64_t>(proposed_us, 0, kMaxTimeUs));
    return latest_now_us;
  }
  size_t new_keys_since_full_sweep ABSL_GUARDED_BY(mu) = 0;
  // on_full shared: limit id -> the state its new keys share while the shard is full. Node maps:
  // DecideAll holds pointers into them while it creates others.
  absl::node_hash_map<uint64_t, algo::CompactState> overflow ABSL_GUARDED_BY(mu);
  absl::node_hash_map<uint64_t, algo::LogState> overflow_logs ABSL_GUARDED_BY(mu);

  size_t Entries() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return table.size() + logs.size(); }
  size_t OverflowStates() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return overflow.size() + overflow_logs.size();
  }
};

MemoryStore::MemoryStore(const Options& options, const Clock* clock)
    : clock_(clock), on_full_(options.on_full) {
  // Never more shards than entries, and the shards' bounds add up to max_entries exactly.
  const size_t max_entries = std::max<size_t>(options.max_entries, 1);
  const size_t n =
      std::min(std::bit_ceil(std::max<size_t>(options.shards, 1)), std::bit_floor(max_entries));
  shards_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    shards_.push_back(std::make_unique<Shard>(max_entries / n + (i < max_entries % n ? 1 : 0)));
  }
  shard_mask_ = n - 1;
}

MemoryStore::~MemoryStore() = default;

uint64_t MemoryStore::Hash(uint64_t limit_id, std::string_view key) const {
  return CompactTable::NormalizeHash(XXH3_64bits_withSeed(key.data(), key.size(), limit_id));
}

Decision MemoryStore::Decide(const Limit& limit, uint64_t limit_id, std::string_view key,
                             uint64_t cost) {
  return DecideAt(limit, limit_id, key, cost, clock_->NowMicros());
}

Decision MemoryStore::DecideAt(const Limit& limit, uint64_t limit_id, std::string_view key,
                               uint64_t cost, int64_t now_us) {
  const uint64_t hash = Hash(limit_id, key);
  Shard& shard = ShardFor(hash);
  util::SpinLockHolder lock(&shard.mu);
  const int64_t now = shard.Now(now_us);

  if (limit.algorithm == Algorithm::kSlidingLog) {
    auto it = shard.logs.find(hash);
    if (it != shard.logs.end()) return algo::DecideSlidingLog(it->second, now, limit, cost);
    Reclaim(shard, now);
    const Placement placement = Place(shard, 0);
    if (placement == Placement::kOverflow) {
      if (algo::LogState* log = OverflowLog(shard, limit_id)) {
        const Decision d = algo::DecideSlidingLog(*log, now, limit, cost);
        CountNoRoom(d.allowed);
        return d;
      }
    }
    algo::LogState start =
        placement == Placement::kTracked ? StartLog(shard, limit_id, now) : algo::LogState{};
    const Decision d = algo::DecideSlidingLog(start, now, limit, cost);
    if (!d.allowed || cost == 0) return d;  // it needs no room
    if (placement == Placement::kTracked) {
      StoreFreshLog(shard, hash, std::move(start), now);
      return d;
    }
    if (placement == Placement::kUntracked) {
      CountNoRoom(true);
      return d;
    }
    CountNoRoom(false);
    return NoRoomDecision();
  }

  CompactTable& table = shard.table;
  if (CompactTable::Slot* slot = table.Find(hash)) {
    return algo::DecideCompact(slot->state, now, limit, cost);
  }
  Reclaim(shard, now);  // erases slots: none is held
  const Placement placement = Place(shard, 0);
  if (placement == Placement::kOverflow) {
    if (algo::CompactState* state = OverflowState(shard, limit_id)) {
      const Decision d = algo::DecideCompact(*state, now, limit, cost);
      CountNoRoom(d.allowed);
      return d;
    }
  }
  algo::CompactState start =
      placement == Placement::kTracked ? StartState(shard, limit_id, now) : algo::CompactState{};
  const algo::CompactState before = start;
  const Decision d = algo::DecideCompact(start, now, limit, cost);
  if (start == before) return d;  // denied or a peek: it needs no room
  if (placement == Placement::kTracked) {
    StoreFresh(shard, hash, start);
    return d;
  }
  if (placement == Placement::kUntracked) {
    CountNoRoom(true);
    return d;
  }
  CountNoRoom(false);
  return NoRoomDecision();
}

size_t MemoryStore::Reclaim(Shard& shard, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  CompactTable& table = shard.table;
  size_t erased = table.SweepSome(now, kSweepPerNewKey);
  ++shard.new_keys_since_full_sweep;
  if ((shard.Entries() >= shard.max_entries || table.NeedsGrowth()) &&
      shard.new_keys_since_full_sweep >= (table.capacity() + shard.logs.size()) / 8) {
    // Before growing, and while full, take back everything idle. Rate-limited to once per
    // capacity/8 new keys, so that a full shard with nothing idle costs O(1) amortised per new
    // key; counting every new key (not only those inserted) means a full shard still gets swept
    // and finds its idle states once they are there.
    shard.new_keys_since_full_sweep = 0;
    erased += table.EraseIdle(now);
    const size_t logs_before = shard.logs.size();
    absl::erase_if(shard.logs, [now](const auto& kv) { return kv.second.IsIdle(now); });
    erased += logs_before - shard.logs.size();
    absl::erase_if(shard.overflow, [now](const auto& kv) { return kv.second.IsIdle(now); });
    absl::erase_if(shard.overflow_logs, [now](const auto& kv) { return kv.second.IsIdle(now); });
  }
  if (erased > 0) reclaimed_.fetch_add(erased, std::memory_order_relaxed);
  return erased;
}

MemoryStore::Placement MemoryStore::Place(const Shard& shard, size_t reserved) const
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  if (shard.Entries() + reserved < shard.max_entries) return Placement::kTracked;
  switch (on_full_) {
    case OnFull::kShared:
      return Placement::kOverflow;
    case OnFull::kDeny:
      return Placement::kDenied;
    case OnFull::kAllowUntracked:
      return Placement::kUntracked;
  }
  return Placement::kDenied;
}

algo::CompactState* MemoryStore::OverflowState(Shard& shard, uint64_t limit_id)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  if (auto it = shard.overflow.find(limit_id); it != shard.overflow.end()) return &it->second;
  if (shard.OverflowStates() >= kMaxOverflowStates) return nullptr;  // until Reclaim sweeps
  return &shard.overflow[limit_id];
}

algo::LogState* MemoryStore::OverflowLog(Shard& shard, uint64_t limit_id)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  if (auto it = shard.overflow_logs.find(limit_id); it != shard.overflow_logs.end()) {
    return &it->second;
  }
  if (shard.OverflowStates() >= kMaxOverflowStates) return nullptr;
  return &shard.overflow_logs[limit_id];
}

algo::CompactState MemoryStore::StartState(Shard& shard, uint64_t limit_id, int64_t now) const
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  // (The emptiness test first: most shards never ran out of room, and a lookup in an empty map
  // still hashes the id.)
  if (on_full_ == OnFull::kShared && !shard.overflow.empty()) {
    if (auto it = shard.overflow.find(limit_id);
        it != shard.overflow.end() && !it->second.IsIdle(now)) {
      return it->second;
    }
  }
  return {};
}

algo::LogState MemoryStore::StartLog(Shard& shard, uint64_t limit_id, int64_t now) const
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  if (on_full_ == OnFull::kShared && !shard.overflow_logs.empty()) {
    if (auto it = shard.overflow_logs.find(limit_id);
        it != shard.overflow_logs.end() && !it->second.IsIdle(now)) {
      return it->second;
    }
  }
  return {};
}

Decision MemoryStore::NoRoomDecision() {
  return Decision{.allowed = false,
                  .remaining = 0,
                  .retry_after_us = kNoRoomRetryAfterUs,
                  .reset_after_us = kNoRoomRetryAfterUs,
                  .delay_us = 0};
}

void MemoryStore::CountNoRoom(bool allowed) {
  (allowed ? no_room_allowed_ : no_room_denied_).fetch_add(1, std::memory_order_relaxed);
}

void MemoryStore::StoreFresh(Shard& shard, uint64_t hash, const algo::CompactState& state)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  // Place left room, and max_entries is also the table's own bound: Insert succeeds.
  shard.table.Insert(hash, state);
}

void MemoryStore::StoreFreshLog(Shard& shard, uint64_t hash, algo::LogState&& log, int64_t now)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  if (++shard.log_inserts_since_sweep > shard.logs.size() / 2 + 16) {
    // Amortised O(1): a full pass over the logs once their number has grown by half.
    shard.log_inserts_since_sweep = 0;
    const size_t before = shard.logs.size();
    absl::erase_if(shard.logs, [now](const auto& kv) { return kv.second.IsIdle(now); });
    reclaimed_.fetch_add(before - shard.logs.size(), std::memory_order_relaxed);
  }
  shard.logs.emplace(hash, std::move(log));
}
// Unlocked on purpose (a prefetch hint reads no value; see CompactTable::Prefetch): the analysis
// is off for it.
void MemoryStore::Prefetch(uint64_t limit_id,
                           std::string_view key) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const uint64_t hash = Hash(limit_id, key);
  ShardFor(hash).table.Prefetch(hash);  // NOLINT: deliberately unlocked, see CompactTable
}

bool MemoryStore::Reset(uint64_t limit_id, std::string_view key) {
  const uint64_t hash = Hash(limit_id, key);
  Shard& shard = ShardFor(hash);
  util::SpinLockHolder lock(&shard.mu);
  if (CompactTable::Slot* slot = shard.table.Find(hash)) {
    shard.table.Erase(slot);
    return true;
  }
  return shard.logs.erase(hash) > 0;
}

MemoryStore::LeaseGrant MemoryStore::Lease(const Item& item, uint64_t want, int64_t now_us,
                                           int64_t life_us) {
  const Limit& limit = *item.limit;
  const bool bucket = limit.algorithm == Algorithm::kTokenBucket;
  if ((!bucket && limit.algorithm != Algorithm::kFixedWindow) || want == 0) return {};
  const uint64_t hash = Hash(item.limit_id, item.key);
  Shard& shard = ShardFor(hash);
  util::SpinLockHolder lock(&shard.mu);
  CompactTable::Slot* slot = shard.table.Find(hash);
  if (slot == nullptr) return {};
  const int64_t now = shard.Now(now_us);
  algo::CompactState state = slot->state;
  int64_t ends = 0;
  if (bucket) {
    // TAT = idle_at - 1 + aux/N when aux != 0, else idle_at (algorithms.h).
    ends = std::min(now + std::max<int64_t>(life_us, 1), kMaxTimeUs);
    if (state.idle_at_us < ends || (state.idle_at_us == ends && state.aux != 0)) {
      state = {.idle_at_us = ends, .aux = 0};
    }
  }
  algo::CompactState look = state;
  const Decision before = algo::DecideCompact(look, now, limit, 0);
  const uint64_t half = (static_cast<uint64_t>(before.remaining) + 1) / 2;
  const uint64_t granted = std::min(want, half);
  // Too little to cover the request that asks: it is decided here instead, exactly (a smaller
  // lease would take units from it).
  if (granted < std::max<uint64_t>(item.cost, 1)) return {.exhausted = true};
  const Decision d = algo::DecideCompact(state, now, limit, granted);
  if (!d.allowed) return {};  // (remaining >= granted admits it)
  slot->state = state;
  if (!bucket) ends = now + d.reset_after_us;  // the window's end
  return {.granted = granted,
          .now_us = now,
          .ends_us = ends,
          .left = static_cast<uint64_t>(d.remaining),
          .reset_until_us = now + d.reset_after_us};
}

void MemoryStore::Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us) {
  for (const Item& item : items) {
    const uint64_t hash = Hash(item.limit_id, item.key);
    Shard& shard = ShardFor(hash);
    util::SpinLockHolder lock(&shard.mu);
    const int64_t now = shard.Now(std::max(now_us, decided_at_us));
    if (item.limit->algorithm == Algorithm::kSlidingLog) {
      auto it = shard.logs.find(hash);
      if (it != shard.logs.end()) {
        algo::RefundSlidingLog(it->second, decided_at_us, now, *item.limit, item.cost);
      }
    } else if (CompactTable::Slot* slot = shard.table.Find(hash)) {
      algo::RefundCompact(slot->state, decided_at_us, now, *item.limit, item.cost);
    }
  }
}

MemoryStore::Stats MemoryStore::GetStats() const {
  Stats stats;
  for (const auto& shard : shards_) {
    util::SpinLockHolder lock(&shard->mu);
    stats.entries += shard->Entries();
    stats.overflow_states += shard->OverflowStates();
    stats.memory_bytes += shard->table.memory_bytes();
  }
  stats.on_full = on_full_;
  stats.no_room_allowed = no_room_allowed_.load(std::memory_order_relaxed);
  stats.no_room_denied = no_room_denied_.load(std::memory_order_relaxed);
  stats.reclaimed = reclaimed_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace sluice::store

namespace sluice::store {

// A state being decided by DecideAll: an existing slot or log, a new key's own state (stored at
// the end if it consumed and was placed kTracked), or its limit's overflow state.
struct MemoryStore::Work {
  uint64_t hash = 0;
  Shard* shard = nullptr;
  bool is_log = false;
  size_t owner = 0;     // the first item with this state; later ones decide it in turn
  bool is_new = false;  // owners: no stored state
  Placement placement = Placement::kTracked;  // owners of new keys
  algo::CompactState* state = nullptr;  // compact: the slot's, `fresh_state` or an overflow one
  algo::LogState* log = nullptr;        // sliding_log: the stored log, `fresh_log`, overflow
  algo::CompactState fresh_state;
  std::unique_ptr<algo::LogState> fresh_log;
  algo::CompactState saved;  // for undo
  int64_t saved_idle_at = 0;
  bool consumed = false;
  bool no_room = false;  // denied for lack of room
  bool keep = false;     // owners: some item with this state consumed (KeepNewStates)
};

// The analysis is off in DecideAll and its steps: they work under a set of shard locks known
// only at run time (taken in address order, below), which it cannot follow. The helpers they
// call under those locks say which lock they need (ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu)) and
// are checked.
template <typename HashOf>
bool MemoryStore::DecideMany(std::span<const Item> items, const HashOf& hash_of, int64_t now_us,
                             std::span<Decision> out,
                             int64_t* decided_at_us) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  absl::InlinedVector<Work, 8> work(items.size());
  absl::InlinedVector<Shard*, 8> locked;
  Plan(items, hash_of, std::span(work.data(), work.size()), locked);
  for (Shard* s : locked) s->mu.Lock();
  // One time for the whole decision: not before any time its shards have used.
  int64_t now = std::clamp<int64_t>(now_us, 0, kMaxTimeUs);
  for (Shard* s : locked) now = std::max(now, s->latest_now_us);
  for (Shard* s : locked) s->latest_now_us = now;
  if (decided_at_us != nullptr) *decided_at_us = now;
  const std::span<Work> states(work.data(), work.size());
  FindStates(states, now);
  bool allowed = true;
  for (size_t i = 0; i < items.size(); ++i) {
    allowed = DecideOne(items[i], i, states, now, out[i]) && allowed;
  }
  if (!allowed) UndoDenied(items, states, now, out);
  KeepNewStates(states, out, allowed, now);
  for (Shard* s : locked) s->mu.Unlock();
  return allowed;
}

// DecideAll's steps for a request of one item: one shard, one state, nothing to order or to
// share; the same decision as the general path's.
bool MemoryStore::DecideSingle(const Item& item, uint64_t hash, int64_t now_us, Decision& d,
                               int64_t* decided_at_us) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Shard& shard = ShardFor(hash);
  util::SpinLockHolder lock(&shard.mu);
  const int64_t now = shard.Now(now_us);
  if (decided_at_us != nullptr) *decided_at_us = now;
  const bool is_log = item.limit->algorithm == Algorithm::kSlidingLog;
  Placement placement = Placement::kTracked;
  if (!is_log) {
    // The usual cases need no Work: a stored compact state, and a new key that finds room.
    bool consumed = false;
    if (CompactTable::Slot* slot = shard.table.Find(hash)) {
      return DecideCompactAlone(item, slot->state, now, d, consumed);
    }
    Reclaim(shard, now);  // housekeeping first, as FindStates
    placement = Place(shard, 0);
    if (placement == Placement::kTracked) {
      // As StartNewKey, then KeepNewStates: it starts from StartState and is stored if it
      // consumed; a tracked key's decision counts for no room statistic.
      algo::CompactState fresh = StartState(shard, item.limit_id, now);
      const bool allowed = DecideCompactAlone(item, fresh, now, d, consumed);
      if (consumed) StoreFresh(shard, hash, fresh);
      return allowed;
    }
  }
  Work w;
  w.hash = hash;
  w.shard = &shard;
  w.is_log = is_log;
  if (!is_log) {  // a new key without room, placed above
    w.is_new = true;
    w.placement = placement;
  } else if (!LookUp(w)) {
    // Housekeeping first (as FindStates): it erases only other states, so there is nothing found
    // to look up again.
    Reclaim(shard, now);
    w.is_new = true;
    w.placement = Place(shard, 0);
  }
  const bool allowed = DecideOne(item, 0, std::span(&w, 1), now, d);
  if (!allowed) UndoOne(item, w, now, d);
  if (w.is_new) {
    CountPlaced(w, w, d, allowed);
    if (w.placement == Placement::kTracked && w.consumed) {
      if (w.is_log) {
        StoreFreshLog(shard, w.hash, std::move(*w.fresh_log), now);
      } else {
        StoreFresh(shard, w.hash, w.fresh_state);
      }
    }
  }
  return allowed;
}

template <typename HashOf>
inline void MemoryStore::Plan(std::span<const Item> items, const HashOf& hash_of,
                              std::span<Work> work, absl::InlinedVector<Shard*, 8>& locked) const {
  for (size_t i = 0; i < items.size(); ++i) {
    Work& w = work[i];
    w.hash = hash_of(i);
    w.shard = &ShardFor(w.hash);
    w.is_log = items[i].limit->algorithm == Algorithm::kSlidingLog;
    w.owner = i;
    // The same state twice in one request (identical descriptors) is decided twice in turn.
    for (size_t j = 0; j < i; ++j) {
      if (work[j].hash == w.hash && work[j].is_log == w.is_log) {
        w.owner = j;
        break;
      }
    }
    locked.push_back(w.shard);
  }
  // One lock per shard, always in address order, so concurrent requests cannot deadlock.
  if (locked.size() > 1) {
    std::sort(locked.begin(), locked.end());
    locked.erase(std::unique(locked.begin(), locked.end()), locked.end());
  }
}

inline bool MemoryStore::LookUp(Work& w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (w.is_log) {
    auto it = w.shard->logs.find(w.hash);
    w.log = it == w.shard->logs.end() ? nullptr : &it->second;
    return w.log != nullptr;
  }
  CompactTable::Slot* slot = w.shard->table.Find(w.hash);
  w.state = slot == nullptr ? nullptr : &slot->state;
  return w.state != nullptr;
}

inline void MemoryStore::FindStates(std::span<Work> work,
                                    int64_t now) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Each owner's stored state, if any. A new key gets housekeeping first (which may move or
  // erase slots: then the states found are looked up again, and an idle state another item found
  // may be gone), then a place; only then are pointers taken for good.
  const size_t n = work.size();
  bool all_found = true;
  for (size_t i = 0; i < n; ++i) {
    if (work[i].owner == i) all_found = LookUp(work[i]) && all_found;
  }
  if (all_found) return;
  size_t erased = 0;
  for (size_t i = 0; i < n; ++i) {
    Work& w = work[i];
    if (w.owner == i && w.state == nullptr && w.log == nullptr) erased += Reclaim(*w.shard, now);
  }
  if (erased > 0) {
    // (A state not found before is not there after: Reclaim only erases.)
    for (size_t i = 0; i < n; ++i) {
      Work& w = work[i];
      if (w.owner == i && (w.state != nullptr || w.log != nullptr)) LookUp(w);
    }
  }
  absl::InlinedVector<std::pair<const Shard*, size_t>, 8> reserved;  // kTracked places given
  for (size_t i = 0; i < n; ++i) {
    Work& w = work[i];
    if (w.owner != i || w.state != nullptr || w.log != nullptr) continue;
    w.is_new = true;
    auto it = std::find_if(reserved.begin(), reserved.end(),
                           [&](const auto& r) { return r.first == w.shard; });
    if (it == reserved.end()) it = reserved.insert(reserved.end(), {w.shard, 0});
    w.placement = Place(*w.shard, it->second);
    if (w.placement == Placement::kTracked) ++it->second;
  }
}

bool MemoryStore::DecideAll(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                            int64_t* decided_at_us) {
  if (items.size() == 1) {
    return DecideSingle(items[0], Hash(items[0].limit_id, items[0].key), now_us, out[0],
                        decided_at_us);
  }
  return DecideMany(
      items, [this, items](size_t i) { return Hash(items[i].limit_id, items[i].key); }, now_us, out,
      decided_at_us);
}

bool MemoryStore::DecideAll(std::span<const Item> items, std::span<const uint64_t> hashes,
                            int64_t now_us, std::span<Decision> out, int64_t* decided_at_us) {
  if (items.size() == 1) {
    return DecideSingle(items[0], CompactTable::NormalizeHash(hashes[0]), now_us, out[0],
                        decided_at_us);
  }
  return DecideMany(
      items, [hashes](size_t i) { return CompactTable::NormalizeHash(hashes[i]); }, now_us, out,
      decided_at_us);
}

void MemoryStore::StartNewKey(const Item& item, Work& w,
                              int64_t now) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (w.placement == Placement::kOverflow) {
    if (w.is_log) {
      w.log = OverflowLog(*w.shard, item.limit_id);
    } else {
      w.state = OverflowState(*w.shard, item.limit_id);
    }
    if (w.log == nullptr && w.state == nullptr) w.placement = Placement::kDenied;
  }
  const bool copy = w.placement == Placement::kTracked;
  if (w.is_log && w.log == nullptr) {
    w.fresh_log = std::make_unique<algo::LogState>(copy ? StartLog(*w.shard, item.limit_id, now)
                                                        : algo::LogState{});
    w.log = w.fresh_log.get();
  } else if (!w.is_log && w.state == nullptr) {
    w.fresh_state = copy ? StartState(*w.shard, item.limit_id, now) : algo::CompactState{};
    w.state = &w.fresh_state;
  }
}

inline bool MemoryStore::DecideOne(const Item& item, size_t i, std::span<Work> work, int64_t now,
                                   Decision& d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Work& w = work[i];
  const Work& owner = work[w.owner];
  if (w.owner != i) {
    w.state = owner.state;
    w.log = owner.log;
  } else if (w.is_new) {  // else FindStates found its state
    StartNewKey(item, w, now);
  }
  if (w.is_log) {
    w.saved_idle_at = w.log->idle_at_us;
    d = algo::EvaluateSlidingLog(*w.log, now, *item.limit, item.cost);
    if (d.allowed && item.cost > 0) {
      algo::CommitSlidingLog(*w.log, now, *item.limit, item.cost, d);
      w.consumed = true;
    }
  } else {
    w.saved = *w.state;
    d = DecideCompactItem(item, *w.state, now);
    w.consumed = !(*w.state == w.saved);
  }
  if (w.consumed && work[w.owner].placement == Placement::kDenied) {
    // A new key with no room (on_full deny): what it would have consumed cannot be kept.
    if (w.is_log) {
      UndoLogCommit(*w.log, item.cost, w.saved_idle_at);
    } else {
      *w.state = w.saved;
    }
    w.consumed = false;
    if (d.allowed) {
      w.no_room = true;
      d = NoRoomDecision();
    }
  }
  return d.allowed || item.shadow;
}

inline void MemoryStore::UndoOne(const Item& item, Work& w, int64_t now,
                                 Decision& d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (!w.consumed || CountsDenied(item)) return;
  Decision peek;
  if (w.is_log) {
    UndoLogCommit(*w.log, item.cost, w.saved_idle_at);
    peek = algo::EvaluateSlidingLog(*w.log, now, *item.limit, 0);
  } else {
    *w.state = w.saved;
    algo::CompactState copy = *w.state;
    peek = algo::DecideCompact(copy, now, *item.limit, 0);
  }
  w.consumed = false;
  ReportUnconsumed(peek, d);
}

inline void MemoryStore::UndoDenied(std::span<const Item> items, std::span<Work> work, int64_t now,
                                    std::span<Decision> out) {
  // Undo, newest first, everything but count_denied items; report what is left unconsumed.
  for (size_t i = items.size(); i-- > 0;) UndoOne(items[i], work[i], now, out[i]);
}

inline void MemoryStore::CountPlaced(const Work& w, const Work& owner, const Decision& d,
                                     bool allowed) {
  switch (owner.is_new ? owner.placement : Placement::kTracked) {
    case Placement::kTracked:
      break;
    case Placement::kOverflow:
      CountNoRoom(d.allowed && allowed);
      break;
    case Placement::kDenied:
      if (w.no_room) CountNoRoom(false);
      break;
    case Placement::kUntracked:
      if (w.consumed) CountNoRoom(true);
      break;
  }
}

inline void MemoryStore::KeepNewStates(std::span<Work> work, std::span<const Decision> out,
                                       bool allowed, int64_t now) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // New keys' own states that now hold something are stored (kTracked) or dropped (kDenied,
  // kUntracked); decisions that found no room are counted.
  const size_t n = work.size();
  for (size_t i = 0; i < n; ++i) {
    const Work& w = work[i];
    if (w.consumed) work[w.owner].keep = true;
    CountPlaced(w, work[w.owner], out[i], allowed);
  }
  for (size_t i = 0; i < n; ++i) {
    Work& w = work[i];
    if (w.owner != i || !w.is_new || w.placement != Placement::kTracked || !w.keep) continue;
    if (w.is_log) {
      StoreFreshLog(*w.shard, w.hash, std::move(*w.fresh_log), now);
    } else {
      StoreFresh(*w.shard, w.hash, w.fresh_state);
    }
  }
}

void MemoryStore::Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                         Done done) {
  done(DecideNow(items, now_us, out));
}

backend::Outcome MemoryStore::DecideNow(std::span<const Item> items, int64_t now_us,
                                        std::span<Decision> out) {
  backend::Outcome outcome;
  outcome.allowed = DecideAll(items, now_us, out, &outcome.decided_at_us);
  return outcome;
}

void MemoryStore::Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
                         RefundDone done) {
  Refund(items, decided_at_us, now_us);
  done(absl::OkStatus());
}

void MemoryStore::Reset(std::span<const Item> items, ResetDone done) {
  size_t forgotten = 0;
  for (const Item& item : items) forgotten += Reset(item.limit_id, item.key) ? 1 : 0;
  done(forgotten);
}

}  // namespace sluice::store
