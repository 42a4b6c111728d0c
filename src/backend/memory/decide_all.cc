// MemoryStore::DecideAll: a request of one or more items decided together on the states of
// every item, under the locks of their shards (taken in address order), all or nothing.

#include <algorithm>
#include <memory>

#include "absl/base/attributes.h"
#include "absl/container/inlined_vector.h"
#include "backend/memory/memory_store.h"
#include "backend/memory/memory_store_shard.h"

namespace sluice::store {
namespace {

// Takes back the last CommitSlidingLog of `cost` (DecideAll's undo). What a later count_denied
// item of the request recorded in the same entry stays, and keeps the log from going idle.
void UndoLogCommit(algo::LogState& log, uint64_t cost, int64_t saved_idle_at_us,
                   int64_t window_us) {
  log.entries.back().cost -= cost;
  if (log.entries.back().cost == 0) log.entries.pop_back();
  log.sum -= cost;
  log.idle_at_us =
      log.head < log.entries.size() ? log.entries.back().at_us + window_us : saved_idle_at_us;
}

// count_denied: such an item's cost is recorded even when it is denied (every algorithm).
bool CountsDenied(const backend::Item& item) { return item.count_denied; }

// Decides `item` on a compact state (DecideAll's decision of one item, before any undo).
Decision DecideCompactItem(const backend::Item& item, algo::CompactState& state, int64_t now) {
  if (CountsDenied(item)) {
    return algo::DecideCompactCountingDenied(state, now, *item.limit, item.cost);
  }
  return algo::DecideCompact(state, now, *item.limit, item.cost);
}

// What a denied request's item reports once what it consumed is given back: the state's
// remaining and reset, looked at without consuming.
void ReportUnconsumed(const Decision& peek, Decision& d) {
  d.remaining = peek.remaining;
  d.reset_after_us = peek.reset_after_us;
  d.delay_us = 0;
}

// DecideAll's DecideOne and UndoOne for a request of one item on a compact state with room (a
// stored one, or a new key's own): returns whether the item lets the request through;
// `consumed`, whether the state keeps what it took.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool DecideCompactAlone(const backend::Item& item,
                                                            algo::CompactState& state, int64_t now,
                                                            Decision& d, bool& consumed) {
  const algo::CompactState saved = state;
  d = DecideCompactItem(item, state, now);
  const bool allowed = d.allowed || item.shadow;
  consumed = !(state == saved);
  if (!allowed && consumed && !CountsDenied(item)) {
    state = saved;
    consumed = false;
    algo::CompactState copy = state;
    ReportUnconsumed(algo::DecideCompact(copy, now, *item.limit, 0), d);
  }
  return allowed;
}

}  // namespace

// A state being decided by DecideAll: an existing slot or log, a new key's own state (stored at
// the end if it consumed and was placed kTracked), or its limit's overflow state.
struct MemoryStore::Work {
  uint64_t hash = 0;
  Shard* shard = nullptr;
  bool is_log = false;
  size_t owner = 0;     // the first item with this state; later ones decide it in turn
  bool is_new = false;  // owners: no stored state
  Placement placement = Placement::kTracked;  // owners of new keys
  algo::CompactState* state = nullptr;  // compact: the slot's, `fresh_state` or an overflow one
  algo::LogState* log = nullptr;        // sliding_log: the stored log, `fresh_log`, overflow
  algo::CompactState fresh_state;
  std::unique_ptr<algo::LogState> fresh_log;
  algo::CompactState saved;  // for undo
  int64_t saved_idle_at = 0;
  bool consumed = false;
  bool no_room = false;  // denied for lack of room
  bool keep = false;     // owners: some item with this state consumed (KeepNewStates)
};

