// The rate-limiting algorithms as pure state transitions.
//
//   Decision Decide(State& state, int64_t now_us, const Limit& limit, uint64_t cost)
//
// No clock reads, no allocation (but for sliding_log's log), no locks: callers own the state and
// serialise access to it. `state` is changed only when the request is allowed with cost > 0;
// denied requests consume nothing, and cost 0 is a peek. A default-constructed state is a key
// never seen before. `now_us` must lie in [0, kMaxTimeUs] and must not be earlier than any time
// already used with the same state (the store clamps it). `limit` must pass ValidateLimit and be
// the same for every call on one state.
//
// The exact semantics, with worked examples, are in docs/algorithms.md. The Redis scripts are
// transcriptions of these functions and are tested against them on the same vectors.

#ifndef SLUICE_ALGO_ALGORITHMS_H_
#define SLUICE_ALGO_ALGORITHMS_H_

#include <cstdint>
#include <vector>

#include "sluice/limit.h"

namespace sluice::algo {

// The 16-byte state of the O(1) algorithms (token_bucket, leaky_bucket, fixed_window,
// sliding_window). The state is back to its initial value (a fresh key) once
// now_us >= idle_at_us, whatever the algorithm, so a store can reclaim it without knowing the
// limit. `aux` is algorithm-specific:
//   token/leaky bucket: idle_at_us = ceil(TAT), aux = (TAT * N) mod N, i.e. TAT is exact in 1/N µs
//   fixed_window:       idle_at_us = end of the window, aux = count in it
//   sliding_window:     idle_at_us = when the estimate reaches 0, aux = prev << 32 | current
struct CompactState {
  int64_t idle_at_us = 0;
  uint64_t aux = 0;

  bool IsIdle(int64_t now_us) const { return now_us >= idle_at_us; }
  friend bool operator==(const CompactState&, const CompactState&) = default;
};

Decision DecideTokenBucket(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost);
Decision DecideLeakyBucket(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost);
Decision DecideFixedWindow(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost);
Decision DecideSlidingWindow(CompactState& state, int64_t now_us, const Limit& limit,
                             uint64_t cost);

// fixed_window as envoyproxy/ratelimit counts: every request is added to the window's count,
// admitted or not (`count_denied: true`). Admitted iff the count after adding is <= N;
// remaining is 0 once over.
Decision DecideFixedWindowCountingDenied(CompactState& state, int64_t now_us, const Limit& limit,
                                         uint64_t cost);

// Dispatches on limit.algorithm; limit.algorithm must not be kSlidingLog.
Decision DecideCompact(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost);

// sliding_log keeps every admitted request of the last window: O(N) memory per key (at most one
// entry per admitted request; requests admitted in the same microsecond share an entry).
struct LogState {
  struct Entry {
    int64_t at_us;
    uint64_t cost;
  };
  std::vector<Entry> entries;  // oldest first; entries[head..] are live
  size_t head = 0;
  uint64_t sum = 0;        // total cost of the live entries
  int64_t idle_at_us = 0;  // newest entry + W: from then on the state is back to initial

  bool IsIdle(int64_t now_us) const { return now_us >= idle_at_us; }
  size_t LiveEntries() const { return entries.size() - head; }
};

// Evaluates without admitting (it only forgets entries that stopped counting).
Decision EvaluateSlidingLog(LogState& state, int64_t now_us, const Limit& limit, uint64_t cost);
// Records an admitted request; `decision` is what EvaluateSlidingLog returned for it.
void CommitSlidingLog(LogState& state, int64_t now_us, const Limit& limit, uint64_t cost,
                      Decision& decision);
// Evaluate, then commit when allowed.
Decision DecideSlidingLog(LogState& state, int64_t now_us, const Limit& limit, uint64_t cost);

// Refunds: give back what an admitted request of `cost` consumed at `consumed_at_us` (the time
// the store decided it), at `now_us` >= consumed_at_us — e.g. because the upstream failed.
// A refund never leaves a state better than a fresh key's, and it is a no-op when what was
// consumed no longer counts:
//   token/leaky bucket: TAT moves back by cost * W/N, but not before now (the bucket refills to
//                       at most full).
//   fixed_window:       the window's count drops by cost if the request's window is still the
//                       current one; after the window rolled, nothing.
//   sliding_window:     the current window's count drops by cost if the request was counted in
//                       the window that is still current; after it rolled, nothing.
//   sliding_log:        the request's entry (admitted at consumed_at_us) loses cost; an entry
//                       that expired is not there any more.
// A refund is not a negative consumption: it cannot take a count below 0 or a TAT below now.
void RefundCompact(CompactState& state, int64_t consumed_at_us, int64_t now_us, const Limit& limit,
                   uint64_t cost);
void RefundSlidingLog(LogState& state, int64_t consumed_at_us, int64_t now_us, const Limit& limit,
                      uint64_t cost);

// Charges: record `cost` as consumed whatever the limit says (it may take a state past its
// limit), at `now_us` >= every time already used with the state, for units admitted at
// `counted_at_us` <= now_us elsewhere and learnt of late (consistency: eventual merges every
// instance's admissions into one state; docs/hybrid.md). Only what still counts is charged:
//   token_bucket:   TAT = max(TAT, now) + cost * W/N (its debt grows by cost; no capacity check).
//   fixed_window:   the count of counted_at's window grows by cost, if that window is now's.
//   sliding_window: the count of counted_at's window grows by cost, if that window is now's or
//                   the one before (it still weighs in the estimate); counts saturate at 2^32 - 1.
// leaky_bucket and sliding_log are not charged (eventual does not decide them).
void ChargeCompact(CompactState& state, int64_t counted_at_us, int64_t now_us, const Limit& limit,
                   uint64_t cost);

}  // namespace sluice::algo

#endif  // SLUICE_ALGO_ALGORITHMS_H_
