#include "store/memory_store.h"

#include <algorithm>
#include <bit>

#include "absl/container/inlined_vector.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::store {
namespace {

constexpr size_t kSweepPerInsert = 2;    // slots examined for idle entries on each new key
constexpr size_t kEvictionSample = 8;    // entries compared when one must be evicted

}  // namespace

// Aligned so that neighbouring shards' locks never share a cache line.
struct alignas(64) MemoryStore::Shard {
  explicit Shard(size_t max_entries) : max_entries(max_entries), table(max_entries) {}

  mutable util::SpinLock mu;
  const size_t max_entries;
  CompactTable table ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, algo::LogState> logs ABSL_GUARDED_BY(mu);
  size_t log_inserts_since_sweep ABSL_GUARDED_BY(mu) = 0;
  size_t inserts_since_full_sweep ABSL_GUARDED_BY(mu) = 0;

  size_t Entries() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return table.size() + logs.size(); }
};

MemoryStore::MemoryStore(const Options& options, const Clock* clock) : clock_(clock) {
  // Never more shards than entries, and the shards' bounds add up to max_entries exactly.
  const size_t max_entries = std::max<size_t>(options.max_entries, 1);
  const size_t n = std::min(std::bit_ceil(std::max<size_t>(options.shards, 1)),
                            std::bit_floor(max_entries));
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

int64_t MemoryStore::MonotonicNow(int64_t proposed_us) {
  int64_t now = std::clamp<int64_t>(proposed_us, 0, kMaxTimeUs);
  int64_t latest = latest_now_us_.load(std::memory_order_relaxed);
  while (now > latest &&
         !latest_now_us_.compare_exchange_weak(latest, now, std::memory_order_relaxed)) {
  }
  return std::max(now, latest);
}

Decision MemoryStore::Decide(const Limit& limit, uint64_t limit_id, std::string_view key,
                             uint64_t cost) {
  return DecideAt(limit, limit_id, key, cost, clock_->NowMicros());
}

Decision MemoryStore::DecideAt(const Limit& limit, uint64_t limit_id, std::string_view key,
                               uint64_t cost, int64_t now_us) {
  const int64_t now = MonotonicNow(now_us);
  const uint64_t hash = Hash(limit_id, key);
  Shard& shard = ShardFor(hash);
  util::SpinLockHolder lock(&shard.mu);

  if (limit.algorithm == Algorithm::kSlidingLog) {
    auto it = shard.logs.find(hash);
    if (it != shard.logs.end()) return algo::DecideSlidingLog(it->second, now, limit, cost);
    algo::LogState fresh;
    const Decision d = algo::DecideSlidingLog(fresh, now, limit, cost);
    if (d.allowed && cost > 0) StoreFreshLog(shard, hash, std::move(fresh), now);
    return d;
  }

  CompactTable& table = shard.table;
  if (CompactTable::Slot* slot = table.Find(hash)) {
    return algo::DecideCompact(slot->state, now, limit, cost);
  }
  algo::CompactState fresh;
  const Decision d = algo::DecideCompact(fresh, now, limit, cost);
  if (d.allowed && cost > 0) StoreFresh(shard, hash, fresh, now);  // else it needs no slot
  return d;
}

void MemoryStore::StoreFresh(Shard& shard, uint64_t hash, const algo::CompactState& state,
                             int64_t now) {
  if (const size_t erased = shard.table.SweepSome(now, kSweepPerInsert)) {
    reclaimed_.fetch_add(erased, std::memory_order_relaxed);
  }
  MakeRoom(shard, hash, now);
  shard.table.Insert(hash, state);
}

void MemoryStore::StoreFreshLog(Shard& shard, uint64_t hash, algo::LogState&& log, int64_t now) {
  if (++shard.log_inserts_since_sweep > shard.logs.size() / 2 + 16) {
    // Amortised O(1): a full pass over the logs once their number has grown by half.
    shard.log_inserts_since_sweep = 0;
    const size_t before = shard.logs.size();
    absl::erase_if(shard.logs, [now](const auto& kv) { return kv.second.IsIdle(now); });
    reclaimed_.fetch_add(before - shard.logs.size(), std::memory_order_relaxed);
  }
  MakeRoom(shard, hash, now);
  shard.logs.emplace(hash, std::move(log));
}

void MemoryStore::MakeRoom(Shard& shard, uint64_t hash, int64_t now) {
  CompactTable& table = shard.table;
  ++shard.inserts_since_full_sweep;
  const bool full = shard.Entries() >= shard.max_entries;
  if ((full || table.NeedsGrowth()) && shard.inserts_since_full_sweep >= table.capacity() / 8) {
    // Before growing (or evicting), take back everything idle. Rate-limited to once per
    // capacity/8 new keys so that a full shard with nothing idle does not sweep on every insert.
    shard.inserts_since_full_sweep = 0;
    reclaimed_.fetch_add(table.EraseIdle(now), std::memory_order_relaxed);
  }
  if (shard.Entries() < shard.max_entries) return;
  if (CompactTable::Slot* victim = table.EvictionCandidate(hash, kEvictionSample)) {
    table.Erase(victim);
  } else {
    shard.logs.erase(shard.logs.begin());
  }
  evictions_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryStore::Prefetch(uint64_t limit_id, std::string_view key) const {
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

void MemoryStore::Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us) {
  const int64_t now = std::max(MonotonicNow(now_us), decided_at_us);
  for (const Item& item : items) {
    const uint64_t hash = Hash(item.limit_id, item.key);
    Shard& shard = ShardFor(hash);
    util::SpinLockHolder lock(&shard.mu);
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
    stats.memory_bytes += shard->table.memory_bytes();
  }
  stats.evictions = evictions_.load(std::memory_order_relaxed);
  stats.reclaimed = reclaimed_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace sluice::store

namespace sluice::store {

bool MemoryStore::DecideAll(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                            int64_t* decided_at_us) {
  const int64_t now = MonotonicNow(now_us);
  if (decided_at_us != nullptr) *decided_at_us = now;
  const size_t n = items.size();

  // A state being decided: an existing slot or log, or a fresh one to insert at the end.
  struct Work {
    uint64_t hash = 0;
    Shard* shard = nullptr;
    bool is_log = false;
    algo::CompactState* state = nullptr;  // compact: the slot's state or `fresh_state`
    algo::LogState* log = nullptr;        // sliding_log: the stored log or `fresh_log`
    int fresh_of = -1;                    // index of the Work that owns the fresh state, or -1
    algo::CompactState fresh_state;
    std::unique_ptr<algo::LogState> fresh_log;
    algo::CompactState saved;             // for undo
    int64_t saved_idle_at = 0;
    bool consumed = false;
  };
  absl::InlinedVector<Work, 8> work(n);
  absl::InlinedVector<Shard*, 8> locked;
  for (size_t i = 0; i < n; ++i) {
    work[i].hash = Hash(items[i].limit_id, items[i].key);
    work[i].shard = &ShardFor(work[i].hash);
    work[i].is_log = items[i].limit->algorithm == Algorithm::kSlidingLog;
    locked.push_back(work[i].shard);
  }
  // One lock per shard, always in address order, so concurrent requests cannot deadlock. (The
  // usual request has one item: one shard, nothing to order.)
  if (locked.size() > 1) {
    std::sort(locked.begin(), locked.end());
    locked.erase(std::unique(locked.begin(), locked.end()), locked.end());
  }
  for (Shard* s : locked) s->mu.Lock();

  bool allowed = true;
  for (size_t i = 0; i < n; ++i) {
    Work& w = work[i];
    const Item& item = items[i];
    // The same state twice in one request (identical descriptors) is decided twice in turn.
    for (size_t j = 0; j < i && w.state == nullptr && w.log == nullptr; ++j) {
      if (work[j].hash == w.hash && work[j].is_log == w.is_log) {
        w.state = work[j].state;
        w.log = work[j].log;
      }
    }
    if (w.state == nullptr && w.log == nullptr) {
      if (w.is_log) {
        auto it = w.shard->logs.find(w.hash);
        if (it != w.shard->logs.end()) {
          w.log = &it->second;
        } else {
          w.fresh_log = std::make_unique<algo::LogState>();
          w.log = w.fresh_log.get();
        }
      } else if (CompactTable::Slot* slot = w.shard->table.Find(w.hash)) {
        w.state = &slot->state;
      } else {
        w.state = &w.fresh_state;
      }
    }
    Decision& d = out[i];
    if (w.is_log) {
      w.saved_idle_at = w.log->idle_at_us;
      d = algo::EvaluateSlidingLog(*w.log, now, *item.limit, item.cost);
      if (d.allowed && item.cost > 0) {
        algo::CommitSlidingLog(*w.log, now, *item.limit, item.cost, d);
        w.consumed = true;
      }
    } else {
      w.saved = *w.state;
      if (item.count_denied && item.limit->algorithm == Algorithm::kFixedWindow) {
        d = algo::DecideFixedWindowCountingDenied(*w.state, now, *item.limit, item.cost);
      } else {
        d = algo::DecideCompact(*w.state, now, *item.limit, item.cost);
      }
      w.consumed = !(*w.state == w.saved);
    }
    if (!d.allowed && !item.shadow) allowed = false;
  }

  if (!allowed) {
    // Undo, newest first, everything but count_denied items; report what is left unconsumed.
    for (size_t i = n; i-- > 0;) {
      Work& w = work[i];
      const Item& item = items[i];
      if (!w.consumed || (item.count_denied && item.limit->algorithm == Algorithm::kFixedWindow)) {
        continue;  // count_denied applies to fixed_window only
      }
      if (w.is_log) {
        algo::LogState& log = *w.log;
        log.entries.back().cost -= item.cost;
        if (log.entries.back().cost == 0) log.entries.pop_back();
        log.sum -= item.cost;
        log.idle_at_us = w.saved_idle_at;
      } else {
        *w.state = w.saved;
      }
      w.consumed = false;
      Decision peek = w.is_log ? algo::EvaluateSlidingLog(*w.log, now, *item.limit, 0)
                               : [&] {
                                   algo::CompactState copy = *w.state;
                                   return algo::DecideCompact(copy, now, *item.limit, 0);
                                 }();
      out[i].remaining = peek.remaining;
      out[i].reset_after_us = peek.reset_after_us;
      out[i].delay_us = 0;
    }
  }

  // Fresh states that now hold something are stored.
  for (size_t i = 0; i < n; ++i) {
    Work& w = work[i];
    if (w.is_log ? w.fresh_log == nullptr || w.fresh_log->LiveEntries() == 0
                 : w.state != &w.fresh_state || w.fresh_state == algo::CompactState{}) {
      continue;
    }
    if (w.is_log) {
      StoreFreshLog(*w.shard, w.hash, std::move(*w.fresh_log), now);
    } else {
      StoreFresh(*w.shard, w.hash, w.fresh_state, now);
    }
  }
  for (Shard* s : locked) s->mu.Unlock();
  return allowed;
}

}  // namespace sluice::store