// The analysis is off in DecideAll and its steps: they work under a set of shard locks known
// only at run time (taken in address order, below), which it cannot follow. The helpers they
// call under those locks say which lock they need (ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu)) and
// are checked.
template <typename HashOf>
bool MemoryStore::DecideMany(std::span<const Item> items, const HashOf& hash_of, int64_t now_us,
                             std::span<Decision> out,
                             int64_t* decided_at_us) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (const Item& item : items) {
    if (item.limit->penalty) [[unlikely]] {
      return DecidePenalized(items, now_us, out, decided_at_us);
    }
  }
  absl::InlinedVector<Work, 8> work(items.size());
  absl::InlinedVector<Shard*, 8> locked;
  Plan(items, hash_of, std::span(work.data(), work.size()), locked);
  for (Shard* s : locked) s->mu.Lock();
  // One time for the whole decision: not before any time its shards have used.
  int64_t now = std::clamp<int64_t>(now_us, 0, kMaxTimeUs);
  for (Shard* s : locked) now = std::max(now, s->latest_now_us);
  for (Shard* s : locked) s->latest_now_us = now;
  if (decided_at_us != nullptr) *decided_at_us = now;
  const std::span<Work> states(work.data(), work.size());
  FindStates(states, now);
  bool allowed = true;
  for (size_t i = 0; i < items.size(); ++i) {
    allowed = DecideOne(items[i], i, states, now, out[i]) && allowed;
  }
  if (!allowed) UndoDenied(items, states, now, out);
  KeepNewStates(states, out, allowed, now);
  for (Shard* s : locked) s->mu.Unlock();
  return allowed;
}

// DecideAll's steps for a request of one item: one shard, one state, nothing to order or to
// share; the same decision as the general path's.
bool MemoryStore::DecideSingle(const Item& item, uint64_t hash, int64_t now_us, Decision& d,
                               int64_t* decided_at_us) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Shard& shard = ShardFor(hash);
  util::SpinLockHolder lock(&shard.mu);
  const int64_t now = shard.Now(now_us);
  if (decided_at_us != nullptr) *decided_at_us = now;
  const bool is_log = item.limit->algorithm == Algorithm::kSlidingLog;
  Placement placement = Placement::kTracked;
  if (!is_log) {
    // The usual cases need no Work: a stored compact state, and a new key that finds room.
    bool consumed = false;
    if (CompactTable::Slot* slot = shard.table.Find(hash)) {
      return DecideCompactAlone(item, slot->state, now, d, consumed);
    }
    Reclaim(shard, now);  // housekeeping first, as FindStates
    placement = Place(shard, 0);
    if (placement == Placement::kTracked) {
      // As StartNewKey, then KeepNewStates: it starts from StartState and is stored if it
      // consumed; a tracked key's decision counts for no room statistic.
      algo::CompactState fresh = StartState(shard, item.limit_id, now);
      const bool allowed = DecideCompactAlone(item, fresh, now, d, consumed);
      if (consumed) StoreFresh(shard, hash, fresh);
      return allowed;
    }
  }
  Work w;
  w.hash = hash;
  w.shard = &shard;
  w.is_log = is_log;
  if (!is_log) {  // a new key without room, placed above
    w.is_new = true;
    w.placement = placement;
  } else if (!LookUp(w)) {
    // Housekeeping first (as FindStates): it erases only other states, so there is nothing found
    // to look up again.
    Reclaim(shard, now);
    w.is_new = true;
    w.placement = Place(shard, 0);
  }
  const bool allowed = DecideOne(item, 0, std::span(&w, 1), now, d);
  if (!allowed) UndoOne(item, w, now, d);
  if (w.is_new) {
    CountPlaced(w, w, d, allowed);
    if (w.placement == Placement::kTracked && w.consumed) {
      if (w.is_log) {
        StoreFreshLog(shard, w.hash, std::move(*w.fresh_log), now);
      } else {
        StoreFresh(shard, w.hash, w.fresh_state);
      }
    }
  }
  return allowed;
}

template <typename HashOf>
inline void MemoryStore::Plan(std::span<const Item> items, const HashOf& hash_of,
                              std::span<Work> work, absl::InlinedVector<Shard*, 8>& locked) const {
  for (size_t i = 0; i < items.size(); ++i) {
    Work& w = work[i];
    w.hash = hash_of(i);
    w.shard = &ShardFor(w.hash);
    w.is_log = items[i].limit->algorithm == Algorithm::kSlidingLog;
    w.owner = i;
    // The same state twice in one request (identical descriptors) is decided twice in turn.
    for (size_t j = 0; j < i; ++j) {
      if (work[j].hash == w.hash && work[j].is_log == w.is_log) {
        w.owner = j;
        break;
      }
    }
    locked.push_back(w.shard);
  }
  // One lock per shard, always in address order, so concurrent requests cannot deadlock.
  if (locked.size() > 1) {
    std::sort(locked.begin(), locked.end());
    locked.erase(std::unique(locked.begin(), locked.end()), locked.end());
  }
}

