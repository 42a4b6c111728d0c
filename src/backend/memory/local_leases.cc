#include "backend/memory/local_leases.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::store {
namespace {

// A thread's lease of one state, and how often the thread decided that state lately.
struct Lease {
  bool filled = false;
  uint64_t hash = 0;
  uint64_t limit_id = 0;
  std::string key;
  Limit limit;
  uint64_t generation = 0;  // of the state, read before the lease was taken
  // Requests for this state by this thread in millisecond `ms` (of now_us) and the one before.
  int64_t ms = 0;
  uint32_t this_ms = 0;
  uint32_t last_ms = 0;
  // The lease: `units` left to spend in [granted_at_us, ends_us).
  uint64_t units = 0;
  int64_t granted_at_us = 0;
  int64_t ends_us = 0;
  uint64_t left = 0;  // what the state had left after the lease
  int64_t reset_until_us = 0;
  int64_t no_lease_until_us = 0;  // the state had nothing to lease: not asked again before then

  bool Holds(uint64_t state_hash, const backend::Item& item) const {
    return filled && hash == state_hash && limit_id == item.limit_id && key == item.key;
  }
  bool Live(int64_t now_us) const { return units > 0 && now_us < ends_us; }
  void Count(int64_t now_us) {
    const int64_t m = now_us / 1000;
    if (m != ms) {
      last_ms = m == ms + 1 ? this_ms : 0;
      this_ms = 0;
      ms = m;
    }
    ++this_ms;
  }
  uint32_t Recent() const { return this_ms + last_ms; }
  // Spends `cost` units at `now_us`: the decision it answers.
  Decision Spend(uint64_t cost, int64_t now_us) {
    units -= cost;
    return {.allowed = true,
            .remaining = static_cast<int64_t>(left + units),
            .retry_after_us = 0,
            .reset_after_us = std::max<int64_t>(0, reset_until_us - now_us),
            .delay_us = 0};
  }
};

// A thread's leases, all of one LocalLeases (the one it used last).
class LeaseTable {
 public:
  LocalLeases::ThreadStats stats;

  // A thread that moves to another instance drops its leases (their units are not spent).
  void Enter(uint64_t owner) {
    if (owner == owner_) return;
    for (Lease& lease : slots_) lease = Lease{};
    owner_ = owner;
  }
  Lease& SlotFor(uint64_t hash) { return slots_[hash % LocalLeases::kSlots]; }

 private:
  std::array<Lease, LocalLeases::kSlots> slots_;
  uint64_t owner_ = 0;
};

LeaseTable& ThisThreadsLeases() {
  thread_local LeaseTable table;
  return table;
}

// The most units one lease may hold. A window's unspent units go back; a bucket's are lost when
// the lease ends (they cannot go back), so a bucket's lease holds no more than the bucket refills
// in its life: what a lease loses comes back within that life. A bucket that refills less than a
// request's cost in a lease's life is not leased at all (its hot key is mostly denied: kept
// denials answer that).
uint64_t MostToLease(const Limit& limit, int64_t life_us) {
  if (limit.algorithm != Algorithm::kTokenBucket) return LocalLeases::kMaxUnits;
  const double refill = static_cast<double>(limit.requests) * static_cast<double>(life_us) /
                        static_cast<double>(std::max<int64_t>(1, limit.window_us));
  return refill >= static_cast<double>(LocalLeases::kMaxUnits) ? LocalLeases::kMaxUnits
                                                               : static_cast<uint64_t>(refill);
}

bool Leasable(const backend::Item& item) {
  const Algorithm algorithm = item.limit->algorithm;
  // Leasing is the domain's choice: `consistency: leased` (or eventual, which leases satisfy) or
  // `hot_keys: lease`; an exact item is decided by the store.
  const bool chosen =
      item.sharing.consistency != backend::Consistency::kExact || item.sharing.hot_key_rate > 0;
  return chosen && !item.shadow && !item.count_denied && !item.limit->penalty && item.cost > 0 &&
         item.cost <= LocalLeases::kMaxUnits && item.key.size() <= LocalLeases::kMaxKeyBytes &&
         ((algorithm == Algorithm::kFixedWindow && !item.limit->calendar) ||
          algorithm == Algorithm::kTokenBucket);
}

}  // namespace

LocalLeases::LocalLeases(backend::Backend* inner, MemoryStore* store, Options options)
    : inner_(inner), store_(store), options_(options), id_(NewFrontId()) {}

LocalLeases::~LocalLeases() = default;

void LocalLeases::Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                         Done done) {
  done(DecideNow(items, now_us, out));
}

