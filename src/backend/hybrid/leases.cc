#include "backend/hybrid/leases.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace sluice::backend {

namespace {

constexpr int64_t kLeaseSweepEveryUs = 100000;
// Requests waiting for one state's lease call, at most; more are decided exactly.
constexpr size_t kMaxWaiters = 1024;

// Whether two times (µs, the source's clock) are in the same window of a window limit.
bool SameWindow(const Limit& limit, int64_t a_us, int64_t b_us) {
  return a_us / limit.window_us == b_us / limit.window_us;
}

// An entry's state identity back from its key (StateKey's layout).
struct Unspent {
  Limit limit;
  std::string entry_key;
  Item item;
};

std::shared_ptr<Unspent> MakeUnspent(const std::string& entry_key, const Limit& limit,
                                     uint64_t units) {
  auto u = std::make_shared<Unspent>();
  u->limit = limit;
  u->entry_key = entry_key;
  uint64_t limit_id;
  std::memcpy(&limit_id, u->entry_key.data(), sizeof limit_id);
  u->item = {.limit = &u->limit,
             .limit_id = limit_id,
             .key = std::string_view(u->entry_key).substr(sizeof limit_id),
             .cost = units};
  return u;
}

}  // namespace

// One request waiting for the leases of its items.
struct Leases::Call {
  std::span<const Item> items;
  int64_t now_us;
  std::span<Decision> out;
  Done done;
  std::atomic<size_t> waiting{0};
};

Leases::Leases(Backend* inner, LeaseSource* source, const Clock* clock, Options options)
    : Wrapper(inner),
      source_(source),
      clock_(clock),
      options_(options),
      epoch_(inner, [this](int64_t) { DropAll(); }),
      hot_keys_(options.hot_key_slots) {}

Leases::~Leases() = default;

bool Leases::Leasable(const Item& item) {
  if (item.cost == 0 || item.shadow || item.count_denied) return false;
  // A calendar window (Limit::calendar) is always decided by the store, exactly; so is a
  // penalized limit (each of its denials counts towards an offence there).
  if (item.limit->penalty) return false;
  const Algorithm a = item.limit->algorithm;
  return a == Algorithm::kTokenBucket || (a == Algorithm::kFixedWindow && !item.limit->calendar) ||
         a == Algorithm::kSlidingWindow;
}

bool Leases::LeasedNow(std::span<const Item> items, std::optional<int64_t>& mono) {
  bool all = true;
  for (const Item& item : items) {
    if (item.sharing.consistency == Consistency::kExact && item.sharing.hot_key_rate > 0 &&
        Leasable(item)) {
      if (!mono) mono = clock_->MonotonicMicros();
      all = hot_keys_.Record(item, *mono) && all;  // (every such item is counted)
    } else {
      // (An eventual item of a cold_keys: lease domain comes here from Eventual when its state
      // is cold on this instance.)
      const bool leased =
          item.sharing.consistency == Consistency::kLeased ||
          (item.sharing.consistency == Consistency::kEventual && item.sharing.hot_key_rate > 0);
      all = all && leased && Leasable(item);
    }
  }
  if (all && !mono) mono = clock_->MonotonicMicros();
  return all;
}

std::vector<HotKeys::Hot> Leases::TopHotKeys(size_t k) const {
  return hot_keys_.Top(k, clock_->MonotonicMicros());
}

