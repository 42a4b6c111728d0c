#include "backend/hybrid/eventual.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "absl/time/time.h"

namespace sluice::backend {

namespace {

// A copy's fresh_at before anything made it fresh.
constexpr int64_t kNeverFresh = std::numeric_limits<int64_t>::min() / 2;

bool SamePendingWindow(const Limit& limit, int64_t a_us, int64_t b_us) {
  return limit.algorithm == Algorithm::kTokenBucket ||
         a_us / limit.window_us == b_us / limit.window_us;
}

// Adds units admitted at `at` to a list of pending units by window, oldest first (a bucket's: one
// entry); the list keeps the two latest windows (older ones no longer count anywhere).
template <typename List>
void AddPending(List& list, const Limit& limit, int64_t at, uint64_t units) {
  for (auto& pending : list) {
    if (SamePendingWindow(limit, pending.counted_at_us, at)) {
      pending.units += units;
      return;
    }
  }
  const auto later = std::find_if(list.begin(), list.end(),
                                  [at](const auto& pending) { return pending.counted_at_us > at; });
  list.insert(later, {.counted_at_us = at, .units = units});
  if (list.size() > 2) list.erase(list.begin());
}

// The state an exact decision at `at` (the source's time) left, rebuilt from what it says:
// a fixed window's count exactly; a bucket's debt and a sliding window's estimate rounded up (the
// estimate all in the current window), so that the copy can only deny more than the state.
algo::CompactState Rebuild(const Limit& limit, const Decision& d, int64_t at) {
  const uint64_t n = limit.requests;
  const uint64_t used =
      n - std::min<uint64_t>(n, static_cast<uint64_t>(std::max<int64_t>(0, d.remaining)));
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
      if (d.reset_after_us <= 0) return {};
      return {.idle_at_us = at + d.reset_after_us, .aux = 0};
    case Algorithm::kFixedWindow:
      if (d.reset_after_us <= 0 || used == 0) return {};
      return {.idle_at_us = at + d.reset_after_us, .aux = used};
    case Algorithm::kSlidingWindow: {
      if (used == 0) return {};
      const int64_t start = at - at % limit.window_us;
      return {.idle_at_us = start + 2 * limit.window_us,
              .aux = std::min<uint64_t>(used, 0xFFFFFFFFu)};
    }
    case Algorithm::kLeakyBucket:
    case Algorithm::kSlidingLog:
      break;
  }
  return {};
}

}  // namespace

Eventual::Eventual(Backend* inner, Backend* exact, SyncSource* source, const Clock* clock,
                   Options options)
    : Wrapper(inner),
      exact_backend_(exact),
      source_(source),
      clock_(clock),
      options_(options),
      max_age_us_(options.max_age_us > 0 ? options.max_age_us : 2 * options.sync_interval_us) {
  if (options_.ticker) {
    ticker_ =
        std::make_unique<Ticker>(absl::Microseconds(options_.sync_interval_us), [this] { Sync(); });
  }
}

Eventual::~Eventual() { StopTicker(); }

void Eventual::StopTicker() {
  if (ticker_) ticker_->Stop();
}

bool Eventual::Decidable(const Item& item) {
  if (item.sharing.consistency != Consistency::kEventual || item.cost == 0 || item.shadow ||
      item.count_denied) {
    return false;
  }
  // A calendar window (Limit::calendar) is always decided by the store, exactly; so is a
  // penalized limit (each of its denials counts towards an offence there).
  if (item.limit->penalty) return false;
  const Algorithm a = item.limit->algorithm;
  return a == Algorithm::kTokenBucket || (a == Algorithm::kFixedWindow && !item.limit->calendar) ||
         a == Algorithm::kSlidingWindow;
}

std::optional<int64_t> Eventual::SourceNow(int64_t mono) const {
  if (!offset_known_) return std::nullopt;
  return mono + offset_us_;
}

void Eventual::LearnOffset(int64_t sent_mono, int64_t source_us, int64_t arrived_mono) {
  const int64_t round_trip = arrived_mono - sent_mono;
  // A reply much slower than the best seen says little about when the source read its clock.
  if (offset_known_ && round_trip > 2 * best_round_trip_ + 1000) return;
  offset_us_ = source_us - (sent_mono + round_trip / 2);
  best_round_trip_ = offset_known_ ? std::min(best_round_trip_, round_trip) : round_trip;
  offset_known_ = true;
}