inline bool MemoryStore::LookUp(Work& w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (w.is_log) {
    auto it = w.shard->logs.find(w.hash);
    w.log = it == w.shard->logs.end() ? nullptr : &it->second;
    return w.log != nullptr;
  }
  CompactTable::Slot* slot = w.shard->table.Find(w.hash);
  w.state = slot == nullptr ? nullptr : &slot->state;
  return w.state != nullptr;
}

inline void MemoryStore::FindStates(std::span<Work> work,
                                    int64_t now) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Each owner's stored state, if any. A new key gets housekeeping first (which may move or
  // erase slots: then the states found are looked up again, and an idle state another item found
  // may be gone), then a place; only then are pointers taken for good.
  const size_t n = work.size();
  bool all_found = true;
  for (size_t i = 0; i < n; ++i) {
    if (work[i].owner == i) all_found = LookUp(work[i]) && all_found;
  }
  if (all_found) return;
  size_t erased = 0;
  for (size_t i = 0; i < n; ++i) {
    Work& w = work[i];
    if (w.owner == i && w.state == nullptr && w.log == nullptr) erased += Reclaim(*w.shard, now);
  }
  if (erased > 0) {
    // (A state not found before is not there after: Reclaim only erases.)
    for (size_t i = 0; i < n; ++i) {
      Work& w = work[i];
      if (w.owner == i && (w.state != nullptr || w.log != nullptr)) LookUp(w);
    }
  }
  absl::InlinedVector<std::pair<const Shard*, size_t>, 8> reserved;  // kTracked places given
  for (size_t i = 0; i < n; ++i) {
    Work& w = work[i];
    if (w.owner != i || w.state != nullptr || w.log != nullptr) continue;
    w.is_new = true;
    auto it = std::find_if(reserved.begin(), reserved.end(),
                           [&](const auto& r) { return r.first == w.shard; });
    if (it == reserved.end()) it = reserved.insert(reserved.end(), {w.shard, 0});
    w.placement = Place(*w.shard, it->second);
    if (w.placement == Placement::kTracked) ++it->second;
  }
}

bool MemoryStore::DecideAll(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                            int64_t* decided_at_us) {
  if (items.size() == 1) {
    if (items[0].limit->penalty) [[unlikely]] {
      return DecidePenalized(items, now_us, out, decided_at_us);
    }
    return DecideSingle(items[0], Hash(items[0].limit_id, items[0].key), now_us, out[0],
                        decided_at_us);
  }
  return DecideMany(
      items, [this, items](size_t i) { return Hash(items[i].limit_id, items[i].key); }, now_us, out,
      decided_at_us);
}

bool MemoryStore::DecideAll(std::span<const Item> items, std::span<const uint64_t> hashes,
                            int64_t now_us, std::span<Decision> out, int64_t* decided_at_us) {
  if (items.size() == 1) {
    if (items[0].limit->penalty) [[unlikely]] {
      return DecidePenalized(items, now_us, out, decided_at_us);
    }
    return DecideSingle(items[0], CompactTable::NormalizeHash(hashes[0]), now_us, out[0],
                        decided_at_us);
  }
  return DecideMany(
      items, [hashes](size_t i) { return CompactTable::NormalizeHash(hashes[i]); }, now_us, out,
      decided_at_us);
}