void Leases::Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                    Done done) {
  std::optional<int64_t> read;
  if (items.empty() || !LeasedNow(items, read)) {
    // (A demoted hot key's lease still ends, and gives back what it has left, on time.)
    if (read) Sweep(*read);
    return inner_->Decide(items, now_us, out, std::move(done));
  }
  const int64_t mono = *read;
  epoch_.MaybeRead(mono);
  Sweep(mono);
  // Leases are used while the reset epoch is fresh (a reset elsewhere is seen within
  // ResetEpochWatch::kFreshUs), or while it cannot be read (the backend is down: no reset can go
  // through it, and what is held is spent until it ends). Stale after a quiet spell: this request
  // goes to the backend while the reading it asked for comes.
  if (!epoch_.Fresh(mono) && !epoch_.Failing()) {
    return inner_->Decide(items, now_us, out, std::move(done));
  }
  if (const auto at = TrySpend(items, mono, out)) {
    local_.fetch_add(1, std::memory_order_relaxed);
    return done({.status = absl::OkStatus(),
                 .allowed = true,
                 .decided_at_us = *at,
                 .answered_by = "lease"});
  }
  // Leases for the items without enough units and none on its way. A request of one item whose
  // state has a lease call in flight waits for it (a hot key would otherwise send every request
  // that arrives meanwhile to the backend); one of several items is decided exactly.
  absl::InlinedVector<std::pair<size_t, uint64_t>, 4> take;  // item, units wanted
  bool exact = false;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < items.size() && !exact; ++i) {
      const auto it = entries_.find(StateKey(items[i]));
      Entry* entry = it == entries_.end() ? nullptr : &it->second;
      if (entry != nullptr && entry->limit == *items[i].limit && entry->ends > mono &&
          entry->units >= items[i].cost) {
        continue;
      }
      if (entry != nullptr && entry->taking && items.size() == 1 &&
          entry->waiters.size() < kMaxWaiters) {
        entry->waiters.push_back(MakeCall(items, now_us, out, std::move(done), 1));
        return;
      }
      // A state whose last lease came back empty is decided exactly for a while (Granted: its
      // denials then come from the over-limit cache, with no call).
      exact = (entry != nullptr && (entry->taking || entry->dry_until > mono)) ||
              (entry == nullptr && entries_.size() >= options_.max_entries);
      take.emplace_back(i, NextWant(entry, items[i], LifeOf(*items[i].limit), mono));
    }
    if (!exact) {
      for (const auto& [i, want] : take) entries_[StateKey(items[i])].taking = true;
    }
  }
  if (exact) return inner_->Decide(items, now_us, out, std::move(done));
  if (take.empty()) {  // another request's lease came in between: its units may cover this one
    if (const auto at = TrySpend(items, mono, out)) {
      local_.fetch_add(1, std::memory_order_relaxed);
      return done({.status = absl::OkStatus(),
                   .allowed = true,
                   .decided_at_us = *at,
                   .answered_by = "lease"});
    }
    return inner_->Decide(items, now_us, out, std::move(done));
  }
  auto call = MakeCall(items, now_us, out, std::move(done), take.size());
  for (const auto& [i, want] : take) {
    const Item& item = items[i];
    leases_.fetch_add(1, std::memory_order_relaxed);
    const int64_t life = LifeOf(*item.limit);
    source_->Lease(item, want, life, [this, call, &item](absl::StatusOr<LeaseSource::Grant> grant) {
      Granted(item, grant);
      if (call->waiting.fetch_sub(1) == 1) Finish(*call);  // every lease it waited for is in
    });
  }
}

void Leases::Granted(const Item& item, const absl::StatusOr<LeaseSource::Grant>& grant) {
  const int64_t arrived = clock_->MonotonicMicros();
  std::vector<std::shared_ptr<Call>> waiters;
  {
    absl::MutexLock lock(&mu_);
    const std::string key = StateKey(item);
    Entry& entry = entries_[key];
    entry.taking = false;
    waiters.swap(entry.waiters);
    if (grant.ok() && grant->granted > 0) {
      // The old lease's unspent units join the new one when both count in the same
      // window (and end with it); otherwise they go back (or are lost: a bucket's).
      const bool same_window = entry.units > 0 && entry.limit == *item.limit &&
                               entry.limit.algorithm != Algorithm::kTokenBucket &&
                               entry.ends > arrived &&
                               SameWindow(entry.limit, entry.granted_at_us, grant->now_us);
      const uint64_t kept = same_window ? entry.units : 0;
      if (entry.units > 0 && !same_window) GiveBack(key, entry);
      units_granted_.fetch_add(grant->granted, std::memory_order_relaxed);
      entry.limit = *item.limit;
      entry.units = grant->granted + kept;
      entry.granted = grant->granted + kept;
      entry.left = grant->left;
      entry.granted_at_us = grant->now_us;
      entry.started = arrived;
      // The lease's life as Redis counts it, from when the grant arrived here: it ends here
      // no later than there.
      entry.ends = arrived + std::max<int64_t>(0, grant->ends_us - grant->now_us);
    } else if (grant.ok() && grant->fenced) {
      // An eventual copy of the state is in use: exactly for a lease interval, in which
      // Eventual (asking Fenced) gives this instance a copy too.
      fenced_.fetch_add(1, std::memory_order_relaxed);
      entry.fenced_until = arrived + options_.life_us;
      entry.dry_until = entry.fenced_until;
    } else if (grant.ok()) {
      empty_.fetch_add(1, std::memory_order_relaxed);
      // (The limit, for how long the entry is remembered: it keeps its dry spell's start.)
      if (entry.units == 0) entry.limit = *item.limit;
      entry.left = grant->left;
      const int64_t dry_for = DryFor(entry, *item.limit, grant->now_us);
      entry.dry_until = arrived + std::clamp<int64_t>(grant->ends_us - grant->now_us, 0, dry_for);
    }
    if (grant.ok() && (grant->granted > 0 || grant->fenced)) entry.dry_since_us = 0;
    // (A table past half full forgets ended leases at the next sweep: it may be sooner.)
    const bool crowded = entries_.size() >= options_.max_entries / 2;
    SweepBy(crowded ? arrived : DueAt(entry, crowded));
  }
  for (const auto& waiter : waiters) Finish(*waiter);
}