void Eventual::Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                      Done done) {
  if (items.empty() || !std::all_of(items.begin(), items.end(), Decidable)) {
    return inner_->Decide(items, now_us, out, std::move(done));
  }
  const int64_t mono = clock_->MonotonicMicros();
  bool due;
  {
    absl::MutexLock lock(&mu_);
    due = !syncing_ && mono - last_sync_ >= options_.sync_interval_us;
  }
  if (due) Sync();
  bool copied = false;
  if (auto outcome = TryLocal(items, mono, out, copied)) {
    outcome->answered_by = "copy";
    return done(*outcome);
  }
  if (!copied && ToLeases(items, mono)) {
    leased_.fetch_add(1, std::memory_order_relaxed);
    return inner_->Decide(items, now_us, out, std::move(done));
  }
  exact_.fetch_add(1, std::memory_order_relaxed);
  exact_backend_->Decide(items, now_us, out,
                         [this, items, out, mono, done = std::move(done)](const Outcome& outcome) {
                           Adopt(items, outcome, out, mono, clock_->MonotonicMicros());
                           done(outcome);
                         });
}

bool Eventual::Fences(const Item& item) const {
  return item.sharing.hot_key_rate > 0 && options_.leases != nullptr;
}

bool Eventual::ToLeases(std::span<const Item> items, int64_t mono) {
  bool cold = true;
  for (const Item& item : items) {
    if (!Fences(item)) return false;               // (not cold_keys: lease)
    cold = !hot_keys_.Record(item, mono) && cold;  // (every item is counted)
  }
  return cold && std::none_of(items.begin(), items.end(), [&](const Item& item) {
           return options_.leases->Fenced(item, mono);
         });
}

std::optional<Outcome> Eventual::TryLocal(std::span<const Item> items, int64_t mono,
                                          std::span<Decision> out, bool& copied) {
  absl::MutexLock lock(&mu_);
  const auto now = SourceNow(mono);
  absl::InlinedVector<Entry*, 4> found;
  for (const Item& item : items) {
    const auto it = entries_.find(StateKey(item));
    if (it == entries_.end()) continue;
    copied = true;
    found.push_back(&it->second);
  }
  if (!now || found.size() < items.size()) return std::nullopt;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    Entry* entry = found[i];
    if (Fences(item) != entry->fenced) {  // a reload switched cold_keys: not fresh until merged
      entry->fenced = Fences(item);
      entry->fresh_at = kNeverFresh;
      entry->used = true;
      return std::nullopt;
    }
    if (entry->limit != *item.limit || mono - entry->fresh_at > max_age_us_ ||
        std::find(found.begin(), found.begin() + static_cast<ptrdiff_t>(i), entry) !=
            found.begin() + static_cast<ptrdiff_t>(i)) {
      return std::nullopt;  // an old copy, or two items of one state: exactly
    }
  }
  absl::InlinedVector<algo::CompactState, 4> copies;
  bool allowed = true;
  for (size_t i = 0; i < items.size(); ++i) {
    copies.push_back(found[i]->state);
    out[i] = algo::DecideCompact(copies.back(), *now, *items[i].limit, items[i].cost);
    allowed = allowed && out[i].allowed;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Entry& entry = *found[i];
    entry.used = true;
    entry.used_at = mono;
    if (!allowed) continue;
    entry.state = copies[i];
    AddPending(entry.unsent, entry.limit, *now, items[i].cost);
  }
  local_.fetch_add(1, std::memory_order_relaxed);
  if (!allowed) local_denied_.fetch_add(1, std::memory_order_relaxed);
  return Outcome{.status = absl::OkStatus(), .allowed = allowed, .decided_at_us = *now};
}

