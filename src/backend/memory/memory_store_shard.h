// MemoryStore::Shard: one shard's states and lock, shared by memory_store.cc (single decisions,
// upkeep) and decide_all.cc (requests of several items). Private to backend/memory.

#ifndef SLUICE_BACKEND_MEMORY_MEMORY_STORE_SHARD_H_
#define SLUICE_BACKEND_MEMORY_MEMORY_STORE_SHARD_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "algo/algorithms.h"
#include "backend/memory/compact_table.h"
#include "backend/memory/memory_store.h"
#include "util/spin_lock.h"

namespace sluice::store {

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

}  // namespace sluice::store

#endif  // SLUICE_BACKEND_MEMORY_MEMORY_STORE_SHARD_H_