std::shared_ptr<Leases::Call> Leases::MakeCall(std::span<const Item> items, int64_t now_us,
                                               std::span<Decision> out, Done done, size_t waiting) {
  auto call = std::make_shared<Call>();
  call->items = items;
  call->now_us = now_us;
  call->out = out;
  call->done = std::move(done);
  call->waiting.store(waiting);
  return call;
}

void Leases::Finish(Call& call) {
  if (const auto at = TrySpend(call.items, clock_->MonotonicMicros(), call.out)) {
    local_.fetch_add(1, std::memory_order_relaxed);
    return call.done({.status = absl::OkStatus(),
                      .allowed = true,
                      .decided_at_us = *at,
                      .answered_by = "lease_taken"});
  }
  inner_->Decide(call.items, call.now_us, call.out, std::move(call.done));
}

std::optional<int64_t> Leases::TrySpend(std::span<const Item> items, int64_t mono,
                                        std::span<Decision> out) {
  absl::MutexLock lock(&mu_);
  absl::InlinedVector<Entry*, 4> found(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto it = entries_.find(StateKey(items[i]));
    if (it == entries_.end()) return std::nullopt;
    Entry& entry = it->second;
    if (entry.limit != *items[i].limit || entry.ends <= mono) return std::nullopt;
    // (Two items of one state: the sum must fit.)
    uint64_t need = 0;
    for (size_t j = 0; j <= i; ++j) {
      if (j == i || found[j] == &entry) need += items[j].cost;
    }
    if (entry.units < need) return std::nullopt;
    found[i] = &entry;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Entry& entry = *found[i];
    entry.units -= items[i].cost;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const Entry& entry = *found[i];
    out[i] = {.allowed = true,
              .remaining = static_cast<int64_t>(entry.units),
              .retry_after_us = 0,
              .reset_after_us = entry.ends - mono,
              .delay_us = 0};
  }
  // The decision's time in the source's clock (for a refund, and for windows): the grant's time
  // plus what has passed here since its reply came, no later than the true one and inside the
  // lease.
  const Entry& first = *found[0];
  return first.granted_at_us + (mono - first.started);
}

int64_t Leases::DryFor(Entry& entry, const Limit& limit, int64_t source_now) const {
  // Exactly for a lease's life, and never past the window (Granted: a new window has quota
  // again, and deciding it exactly would send every request of a hot key to Redis). A bucket and
  // a sliding window free units as time passes: one lease interval. A fixed window gets nothing
  // back before it ends but what is given back or refunded, while the over-limit cache keeps
  // Redis's denial of it to the window's end: it is asked again after ten lease intervals (units
  // another instance gives back, at SIGTERM say, are found within that), then after as long as it
  // has been dry, up to an eighth of its window (Granted also keeps it within a window lease's
  // life and the window). A key over its limit early in a minute's window so asks about ten times
  // in the minute, not sixty.
  if (limit.algorithm != Algorithm::kFixedWindow) return options_.life_us;
  const int64_t first = std::min(options_.window_life_us, 10 * options_.life_us);
  if (entry.dry_since_us == 0 || !SameWindow(limit, entry.dry_since_us, source_now)) {
    entry.dry_since_us = source_now;
    return first;
  }
  return std::clamp(source_now - entry.dry_since_us, first, std::max(first, limit.window_us / 8));
}

int64_t Leases::LifeOf(const Limit& limit) const {
  // A bucket's lease lives the target interval: its life is recorded as consumed
  // (docs/algorithms.md). A window's units count in their window whenever they are spent, so its
  // lease may live longer (the script ends it with the window): what is left unspent then waits
  // longer to go back.
  return limit.algorithm == Algorithm::kTokenBucket ? options_.life_us : options_.window_life_us;
}

