#include "backend/hybrid/over_limit_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"

namespace sluice::backend {

namespace {
constexpr int64_t kNeverUs = std::numeric_limits<int64_t>::min() / 2;
// A full shard sweeps out its expired entries at most this often.
constexpr int64_t kDenialSweepEveryUs = 1000000;
}  // namespace

OverLimitCache::OverLimitCache(Backend* inner, const Clock* clock, Options options)
    : Wrapper(inner),
      clock_(clock),
      max_per_shard_(std::max<size_t>(1, options.max_entries / kShards)),
      cleared_at_(kNeverUs),
      epoch_(inner, [this](int64_t asked_at) {
        absl::MutexLock lock(&clear_mu_);
        ClearLocked(asked_at);
      }) {}

OverLimitCache::~OverLimitCache() = default;

OverLimitCache::Shard& OverLimitCache::ShardFor(const std::string& key) const {
  return shards_[absl::HashOf(key) % kShards];
}

void OverLimitCache::Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                            Done done) {
  const int64_t mono = clock_->MonotonicMicros();
  if (size_.load(std::memory_order_relaxed) > 0) {
    epoch_.MaybeRead(mono);
    if (AnswerFromCache(items, now_us, mono, out, done)) return;
  }
  // The items and `out` stay valid until `done` has run (the caller's promise).
  inner_->Decide(items, now_us, out,
                 [this, items, out, mono, done = std::move(done)](const Outcome& outcome) {
                   if (outcome.status.ok() && !outcome.allowed) Remember(items, out, mono);
                   done(outcome);
                 });
}

bool OverLimitCache::AnswerFromCache(std::span<const Item> items, int64_t now_us, int64_t mono,
                                     std::span<Decision> out, const Done& done) {
  if (!epoch_.Fresh(mono)) return false;
  absl::InlinedVector<CachedDenial, 4> hits(items.size(), CachedDenial{.until_us = kNeverUs});
  bool any = false;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    if (item.shadow || item.cost == 0) continue;
    const std::string key = StateKey(item);
    Shard& shard = ShardFor(key);
    absl::MutexLock lock(&shard.mu);
    const auto it = shard.entries.find(key);
    if (it == shard.entries.end()) continue;
    const Entry& entry = it->second;
    if (entry.denial.until_us <= mono || item.cost < entry.cost || entry.limit != *item.limit) {
      continue;
    }
    hits[i] = entry.denial;
    any = true;
  }
  if (!any) return false;
  // A count_denied or penalized item must reach the backend (MustReachBackend; a denial kept
  // for its state before its domain said so, too).
  for (size_t i = 0; i < items.size(); ++i) {
    if (MustReachBackend(items[i]) && items[i].cost > 0) return false;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (hits[i].until_us == kNeverUs) {
      out[i] = {.allowed = true, .remaining = 0, .retry_after_us = 0, .reset_after_us = 0};
      continue;
    }
    out[i] = DenialAt(hits[i], mono, /*remaining=*/0);
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  done({.status = absl::OkStatus(),
        .allowed = false,
        .decided_at_us = now_us,
        .answered_by = "over_limit_cache"});
  return true;
}

void OverLimitCache::Remember(std::span<const Item> items, std::span<const Decision> out,
                              int64_t asked_at) {
  // From when the request was sent: the backend decided it no earlier, so the entry ends no
  // later than the denial it copies (counting from the reply's arrival would deny for one round
  // trip too long).
  const int64_t arrived = clock_->MonotonicMicros();
  absl::ReaderMutexLock clear_lock(&clear_mu_);
  if (asked_at < cleared_at_) return;  // a reset may have come in between
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    const Decision& d = out[i];
    if (!MayCacheDenial(item, d)) continue;  // (cached_denial.h says which)
    Insert(StateKey(item),
           {.denial = CacheDenial(d, asked_at), .cost = item.cost, .limit = *item.limit}, arrived);
  }
}

void OverLimitCache::Insert(std::string key, const Entry& entry, int64_t mono) {
  Shard& shard = ShardFor(key);
  absl::MutexLock lock(&shard.mu);
  auto [it, inserted] = shard.entries.insert_or_assign(std::move(key), entry);
  if (!inserted) return;
  size_.fetch_add(1, std::memory_order_relaxed);
  if (shard.entries.size() <= max_per_shard_) return;
  if (mono - shard.last_sweep_us >= kDenialSweepEveryUs) {
    shard.last_sweep_us = mono;
    const size_t swept = absl::erase_if(
        shard.entries, [mono](const auto& kv) { return kv.second.denial.until_us <= mono; });
    size_.fetch_sub(swept, std::memory_order_relaxed);
    if (shard.entries.size() <= max_per_shard_) return;
  }
  // Still full: any other entry goes (its key just costs backend calls again).
  auto victim = shard.entries.begin();
  if (victim->first == it->first) ++victim;
  shard.entries.erase(victim);
  size_.fetch_sub(1, std::memory_order_relaxed);
}

void OverLimitCache::Reset(std::span<const Item> items, ResetDone done) {
  inner_->Reset(items, [this, done = std::move(done)](absl::StatusOr<size_t> reset) {
    Clear();
    done(std::move(reset));
  });
}

void OverLimitCache::Clear() {
  absl::MutexLock lock(&clear_mu_);
  ClearLocked(clock_->MonotonicMicros());
}

void OverLimitCache::ClearLocked(int64_t asked_before) {
  for (Shard& shard : shards_) {
    absl::MutexLock shard_lock(&shard.mu);
    size_.fetch_sub(shard.entries.size(), std::memory_order_relaxed);
    shard.entries.clear();
  }
  cleared_at_ = std::max(cleared_at_, asked_before);
}

OverLimitCache::Stats OverLimitCache::GetStats() const {
  return {.hits = hits_.load(std::memory_order_relaxed),
          .entries = size_.load(std::memory_order_relaxed),
          .epoch_changes = epoch_.changes()};
}

}  // namespace sluice::backend