bool MemoryStore::DecidePenalized(std::span<const Item> items, int64_t now_us,
                                  std::span<Decision> out, int64_t* decided_at_us) {
  // The items as without penalties (their limits copied without one, the same states).
  absl::InlinedVector<Limit, 4> limits(items.size());
  absl::InlinedVector<Item, 4> plain(items.begin(), items.end());
  absl::InlinedVector<uint64_t, 4> keys(items.size(), 0);  // 0: no penalty
  for (size_t i = 0; i < items.size(); ++i) {
    limits[i] = *items[i].limit;
    limits[i].penalty.reset();
    plain[i].limit = &limits[i];
    if (items[i].limit->penalty) keys[i] = PenaltyKey(Hash(items[i].limit_id, items[i].key));
  }
  const int64_t now = std::clamp<int64_t>(now_us, 0, kMaxTimeUs);
  // A blocked key is denied without its limits being asked (they are looked at, consuming
  // nothing, for what they would say); a shadow item's block is reported, and denies nothing.
  absl::InlinedVector<int64_t, 4> blocked(items.size(), 0);
  bool any_block = false;
  {
    absl::MutexLock lock(&penalties_mu_);
    for (size_t i = 0; i < items.size(); ++i) {
      if (keys[i] == 0) continue;
      if (auto it = penalties_.find(keys[i]); it != penalties_.end()) {
        blocked[i] = algo::BlockedFor(it->second.state, now);
        any_block = any_block || (blocked[i] > 0 && !items[i].shadow);
      }
    }
  }
  bool allowed = false;
  if (any_block) {
    for (Item& item : plain) item.cost = 0;
    DecideAll(plain, now, out, decided_at_us);
  } else {
    int64_t at = now;
    allowed = DecideAll(plain, now, out, &at);
    if (decided_at_us != nullptr) *decided_at_us = at;
    absl::MutexLock lock(&penalties_mu_);
    for (size_t i = 0; i < items.size(); ++i) {
      if (keys[i] == 0 || out[i].allowed || items[i].cost == 0) continue;
      const Penalty& penalty = *items[i].limit->penalty;
      auto found = penalties_.find(keys[i]);
      if (found == penalties_.end()) {
        if (penalties_.size() >= max_penalties_) {
          absl::erase_if(penalties_, [at](const auto& e) { return e.second.idle_at_us <= at; });
          if (penalties_.size() >= max_penalties_) continue;  // every one busy: not kept
        }
        found = penalties_.try_emplace(keys[i]).first;
      }
      PenaltyEntry& entry = found->second;
      if (const int64_t started = algo::RecordDenial(entry.state, penalty, at); started > 0) {
        blocked[i] = started;  // this denial is an offence: the block starts now
      }
      entry.idle_at_us = algo::PenaltyIdleAt(entry.state, penalty);
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (blocked[i] <= 0) continue;
    Decision& d = out[i];
    d.allowed = false;  // (a shadow item's verdict, reported: it denies nothing)
    d.penalty = true;
    d.remaining = 0;
    d.delay_us = 0;
    d.retry_after_us = blocked[i];
    d.reset_after_us = std::max(d.reset_after_us, blocked[i]);
  }
  return allowed;
}

void MemoryStore::StartNewKey(const Item& item, Work& w,
                              int64_t now) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (w.placement == Placement::kOverflow) {
    if (w.is_log) {
      w.log = OverflowLog(*w.shard, item.limit_id);
    } else {
      w.state = OverflowState(*w.shard, item.limit_id);
    }
    if (w.log == nullptr && w.state == nullptr) w.placement = Placement::kDenied;
  }
  const bool copy = w.placement == Placement::kTracked;
  if (w.is_log && w.log == nullptr) {
    w.fresh_log = std::make_unique<algo::LogState>(copy ? StartLog(*w.shard, item.limit_id, now)
                                                        : algo::LogState{});
    w.log = w.fresh_log.get();
  } else if (!w.is_log && w.state == nullptr) {
    w.fresh_state = copy ? StartState(*w.shard, item.limit_id, now) : algo::CompactState{};
    w.state = &w.fresh_state;
  }
}