uint64_t Leases::NextWant(const Entry* entry, const Item& item, int64_t life_us, int64_t mono) {
  const uint64_t cost = item.cost;
  const uint64_t instances = std::max<uint32_t>(1, item.sharing.instances);
  uint64_t demand = 4 * cost;  // a first lease, until the rate is known
  uint64_t share = std::max<uint64_t>(1, item.limit->Capacity() / (2 * instances));
  const bool held = entry != nullptr && entry->granted > 0;
  if (held || (entry != nullptr && entry->rate > 0)) {
    // Twice the rate the last lease was spent at (held, or remembered from one that ended), over
    // a lease's life. What the state had left after that lease bounds it while that holds: the
    // lease is held, or in the same window (the source's time estimated as TrySpend does), or a
    // bucket (it refilled a little since: asking less is safe).
    const double rate = held ? SpendRate(*entry, mono) : entry->rate;
    demand = static_cast<uint64_t>(2.0 * rate * static_cast<double>(life_us)) + 1;
    const int64_t source_now = entry->granted_at_us + (mono - entry->started);
    if (held || entry->limit.algorithm == Algorithm::kTokenBucket ||
        SameWindow(entry->limit, entry->granted_at_us, source_now)) {
      share = std::max<uint64_t>(1, entry->left / (2 * instances));
    }
  }
  return std::max(cost, std::min(demand, share));
}

double Leases::SpendRate(const Entry& entry, int64_t mono) {
  const uint64_t spent = entry.granted - std::min(entry.granted, entry.units);
  const int64_t elapsed = std::max<int64_t>(1, std::min(mono, entry.ends) - entry.started);
  return static_cast<double>(spent) / static_cast<double>(elapsed);
}

void Leases::GiveBack(const std::string& entry_key, const Entry& entry) {
  const Algorithm a = entry.limit.algorithm;
  if (a == Algorithm::kTokenBucket) {  // not safely given back: drains with the refill
    units_lost_.fetch_add(entry.units, std::memory_order_relaxed);
    return;
  }
  if (!SameWindow(entry.limit, entry.granted_at_us, clock_->NowMicros())) return;  // it rolled
  units_returned_.fetch_add(entry.units, std::memory_order_relaxed);
  returns_.fetch_add(1, std::memory_order_relaxed);
  auto unspent = MakeUnspent(entry_key, entry.limit, entry.units);
  inner_->Refund({&unspent->item, 1}, entry.granted_at_us, clock_->NowMicros(),
                 [unspent](absl::Status) {});
}

int64_t Leases::DueAt(const Entry& entry, bool crowded) const {
  if (entry.taking) return std::numeric_limits<int64_t>::max();  // (Granted says when)
  if (entry.granted > 0) return entry.ends;  // its units go back when it ends, dry or not
  const int64_t over = std::max(entry.ends, entry.dry_until);
  return crowded ? over : over + RememberedFor(entry.limit);
}

int64_t Leases::RememberedFor(const Limit& limit) const {
  return std::min(LifeOf(limit), limit.window_us);
}

void Leases::SweepBy(int64_t due) {
  due = std::max(due, last_sweep_ + kLeaseSweepEveryUs);
  int64_t next = next_sweep_.load(std::memory_order_relaxed);
  while (due < next && !next_sweep_.compare_exchange_weak(next, due, std::memory_order_relaxed)) {
  }
}

