#include "backend/memory/local_over_limit_cache.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "backend/cached_denial.h"

namespace sluice::store {
namespace {

// One kept denial of one thread.
struct Entry {
  bool filled = false;
  uint64_t hash = 0;
  uint64_t generation = 0;  // of the state, read before the store decided
  uint64_t limit_id = 0;
  uint64_t cost = 0;
  int64_t decided_at_us = 0;  // the store's time of the decision
  backend::CachedDenial denial;
  Limit limit;
  std::string key;

  bool Holds(uint64_t state_hash, const backend::Item& item) const {
    return filled && hash == state_hash && limit_id == item.limit_id && key == item.key;
  }
};

// A thread's kept denials, all of one LocalOverLimitCache (the one it used last): kSets sets of
// kWays entries, a state's set chosen by its hash.
class DenialTable {
 public:
  uint64_t hits = 0;  // requests answered from it

  // Called with every time this thread passes to `owner` (clamped): returns whether `now_us` is
  // no earlier than every time before it. A thread that moves to another instance forgets what
  // it kept (the time the store decided those denials, against the times it passes from now on,
  // would say nothing).
  bool Enter(uint64_t owner, int64_t now_us) {
    if (owner != owner_) {
      for (Entry& e : entries_) e.filled = false;
      filled_ = 0;
      owner_ = owner;
      latest_us_ = now_us;
      return true;
    }
    const bool in_order = now_us >= latest_us_;
    latest_us_ = std::max(latest_us_, now_us);
    return in_order;
  }

  Entry* Find(uint64_t hash, const backend::Item& item) {
    if (filled_ == 0) return nullptr;
    const size_t base = SetOf(hash);
    for (size_t w = 0; w < kWays; ++w) {
      if (entries_[base + w].Holds(hash, item)) return &entries_[base + w];
    }
    return nullptr;
  }

  void Drop(Entry& e) {
    if (!e.filled) return;  // (two items of one state)
    e.filled = false;
    --filled_;
  }

  // The entry to fill for this state: its own, else an empty one, else the one that ends soonest.
  Entry& Place(uint64_t hash, const backend::Item& item) {
    const size_t base = SetOf(hash);
    Entry* soonest = &entries_[base];
    for (size_t w = 0; w < kWays; ++w) {
      Entry& e = entries_[base + w];
      if (e.Holds(hash, item)) return e;
      if (!e.filled) {
        ++filled_;
        e.filled = true;
        return e;
      }
      if (e.denial.until_us < soonest->denial.until_us) soonest = &e;
    }
    return *soonest;
  }

 private:
  static constexpr size_t kWays = 4;
  static constexpr size_t kSets = LocalOverLimitCache::kEntries / kWays;
  static_assert((kSets & (kSets - 1)) == 0);

  static size_t SetOf(uint64_t hash) { return (hash & (kSets - 1)) * kWays; }

