// OverLimitCache: a backend that remembers the denials of the one behind it (Redis), so that a
// key over its limit costs that backend nothing until it could be admitted again.
//
// When the backend denies an item with retry_after r, nothing can admit the same request on that
// state before r has passed: not this instance's traffic, nor any other instance's (more traffic
// only pushes the state further from admitting). So until r a request that has that
// item, with at least that cost, is denied here, with no call. (r is counted from when the request
// was sent: the backend decided no earlier.) This is envoyproxy/ratelimit's
// local over-limit cache, made exact: its entries live as long as the denial they copy, not for
// a fixed TTL.
//
// What could admit the request sooner, and how each is handled:
//   - a Reset (admin "unblock this customer") through this or any other instance: the cache
//     answers only while its ResetEpochWatch is fresh, and drops everything it holds (and the
//     denials on their way) when the epoch moved: a reset anywhere is seen here within
//     ResetEpochWatch::kFreshUs plus a round trip;
//   - a config change: an entry remembers the limit it was decided on, and a changed limit (its
//     id or its numbers) misses;
//   - a refund by another instance (its upstream failed): not seen. The entry stays until r, so
//     the cache can deny what the backend would have admitted (under-admission, never over).
// A request is answered here only when that answer is the backend's: some non-shadow item of at
// least the cached cost is cached, and no other item counts denied requests (a count_denied item
// must reach the backend to be counted). Its cached items report the denial (remaining 0, the
// retry_after left); its other items report allowed with remaining 0, as their state was not
// read. Shadow items are never cached (their denial does not decide the request).
//
// Bounded: at most Options::max_entries entries (expired ones are swept when full, then any
// entry makes room); a flood of denied keys costs calls to the backend, never a wrong answer.
// Safe for concurrent use if the backend behind it is. `inner` and `clock` are not owned.

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
#include "backend/held_denial.h"
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
    HeldDenial denial;  // monotonic
    uint64_t cost = 0;  // the denied cost; a smaller one may be admitted sooner
    Limit limit;        // what it was decided on
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
