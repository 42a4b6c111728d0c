// OverLimitCache: a backend that remembers the denials of the one behind it (Redis), so that a
// key over its limit costs that backend nothing until it could be admitted again. Each entry
// lives exactly as long as the denial it copies (retry_after); it only ever answers what the
// backend would, so it can under-admit (another instance's refund is not seen), never over-admit.
//
// Thread safety: safe for concurrent use if the backend behind it is.
// Ownership: `inner` and `clock` are not owned. Bounded: at most Options::max_entries entries.
// Units: microseconds.
//
// Design: docs/hybrid.md#the-overlimitcache-backend (which requests it answers, resets, reloads).

#ifndef SLUICE_BACKEND_HYBRID_OVER_LIMIT_CACHE_H_
#define SLUICE_BACKEND_HYBRID_OVER_LIMIT_CACHE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "backend/cached_denial.h"
#include "backend/reset_epoch.h"
#include "sluice/clock.h"

namespace sluice::backend {

class OverLimitCache final : public Wrapper {
 public:
  struct Options {
    size_t max_entries = 65536;
  };

  struct Stats {
    uint64_t hits = 0;           // requests denied here, with no call
    uint64_t entries = 0;        // denials held now (expired ones included until swept)
    uint64_t epoch_changes = 0;  // times a reset elsewhere emptied the cache
  };

  OverLimitCache(Backend* inner, const Clock* clock, Options options);
  ~OverLimitCache() override;

  void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
              Done done) override;
  // Resets on the backend, then forgets every denial held here (and those still on their way).
  void Reset(std::span<const Item> items, ResetDone done) override;
  bool answers_inline() const override { return inner_->answers_inline(); }

  Stats GetStats() const;

 private:
  struct Entry {
    CachedDenial denial;  // monotonic
    uint64_t cost = 0;    // the denied cost; a smaller one may be admitted sooner
    Limit limit;          // what it was decided on
  };
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
    int64_t last_sweep_us ABSL_GUARDED_BY(mu) = 0;
  };

  Shard& ShardFor(const std::string& key) const;

  // Answers the request here if its cached denials decide it; false: ask the backend.
  bool AnswerFromCache(std::span<const Item> items, int64_t now_us, int64_t mono,
                       std::span<Decision> out, const Done& done);
  // Remembers the denials of a backend decision asked at `asked_at` (monotonic).
  void Remember(std::span<const Item> items, std::span<const Decision> out, int64_t asked_at);
  void Insert(std::string key, const Entry& entry, int64_t mono);
  // Forgets every denial, and those asked before `asked_before` still on their way.
  void Clear();
  void ClearLocked(int64_t asked_before) ABSL_EXCLUSIVE_LOCKS_REQUIRED(clear_mu_);

  const Clock* const clock_;
  const size_t max_per_shard_;
  mutable std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> size_{0};  // entries, over all shards
  std::atomic<uint64_t> hits_{0};

  // Decisions are remembered under a reader lock on clear_mu_ and clearing takes it
  // exclusively, so a denial asked before a reset cannot land after the reset emptied the cache.
  mutable absl::Mutex clear_mu_;
  // Denials asked before this (monotonic) are not remembered: a reset may have undone them.
  int64_t cleared_at_ ABSL_GUARDED_BY(clear_mu_);
  ResetEpochWatch epoch_;
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_HYBRID_OVER_LIMIT_CACHE_H_