  std::array<Entry, LocalOverLimitCache::kEntries> entries_;
  size_t filled_ = 0;
  uint64_t owner_ = 0;
  int64_t latest_us_ = 0;  // the latest time this thread passed to owner_
};

DenialTable& ThisThreadsDenials() {
  thread_local DenialTable table;
  return table;
}

// A denial for want of room (MemoryStore::NoRoomDecision): room may come back at any time. A
// real denial that looks the same is only not kept.
bool ForWantOfRoom(const Decision& d) {
  return d.remaining == 0 && d.retry_after_us == MemoryStore::kNoRoomRetryAfterUs &&
         d.reset_after_us == MemoryStore::kNoRoomRetryAfterUs;
}

// Whether item i's state is also another item's: then the store decided it after that item's
// cost, and its denial says more than the state's own.
bool SharesState(std::span<const backend::Item> items, size_t i) {
  for (size_t j = 0; j < items.size(); ++j) {
    if (j != i && items[j].limit_id == items[i].limit_id && items[j].key == items[i].key) {
      return true;
    }
  }
  return false;
}

}  // namespace

struct LocalOverLimitCache::Probe {
  bool keepable = false;  // its denial may be kept (the store has yet to say whether it denies)
  uint64_t generation = 0;
  Entry* kept = nullptr;  // this thread's entry for the item's state, if any
};

LocalOverLimitCache::LocalOverLimitCache(MemoryStore* store) : store_(store), id_(NewFrontId()) {}

LocalOverLimitCache::~LocalOverLimitCache() = default;

inline bool LocalOverLimitCache::ProbeItem(const Item& item, Probe& p, uint64_t& hash,
                                           int64_t& now) const {
  hash = StateHash(item);  // for the store too
  // Nothing is kept of a look or of a long key, nor will be.
  if (item.cost == 0 || item.key.size() > kMaxKeyBytes) return false;
  // Found even for an item whose denial is not kept (a shadow or count_denied one): its state's
  // entry must go if the item consumes.
  p.generation = generations_.Read(hash);
  p.kept = ThisThreadsDenials().Find(hash, item);
  p.keepable = !item.shadow && !backend::MustReachBackend(item);
  const Entry* e = p.kept;
  if (!p.keepable || e == nullptr || e->generation != p.generation || e->cost != item.cost ||
      e->limit != *item.limit) {
    return false;
  }
  now = std::max(now, e->decided_at_us);
  return true;
}

void LocalOverLimitCache::Decide(std::span<const Item> items, int64_t now_us,
                                 std::span<Decision> out, Done done) {
  done(DecideNow(items, now_us, out));
}

backend::Outcome LocalOverLimitCache::DecideNow(std::span<const Item> items, int64_t now_us,
                                                std::span<Decision> out) {
  if (items.size() == 1) return DecideSingle(items[0], now_us, out[0]);
  return DecideMany(items, now_us, out);
}

backend::Outcome LocalOverLimitCache::DecideMany(std::span<const Item> items, int64_t now_us,
                                                 std::span<Decision> out) {
  absl::InlinedVector<Probe, 4> probes(items.size());
  absl::InlinedVector<uint64_t, 4> hashes(items.size());
  const std::span<Probe> probed(probes.data(), probes.size());
  const std::span<uint64_t> hashed(hashes.data(), hashes.size());
  backend::Outcome outcome;
  if (Answer(items, now_us, probed, hashed, out, outcome)) return outcome;
  // The store hashes the keys as StateHash does: it is given the hashes made for the probes.
  outcome.allowed = store_->DecideAll(items, hashed, now_us, out, &outcome.decided_at_us);
  // What this thread kept of these states is stale now: it may have consumed from them (then a
  // kept denial would answer more leniently than the store), or it is denied anew.
  DenialTable& table = ThisThreadsDenials();
  for (const Probe& p : probes) {
    if (p.kept != nullptr) table.Drop(*p.kept);
  }
  if (!outcome.allowed) Remember(items, out, probed, hashed, outcome.decided_at_us);
  return outcome;
}

backend::Outcome LocalOverLimitCache::DecideSingle(const Item& item, int64_t now_us, Decision& d) {
  // As DecideNow and Answer, for one item.
  DenialTable& table = ThisThreadsDenials();
  int64_t now = std::clamp<int64_t>(now_us, 0, kMaxTimeUs);
  const bool in_order = table.Enter(id_, now);
  Probe p;
  uint64_t hash = 0;
  if (ProbeItem(item, p, hash, now) && in_order && now < p.kept->denial.until_us) {
    d = backend::DenialAt(p.kept->denial, now, static_cast<int64_t>(p.kept->cost - 1));
    ++table.hits;
    return {.status = absl::OkStatus(), .allowed = false, .decided_at_us = now};
  }
  backend::Outcome outcome;
  outcome.allowed = store_->DecideOneHashed(item, hash, now_us, d, &outcome.decided_at_us);
  if (p.kept != nullptr) table.Drop(*p.kept);
  if (!outcome.allowed) {
    Remember(std::span(&item, 1), std::span(&d, 1), std::span(&p, 1), std::span(&hash, 1),
             outcome.decided_at_us);
  }
  return outcome;
}

bool LocalOverLimitCache::Answer(std::span<const Item> items, int64_t now_us,
                                 std::span<Probe> probes, std::span<uint64_t> hashes,
                                 std::span<Decision> out, backend::Outcome& outcome) {
  DenialTable& table = ThisThreadsDenials();
  // One time for the whole request, as the store uses: not before any denial's decision. A time
  // before one this thread passed already is left to the store: it may have decided another key
  // of the shard at that later time, and would now use it.
  int64_t now = std::clamp<int64_t>(now_us, 0, kMaxTimeUs);
  bool all = table.Enter(id_, now) && !items.empty();
  for (size_t i = 0; i < items.size(); ++i) {
    all = ProbeItem(items[i], probes[i], hashes[i], now) && all;
  }
  if (!all) return false;
  for (const Probe& p : probes) {
    if (now >= p.kept->denial.until_us) return false;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    out[i] = backend::DenialAt(probes[i].kept->denial, now,
                               static_cast<int64_t>(probes[i].kept->cost - 1));
  }
  ++table.hits;
  outcome = {.status = absl::OkStatus(), .allowed = false, .decided_at_us = now};
  return true;
}

void LocalOverLimitCache::Remember(std::span<const Item> items, std::span<const Decision> out,
                                   std::span<const Probe> probes, std::span<const uint64_t> hashes,
                                   int64_t decided_at_us) const {
  DenialTable& table = ThisThreadsDenials();
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    const Decision& d = out[i];
    // remaining = cost - 1: what this denial's answers say until the end (see the header).
    if (!probes[i].keepable || !backend::MayCacheDenial(item, d) || d.remaining < 0 ||
        static_cast<uint64_t>(d.remaining) != item.cost - 1 || ForWantOfRoom(d) ||
        SharesState(items, i)) {
      continue;
    }
    Entry& e = table.Place(hashes[i], item);
    e.hash = hashes[i];
    e.generation = probes[i].generation;
    e.limit_id = item.limit_id;
    e.cost = item.cost;
    e.decided_at_us = decided_at_us;
    e.denial = backend::CacheDenial(d, decided_at_us);
    e.limit = *item.limit;
    e.key.assign(item.key);
  }
}

uint64_t LocalOverLimitCache::HitsOnThisThread() { return ThisThreadsDenials().hits; }

void LocalOverLimitCache::Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
                                 RefundDone done) {
  store_->Refund(items, decided_at_us, now_us);
  // The store used max(now_us, decided_at_us).
  ThisThreadsDenials().Enter(id_,
                             std::clamp<int64_t>(std::max(now_us, decided_at_us), 0, kMaxTimeUs));
  // After the store: a denial decided before the refund was kept with an older generation.
  for (const Item& item : items) {
    generations_.Move(StateHash(item));
  }
  done(absl::OkStatus());
}

void LocalOverLimitCache::Reset(std::span<const Item> items, ResetDone done) {
  size_t forgotten = 0;
  for (const Item& item : items) {
    forgotten += store_->Reset(item.limit_id, item.key) ? 1 : 0;
    generations_.Move(StateHash(item));
  }
  done(forgotten);
}

}  // namespace sluice::store