inline bool MemoryStore::DecideOne(const Item& item, size_t i, std::span<Work> work, int64_t now,
                                   Decision& d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Work& w = work[i];
  const Work& owner = work[w.owner];
  if (w.owner != i) {
    w.state = owner.state;
    w.log = owner.log;
  } else if (w.is_new) {  // else FindStates found its state
    StartNewKey(item, w, now);
  }
  if (w.is_log) {
    w.saved_idle_at = w.log->idle_at_us;
    d = algo::EvaluateSlidingLog(*w.log, now, *item.limit, item.cost);
    if (item.cost > 0) {
      if (d.allowed) {
        algo::CommitSlidingLog(*w.log, now, *item.limit, item.cost, d);
        w.consumed = true;
      } else if (CountsDenied(item)) {
        // (A new key's log, the only one the undo below may take back from, was empty: the
        // record is its one entry.)
        algo::RecordSlidingLog(*w.log, now, *item.limit, item.cost);
        d = algo::EvaluateSlidingLog(*w.log, now, *item.limit, item.cost);
        w.consumed = true;
      }
    }
  } else {
    w.saved = *w.state;
    d = DecideCompactItem(item, *w.state, now);
    w.consumed = !(*w.state == w.saved);
  }
  if (w.consumed && work[w.owner].placement == Placement::kDenied) {
    // A new key with no room (on_full deny): what it would have consumed cannot be kept.
    if (w.is_log) {
      UndoLogCommit(*w.log, item.cost, w.saved_idle_at, item.limit->window_us);
    } else {
      *w.state = w.saved;
    }
    w.consumed = false;
    if (d.allowed) {
      w.no_room = true;
      d = NoRoomDecision();
    }
  }
  return d.allowed || item.shadow;
}

inline void MemoryStore::UndoOne(const Item& item, Work& w, int64_t now,
                                 Decision& d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (!w.consumed || CountsDenied(item)) return;
  Decision peek;
  if (w.is_log) {
    UndoLogCommit(*w.log, item.cost, w.saved_idle_at, item.limit->window_us);
    peek = algo::EvaluateSlidingLog(*w.log, now, *item.limit, 0);
  } else {
    *w.state = w.saved;
    algo::CompactState copy = *w.state;
    peek = algo::DecideCompact(copy, now, *item.limit, 0);
  }
  w.consumed = false;
  ReportUnconsumed(peek, d);
}

inline void MemoryStore::UndoDenied(std::span<const Item> items, std::span<Work> work, int64_t now,
                                    std::span<Decision> out) {
  // Undo, newest first, everything but count_denied items; report what is left unconsumed.
  for (size_t i = items.size(); i-- > 0;) UndoOne(items[i], work[i], now, out[i]);
}

inline void MemoryStore::CountPlaced(const Work& w, const Work& owner, const Decision& d,
                                     bool allowed) {
  switch (owner.is_new ? owner.placement : Placement::kTracked) {
    case Placement::kTracked:
      break;
    case Placement::kOverflow:
      CountNoRoom(d.allowed && allowed);
      break;
    case Placement::kDenied:
      if (w.no_room) CountNoRoom(false);
      break;
    case Placement::kUntracked:
      if (w.consumed) CountNoRoom(true);
      break;
  }
}

inline void MemoryStore::KeepNewStates(std::span<Work> work, std::span<const Decision> out,
                                       bool allowed, int64_t now) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // New keys' own states that now hold something are stored (kTracked) or dropped (kDenied,
  // kUntracked); decisions that found no room are counted.
  const size_t n = work.size();
  for (size_t i = 0; i < n; ++i) {
    const Work& w = work[i];
    if (w.consumed) work[w.owner].keep = true;
    CountPlaced(w, work[w.owner], out[i], allowed);
  }
  for (size_t i = 0; i < n; ++i) {
    Work& w = work[i];
    if (w.owner != i || !w.is_new || w.placement != Placement::kTracked || !w.keep) continue;
    if (w.is_log) {
      StoreFreshLog(*w.shard, w.hash, std::move(*w.fresh_log), now);
    } else {
      StoreFresh(*w.shard, w.hash, w.fresh_state);
    }
  }
}

void MemoryStore::Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                         Done done) {
  done(DecideNow(items, now_us, out));
}

backend::Outcome MemoryStore::DecideNow(std::span<const Item> items, int64_t now_us,
                                        std::span<Decision> out) {
  backend::Outcome outcome;
  outcome.allowed = DecideAll(items, now_us, out, &outcome.decided_at_us);
  return outcome;
}

void MemoryStore::Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
                         RefundDone done) {
  Refund(items, decided_at_us, now_us);
  done(absl::OkStatus());
}

void MemoryStore::Reset(std::span<const Item> items, ResetDone done) {
  size_t forgotten = 0;
  for (const Item& item : items) forgotten += Reset(item.limit_id, item.key) ? 1 : 0;
  done(forgotten);
}

}  // namespace sluice::store