void Leases::Sweep(int64_t mono) {
  if (mono < next_sweep_.load(std::memory_order_relaxed)) return;  // (most calls: no lock)
  absl::MutexLock lock(&mu_);
  if (mono - last_sweep_ < kLeaseSweepEveryUs) return;
  last_sweep_ = mono;
  sweeps_.fetch_add(1, std::memory_order_relaxed);
  // Past half the table, an ended lease is not remembered: new states need the room.
  const bool crowded = entries_.size() >= options_.max_entries / 2;
  int64_t next_due = std::numeric_limits<int64_t>::max();
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& entry = it->second;
    if (entry.taking || entry.ends > mono) {
      next_due = std::min(next_due, DueAt(entry, crowded));
      ++it;
      continue;
    }
    // An ended lease gives its units back even in a dry spell (a lease asked for a request
    // costing more than it held came back empty, say).
    if (entry.granted > 0) {
      entry.rate = SpendRate(entry, mono);
      if (entry.units > 0) GiveBack(it->first, entry);
      entry.units = 0;
      entry.granted = 0;
    }
    // Kept through its dry spell; then remembered for a lease life, and no longer than a window
    // of it, after its lease or its spell ends (DryFor: how long it has been dry).
    if (entry.dry_until <= mono &&
        (crowded || mono - std::max(entry.ends, entry.dry_until) >= RememberedFor(entry.limit))) {
      entries_.erase(it++);
    } else {
      next_due = std::min(next_due, DueAt(entry, crowded));
      ++it;
    }
  }
  // The next sweep when something is due (a lease, a dry spell or a remembered rate ending), not
  // before kLeaseSweepEveryUs: with window-long leases most sweeps would find nothing to do, and
  // each holds the lock over the whole table. Granted and Reset bring it forward (SweepBy).
  next_sweep_.store(std::max(mono + kLeaseSweepEveryUs, next_due), std::memory_order_relaxed);
}

void Leases::DropAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, entry] : entries_) {
    units_lost_.fetch_add(entry.units, std::memory_order_relaxed);
    entry.units = 0;
  }
  // Entries with a lease call in flight stay (the call's callback needs them); their units are 0,
  // and their quota may be back: not dry (an empty answer to a call sent before the reset starts
  // a new dry spell, of ten intervals).
  absl::erase_if(entries_, [](const auto& kv) { return !kv.second.taking; });
  for (auto& [key, entry] : entries_) {
    entry.dry_until = 0;
    entry.dry_since_us = 0;
  }
}

void Leases::Reset(std::span<const Item> items, ResetDone done) {
  ResetThenForget(items, std::move(done), [this](std::span<const std::string> keys) {
    absl::MutexLock lock(&mu_);
    for (const std::string& key : keys) {
      const auto it = entries_.find(key);
      if (it == entries_.end()) continue;
      Entry& entry = it->second;
      units_lost_.fetch_add(entry.units, std::memory_order_relaxed);
      // Its quota is back: not dry, and no rate taken from units the reset dropped.
      entry.units = 0;
      entry.granted = 0;
      entry.dry_until = 0;
      entry.dry_since_us = 0;
      SweepBy(DueAt(entry, /*crowded=*/false));
    }
  });
}

void Leases::ReturnAll(std::function<void()> done) {
  struct Pending {
    std::vector<std::shared_ptr<Unspent>> unspent;
    std::vector<int64_t> at;
    std::atomic<size_t> waiting{0};
    std::function<void()> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->done = std::move(done);
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, entry] : entries_) {
      if (entry.units == 0) continue;
      if (entry.limit.algorithm == Algorithm::kTokenBucket) {
        units_lost_.fetch_add(entry.units, std::memory_order_relaxed);
      } else {
        units_returned_.fetch_add(entry.units, std::memory_order_relaxed);
        returns_.fetch_add(1, std::memory_order_relaxed);
        pending->unspent.push_back(MakeUnspent(key, entry.limit, entry.units));
        pending->at.push_back(entry.granted_at_us);
      }
      entry.units = 0;
    }
  }
  if (pending->unspent.empty()) return pending->done();
  pending->waiting.store(pending->unspent.size());
  for (size_t i = 0; i < pending->unspent.size(); ++i) {
    inner_->Refund({&pending->unspent[i]->item, 1}, pending->at[i], clock_->NowMicros(),
                   [pending](absl::Status) {
                     if (pending->waiting.fetch_sub(1) == 1) pending->done();
                   });
  }
}

bool Leases::Fenced(const Item& item, int64_t mono) const {
  absl::MutexLock lock(&mu_);
  const auto it = entries_.find(StateKey(item));
  return it != entries_.end() && it->second.fenced_until > mono;
}

Leases::Stats Leases::GetStats() const {
  return {.local = local_.load(std::memory_order_relaxed),
          .leases = leases_.load(std::memory_order_relaxed),
          .units_granted = units_granted_.load(std::memory_order_relaxed),
          .units_returned = units_returned_.load(std::memory_order_relaxed),
          .units_lost = units_lost_.load(std::memory_order_relaxed),
          .returns = returns_.load(std::memory_order_relaxed),
          .sweeps = sweeps_.load(std::memory_order_relaxed),
          .fenced = fenced_.load(std::memory_order_relaxed),
          .empty = empty_.load(std::memory_order_relaxed)};
}

}  // namespace sluice::backend
