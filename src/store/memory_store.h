// MemoryStore: limiter state in this process, keyed by (limit id, key).
//
// Safe for concurrent use without external synchronization. The key space is split over
// independent shards, each behind its own lock; a decision locks exactly one shard.
//
// Bounded: at most Options::max_entries live (limit, key) states. Idle states — back to their
// initial value: a full bucket, a window that is over — are reclaimed as the store goes (a few
// slots are swept on every new key, and a whole shard is swept before it would grow). When a
// shard is full anyway, a new key evicts, among a few entries near its slot, the one that would
// become idle first (the least state is lost); evictions are counted. An evicted key starts
// fresh, i.e. it is treated leniently — the store never denies a request for lack of room.
//
// Compact: token_bucket, leaky_bucket, fixed_window and sliding_window keep 24 bytes per entry in
// a table at least 75 % full, so at most 32 bytes per key; see compact_table.h for the
// fingerprint scheme. sliding_log keeps a log of up to N entries per key (16 bytes each).
//
// Time: decisions never use a time earlier than one the store already used (one monotonic clock
// for the whole store), so a clock stepping back cannot mint quota.

#ifndef SLUICE_STORE_MEMORY_STORE_H_
#define SLUICE_STORE_MEMORY_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "algo/algorithms.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "store/compact_table.h"
#include "util/spin_lock.h"

namespace sluice::store {

class MemoryStore {
 public:
  struct Options {
    size_t max_entries = size_t{1} << 24;  // ~16.7M (limit, key) states in all
    size_t shards = 64;                   // rounded up to a power of two
  };

  struct Stats {
    size_t entries = 0;         // live states
    size_t memory_bytes = 0;    // table slots (sliding logs not included)
    uint64_t evictions = 0;     // live states dropped for room
    uint64_t reclaimed = 0;     // idle states dropped
  };

  // `clock` is not owned and must outlive the store.
  MemoryStore(const Options& options, const Clock* clock);
  ~MemoryStore();

  // Decides one request of `cost` for `key` against `limit` at the clock's time.
  // `limit_id` names the limit's state (see LimitId); `limit` must pass ValidateLimit.
  Decision Decide(const Limit& limit, uint64_t limit_id, std::string_view key, uint64_t cost);

  // Same at an explicit time (clamped so that it never runs backwards; see above).
  Decision DecideAt(const Limit& limit, uint64_t limit_id, std::string_view key, uint64_t cost,
                    int64_t now_us);

  // One limit of a request, for DecideAll.
  struct Item {
    const Limit* limit = nullptr;
    uint64_t limit_id = 0;
    std::string_view key;
    uint64_t cost = 1;
    // fixed_window only: count the request even when denied (envoyproxy/ratelimit's counting);
    // such items are consumed whatever the other items decide.
    bool count_denied = false;
    // A shadow item's deny does not deny the request.
    bool shadow = false;
  };

  // Decides several limits of one request at once, all-or-nothing: if every non-shadow item
  // allows, each consumes its cost; if any denies, none consumes anything (but count_denied
  // items). out[i] receives item i's decision; an item that would have allowed a denied request
  // reports allowed with nothing consumed. Returns whether the request is allowed.
  // Atomic with respect to every other decision: the shards involved are locked together.
  // `decided_at_us`, when given, receives the time the decision used (now_us, clamped; see
  // MonotonicNow): Refund needs it.
  bool DecideAll(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                 int64_t* decided_at_us = nullptr);

  // Gives back what `items` consumed when DecideAll admitted them at `decided_at_us` (e.g. the
  // upstream failed); see algo::RefundCompact for what each algorithm gives back. Pass only
  // items that consumed (their decision allowed, cost > 0). A key whose state is gone (idle,
  // reclaimed, evicted, reset) is left alone. Never makes a state better than a fresh key's.
  void Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us);

  // Starts fetching the state of (limit_id, key) into the cache, without locking: a caller with
  // several decisions at hand prefetches the next ones while deciding the current one, so that
  // their memory latencies overlap. Purely a hint.
  void Prefetch(uint64_t limit_id, std::string_view key) const;

  // Forgets the state of one key ("unblock this customer"). True if there was one.
  bool Reset(uint64_t limit_id, std::string_view key);

  Stats GetStats() const;

  // The time decisions use for a proposed time: max(proposed, latest used), in [0, kMaxTimeUs].
  int64_t MonotonicNow(int64_t proposed_us);

 private:
  struct Shard;

  uint64_t Hash(uint64_t limit_id, std::string_view key) const;
  Shard& ShardFor(uint64_t hash) const { return *shards_[hash & shard_mask_]; }
  // Makes room for one more entry in `shard`: reclaims idle entries, evicts if still full.
  // Requires shard.mu.
  void MakeRoom(Shard& shard, uint64_t hash, int64_t now);
  // Stores the state of a key seen for the first time (after MakeRoom). Require shard.mu.
  void StoreFresh(Shard& shard, uint64_t hash, const algo::CompactState& state, int64_t now);
  void StoreFreshLog(Shard& shard, uint64_t hash, algo::LogState&& log, int64_t now);

  const Clock* clock_;
  std::vector<std::unique_ptr<Shard>> shards_;
  uint64_t shard_mask_;
  std::atomic<int64_t> latest_now_us_{0};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> reclaimed_{0};
};

}  // namespace sluice::store

#endif  // SLUICE_STORE_MEMORY_STORE_H_