void Eventual::Adopt(std::span<const Item> items, const Outcome& outcome,
                     std::span<const Decision> out, int64_t sent_mono, int64_t arrived_mono) {
  if (!outcome.status.ok() || outcome.fell_back) return;
  absl::MutexLock lock(&mu_);
  LearnOffset(sent_mono, outcome.decided_at_us, arrived_mono);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    std::string key = StateKey(item);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      if (entries_.size() >= options_.max_entries) continue;
      it = entries_.try_emplace(std::move(key)).first;
      it->second.fresh_at = kNeverFresh;
    }
    Entry& entry = it->second;
    if (entry.limit != *item.limit) {
      entry.unsent.clear();  // the limit changed (a reload): another state
      entry.sending.clear();
      entry.fresh_at = kNeverFresh;
    }
    entry.limit = *item.limit;
    entry.state = Rebuild(*item.limit, out[i], outcome.decided_at_us);
    // What this instance admitted and the source has not merged yet is not in that state.
    for (const auto* list : {&entry.sending, &entry.unsent}) {
      for (const Pending& p : *list) {
        algo::ChargeCompact(entry.state, p.counted_at_us,
                            std::max(p.counted_at_us, outcome.decided_at_us), entry.limit, p.units);
      }
    }
    entry.used_at = arrived_mono;
    // A copy whose merges fence leases is fresh only from a merge that fenced: a lease taken
    // between this decision and that merge would be hidden from it. So this state, whether the
    // copy is new or an exact reply came after a merge's (the replies of several connections
    // can overtake each other), is not decided on until the next merge, which reads it.
    entry.fenced = Fences(item);
    if (entry.fenced) {
      entry.fresh_at = kNeverFresh;
      entry.used = true;
    } else {
      entry.fresh_at = sent_mono;
    }
  }
}

void Eventual::Sync(std::function<void()> done) {
  // The deltas sent, and the states they belong to (kept until every call is answered).
  struct Batch {
    std::vector<std::string> keys;  // by delta
    std::vector<Limit> limits;      // by delta
    std::vector<SyncSource::Delta> deltas;
    int64_t sent_mono = 0;
    std::atomic<int64_t> waiting{0};
    std::function<void()> done;
  };
  auto batch = std::make_shared<Batch>();
  batch->done = std::move(done);
  const int64_t mono = clock_->MonotonicMicros();
  batch->sent_mono = mono;
  {
    absl::MutexLock lock(&mu_);
    if (syncing_) {
      if (batch->done) batch->done();
      return;
    }
    last_sync_ = mono;
    const int64_t now = SourceNow(mono).value_or(0);
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& entry = it->second;
      if (!entry.used && entry.unsent.empty()) {
        // Not decided on since the last sync: nothing to send, and dropped once too old to
        // decide on.
        if (entry.sending.empty() && mono - entry.used_at > max_age_us_) {
          entries_.erase(it++);
          continue;
        }
        ++it;
        continue;
      }
      entry.used = false;
      entry.sending = std::move(entry.unsent);
      entry.unsent.clear();
      if (entry.sending.empty()) entry.sending.push_back({.counted_at_us = now, .units = 0});
      // A fence outlives the copy read at this merge: it is decided on for max_age_us from the
      // sync's send, which is before the merge; one sync interval more is the margin.
      const int64_t fence = entry.fenced ? max_age_us_ + options_.sync_interval_us : 0;
      for (const Pending& p : entry.sending) {
        batch->keys.push_back(it->first);
        batch->limits.push_back(entry.limit);
        batch->deltas.push_back(
            {.item = {}, .units = p.units, .counted_at_us = p.counted_at_us, .fence_us = fence});
      }
      ++it;
    }
    if (batch->deltas.empty()) {
      if (batch->done) batch->done();
      return;
    }
    syncing_ = true;
  }
  for (size_t i = 0; i < batch->deltas.size(); ++i) {  // (the vectors no longer grow)
    const std::string& key = batch->keys[i];
    uint64_t limit_id;
    std::memcpy(&limit_id, key.data(), sizeof limit_id);
    batch->deltas[i].item = {.limit = &batch->limits[i],
                             .limit_id = limit_id,
                             .key = std::string_view(key).substr(sizeof limit_id),
                             .sharing = {.consistency = Consistency::kEventual}};
  }
  const auto finish = [this, batch] {
    {
      absl::MutexLock lock(&mu_);
      syncing_ = false;
    }
    if (batch->done) batch->done();
  };
  const size_t calls = source_->Sync(batch->deltas, [this, batch, finish](SyncSource::Merged m) {
    Merge(m, batch->keys, batch->limits, batch->deltas, batch->sent_mono);
    if (batch->waiting.fetch_sub(1) == 1) finish();
  });
  const auto n = static_cast<int64_t>(calls);
  if (batch->waiting.fetch_add(n) + n == 0) finish();
}