backend::Outcome LocalLeases::DecideNow(std::span<const Item> items, int64_t now_us,
                                        std::span<Decision> out) {
  // (What leases cannot decide passes straight through: this stays a small function, a jump to
  // `inner`, for the requests of domains that chose no leases.)
  if (items.size() != 1 || !Leasable(items[0])) return inner_->DecideNow(items, now_us, out);
  return DecideLeasable(items[0], now_us, out);
}

backend::Outcome LocalLeases::DecideLeasable(const Item& item, int64_t now_us,
                                             std::span<Decision> out) {
  const std::span<const Item> items(&item, 1);
  LeaseTable& table = ThisThreadsLeases();
  table.Enter(id_);
  const int64_t now = std::clamp<int64_t>(now_us, 0, kMaxTimeUs);
  const uint64_t hash = StateHash(item);
  const uint64_t generation = generations_.Read(hash);
  Lease& lease = table.SlotFor(hash);
  if (!lease.Holds(hash, item)) {
    // Another state's slot: a live lease keeps it (a hot state is not pushed out by cold ones).
    if (lease.Live(now) && lease.generation == generations_.Read(lease.hash)) {
      return inner_->DecideNow(items, now_us, out);
    }
    lease = Lease{.filled = true,
                  .hash = hash,
                  .limit_id = item.limit_id,
                  .key = std::string(item.key),
                  .limit = *item.limit,
                  .generation = generation};
  } else if (lease.generation != generation || lease.limit != *item.limit) {
    // A reset ended it (the state its units were counted in is gone), or the limit changed.
    lease.units = 0;
    lease.no_lease_until_us = 0;  // (a reset gave the state its quota back)
    lease.generation = generation;
    lease.limit = *item.limit;
  }
  lease.Count(now);
  // Spent no earlier than the grant, as the store, which never decides before a time its shard
  // has used, would decide it.
  const int64_t at = std::max(now, lease.granted_at_us);
  if (lease.units >= item.cost && at < lease.ends_us) {
    ++table.stats.admitted;
    out[0] = lease.Spend(item.cost, at);
    return {.status = absl::OkStatus(), .allowed = true, .decided_at_us = at};
  }
  if (lease.Live(now) && item.limit->algorithm == Algorithm::kFixedWindow) {
    // Too few for this request: back to the state before it is asked (a bucket's cannot go back).
    GiveBack(item, lease.units, lease.granted_at_us, now);
  }
  lease.units = 0;
  const uint64_t most = MostToLease(*item.limit, options_.life_us);
  if (lease.Recent() >= kHotDecisions && now >= lease.no_lease_until_us && most >= item.cost) {
    const uint64_t want = std::clamp<uint64_t>(lease.Recent(), item.cost, most);
    const MemoryStore::LeaseGrant grant = store_->Lease(item, want, now, options_.life_us);
    // A hot key over its limit would otherwise take the lock for every request here. (A state
    // not stored yet, after a reset say, is stored by the decision below: asked again next time.)
    if (grant.exhausted) lease.no_lease_until_us = now + kNoLeaseRetryUs;
    if (grant.granted > 0) {
      ++table.stats.leases;
      lease.units = grant.granted;
      lease.granted_at_us = grant.now_us;
      lease.ends_us = grant.ends_us;
      lease.left = grant.left;
      lease.reset_until_us = grant.reset_until_us;
      if (lease.units >= item.cost) {
        ++table.stats.admitted;
        out[0] = lease.Spend(item.cost, grant.now_us);
        return {.status = absl::OkStatus(), .allowed = true, .decided_at_us = grant.now_us};
      }
    }
  }
  return inner_->DecideNow(items, now_us, out);
}

void LocalLeases::GiveBack(const Item& item, uint64_t units, int64_t granted_at_us,
                           int64_t now_us) {
  Item back = item;
  back.cost = units;
  inner_->Refund(std::span(&back, 1), granted_at_us, now_us, [](absl::Status) {});
}

void LocalLeases::Reset(std::span<const Item> items, ResetDone done) {
  std::vector<uint64_t> hashes;
  hashes.reserve(items.size());
  for (const Item& item : items) hashes.push_back(StateHash(item));
  inner_->Reset(items, [this, hashes = std::move(hashes),
                        done = std::move(done)](absl::StatusOr<size_t> reset) {
    // After the store: a lease taken before the reset holds an older generation.
    for (const uint64_t hash : hashes) {
      generations_.Move(hash);
    }
    done(std::move(reset));
  });
}

LocalLeases::ThreadStats LocalLeases::StatsOnThisThread() { return ThisThreadsLeases().stats; }

}  // namespace sluice::store
