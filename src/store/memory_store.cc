#include "store/memory_store.h"

#include <algorithm>
#include <bit>

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
  const size_t n = std::bit_ceil(std::max<size_t>(options.shards, 1));
  const size_t per_shard = std::max<size_t>(1, (options.max_entries + n - 1) / n);
  shards_.reserve(n);
  for (size_t i = 0; i < n; ++i) shards_.push_back(std::make_unique<Shard>(per_shard));
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
    if (!d.allowed || cost == 0) return d;  // nothing to remember
    if (++shard.log_inserts_since_sweep > shard.logs.size() / 2 + 16) {
      // Amortised O(1): a full pass over the logs once their number has grown by half.
      shard.log_inserts_since_sweep = 0;
      const size_t before = shard.logs.size();
      absl::erase_if(shard.logs, [now](const auto& kv) { return kv.second.IsIdle(now); });
      reclaimed_.fetch_add(before - shard.logs.size(), std::memory_order_relaxed);
    }
    MakeRoom(shard, hash, now);
    shard.logs.emplace(hash, std::move(fresh));
    return d;
  }

  CompactTable& table = shard.table;
  if (CompactTable::Slot* slot = table.Find(hash)) {
    return algo::DecideCompact(slot->state, now, limit, cost);
  }
  algo::CompactState fresh;
  const Decision d = algo::DecideCompact(fresh, now, limit, cost);
  if (!d.allowed || cost == 0) return d;  // a fresh state needs no slot

  if (const size_t erased = table.SweepSome(now, kSweepPerInsert)) {
    reclaimed_.fetch_add(erased, std::memory_order_relaxed);
  }
  MakeRoom(shard, hash, now);
  table.Insert(hash, fresh);
  return d;
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