void Eventual::Merge(const SyncSource::Merged& merged, std::span<const std::string> keys,
                     std::span<const Limit> limits, std::span<const SyncSource::Delta> deltas,
                     int64_t sent_mono) {
  const int64_t arrived = clock_->MonotonicMicros();
  absl::MutexLock lock(&mu_);
  absl::InlinedVector<Entry*, 16> touched;
  if (!merged.status.ok() || merged.states.size() != merged.deltas.size()) {
    sync_errors_.fetch_add(1, std::memory_order_relaxed);
    // Their units go again with the next sync.
    for (const size_t d : merged.deltas) {
      const auto it = entries_.find(keys[d]);
      if (it == entries_.end() || it->second.limit != limits[d]) continue;
      Entry& entry = it->second;
      if (deltas[d].units > 0) {
        AddPending(entry.unsent, entry.limit, deltas[d].counted_at_us, deltas[d].units);
      }
      entry.sending.clear();
      entry.used = true;
    }
    return;
  }
  LearnOffset(sent_mono, merged.now_us, arrived);
  const int64_t round_trip = arrived - sent_mono;
  int64_t longest = max_round_trip_us_.load(std::memory_order_relaxed);
  while (round_trip > longest && !max_round_trip_us_.compare_exchange_weak(longest, round_trip)) {
  }
  syncs_.fetch_add(1, std::memory_order_relaxed);
  states_synced_.fetch_add(merged.deltas.size(), std::memory_order_relaxed);
  for (size_t j = 0; j < merged.deltas.size(); ++j) {
    const size_t d = merged.deltas[j];
    units_merged_.fetch_add(deltas[d].units, std::memory_order_relaxed);
    const auto it = entries_.find(keys[d]);
    if (it == entries_.end() || it->second.limit != limits[d]) continue;  // reset, or reloaded
    Entry& entry = it->second;
    entry.state = merged.states[j];  // (a later delta of the state, in the same call, wins)
    // A copy whose merges fence is fresh only from a merge that did (one sent before a reload
    // turned fences on did not).
    if (!entry.fenced || deltas[d].fence_us > 0) entry.fresh_at = sent_mono;
    if (std::find(touched.begin(), touched.end(), &entry) == touched.end()) {
      touched.push_back(&entry);
    }
  }
  // What was admitted here while the call was out is not in the merged states.
  for (Entry* entry : touched) {
    entry->sending.clear();
    for (const Pending& p : entry->unsent) {
      algo::ChargeCompact(entry->state, p.counted_at_us, std::max(p.counted_at_us, merged.now_us),
                          entry->limit, p.units);
    }
  }
}

void Eventual::Reset(std::span<const Item> items, ResetDone done) {
  ResetThenForget(items, std::move(done), [this](std::span<const std::string> keys) {
    absl::MutexLock lock(&mu_);
    for (const std::string& key : keys) entries_.erase(key);
  });
}

Eventual::Stats Eventual::GetStats() const {
  return {.local = local_.load(std::memory_order_relaxed),
          .local_denied = local_denied_.load(std::memory_order_relaxed),
          .exact = exact_.load(std::memory_order_relaxed),
          .syncs = syncs_.load(std::memory_order_relaxed),
          .states_synced = states_synced_.load(std::memory_order_relaxed),
          .units_merged = units_merged_.load(std::memory_order_relaxed),
          .sync_errors = sync_errors_.load(std::memory_order_relaxed),
          .leased = leased_.load(std::memory_order_relaxed),
          .max_round_trip_us = max_round_trip_us_.load(std::memory_order_relaxed)};
}

}  // namespace sluice::backend
