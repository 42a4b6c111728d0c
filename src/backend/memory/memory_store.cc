// MemoryStore: construction, single decisions (DecideAt), the shards' upkeep (reclaiming idle
// states, placing new keys, overflow states), leases, refunds, resets and stats. Requests of
// several items are decided in decide_all.cc.

#include "backend/memory/memory_store.h"

#include <algorithm>
#include <bit>

#include "backend/memory/memory_store_shard.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::store {
namespace {

constexpr size_t kSweepPerNewKey = 2;  // slots examined for idle entries on each new key

// The overflow state of `limit_id` in `map` (a shard's compact or log overflow states), made if
// missing while the shard holds fewer than kMaxOverflowStates.
template <typename State>
State* FindOrMakeOverflow(absl::node_hash_map<uint64_t, State>& map, size_t overflow_states,
                          uint64_t limit_id) {
  if (auto it = map.find(limit_id); it != map.end()) return &it->second;
  if (overflow_states >= MemoryStore::kMaxOverflowStates) return nullptr;  // until Reclaim sweeps
  return &map[limit_id];
}

// A new key's first state: a copy of its limit's overflow state in `map` while that one is in use
// (on_full shared), else an empty one. (The emptiness test first: most shards never ran out of
// room, and a lookup in an empty map still hashes the id.)
template <typename State>
State StartFrom(const absl::node_hash_map<uint64_t, State>& map, uint64_t limit_id, int64_t now) {
  if (!map.empty()) {
    if (auto it = map.find(limit_id); it != map.end() && !it->second.IsIdle(now)) {
      return it->second;
    }
  }
  return {};
}

}  // namespace

MemoryStore::MemoryStore(const Options& options, const Clock* clock)
    : clock_(clock),
      max_penalties_(std::max<size_t>(options.max_entries, 1)),
      on_full_(options.on_full) {
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
  return FindOrMakeOverflow(shard.overflow, shard.OverflowStates(), limit_id);
}

algo::LogState* MemoryStore::OverflowLog(Shard& shard, uint64_t limit_id)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  return FindOrMakeOverflow(shard.overflow_logs, shard.OverflowStates(), limit_id);
}

algo::CompactState MemoryStore::StartState(Shard& shard, uint64_t limit_id, int64_t now) const
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  return on_full_ == OnFull::kShared ? StartFrom(shard.overflow, limit_id, now)
                                     : algo::CompactState{};
}

algo::LogState MemoryStore::StartLog(Shard& shard, uint64_t limit_id, int64_t now) const
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
  return on_full_ == OnFull::kShared ? StartFrom(shard.overflow_logs, limit_id, now)
                                     : algo::LogState{};
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
  bool penalized = false;
  {
    absl::MutexLock lock(&penalties_mu_);  // a reset lifts a penalty's block too
    penalized = penalties_.erase(PenaltyKey(hash)) > 0;
  }
  Shard& shard = ShardFor(hash);
  util::SpinLockHolder lock(&shard.mu);
  if (CompactTable::Slot* slot = shard.table.Find(hash)) {
    shard.table.Erase(slot);
    return true;
  }
  return shard.logs.erase(hash) > 0 || penalized;
}

MemoryStore::LeaseGrant MemoryStore::Lease(const Item& item, uint64_t want, int64_t now_us,
                                           int64_t life_us) {
  const Limit& limit = *item.limit;
  const bool bucket = limit.algorithm == Algorithm::kTokenBucket;
  const bool window = limit.algorithm == Algorithm::kFixedWindow && !limit.calendar;
  if ((!bucket && !window) || want == 0) return {};
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
