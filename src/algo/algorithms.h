// The rate-limiting algorithms as pure state transitions.
//
//   Decision Decide(State& state, int64_t now_us, const Limit& limit, uint64_t cost)
//
// No clock reads, no allocation (but for sliding_log's log), no locks: callers own the state and
// serialise access to it. `state` is changed only when the request is allowed with cost > 0;
// denied requests consume nothing (but with count_denied, *CountingDenied), and cost 0 is a peek. A
// default-constructed state is a key never seen before. `now_us` must lie in [0, kMaxTimeUs] and
// must not be earlier than any time already used with the same state (the store clamps it). `limit`
// must pass ValidateLimit and be the same for every call on one state.
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
//   sliding_window:     idle_at_us = when the estimate reaches 0, aux = prev << 32 | current; an
//                       overdraft carried: the state of the last window it reaches, whose
//                       start is then later than now's (N more in each window before)
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

// count_denied (envoyproxy/ratelimit's counting, `count_denied: true`): a request's cost is
// recorded even when it does not fit, and the answer is still a denial. Decides as DecideCompact;
// when that denies a cost > 0, records the cost as an overdraft (RecordOverdraft) and answers
// what a request of the same cost would be told now: denied, remaining and reset of the state
// with the overdraft, retry_after when such a request would fit again (kNever above the
// capacity). Cost 0 stays a look, which denies while an overdraft lasts.
Decision DecideCompactCountingDenied(CompactState& state, int64_t now_us, const Limit& limit,
                                     uint64_t cost);

// Records `cost` at now_us whatever the limit says (docs/algorithms.md, "Recorded overdrafts"):
// what passes the limit is a debt, repaid at the limit's rate before anything is admitted again.
//   token/leaky bucket: TAT = max(TAT, now) + cost * W/N (the debt D = (TAT - now) * N grows by
//                       cost * W), D at most MaxDebt(limit);
//   fixed_window:       the current window's count grows by cost, and ends with its window
//                       (envoyproxy/ratelimit's counter, exactly);
//   sliding_window:     the current window's count grows by cost; what passes N is carried into
//                       the next windows, N a window (the k-th window on counts x - k * N, each
//                       weighing in the estimate of the one after it), so that the overdraft is
//                       paid back at the rate;
//   (a zero sliding_window or bucket records nothing: nothing would ever repay it).
// A window's count is at most MaxWindowCount(limit).
void RecordOverdraft(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost);

// The caps of recorded overdrafts: where Redis's doubles stop being exact (2^53), so that the
// script records what the memory store records; for limits too large for Redis (which it
// refuses), caps of the memory store alone.
inline constexpr uint64_t kMaxRecorded = (uint64_t{1} << 53) - 1;
// A bucket's debt, in 1/N µs: kMaxRecorded when capacity * W < 2^53, else 2 * capacity * W.
__extension__ unsigned __int128 MaxDebt(const Limit& limit);
// A window's count: kMaxRecorded; a sliding window's with what it carries N * (1 + 2^52 / W)
// (the overdraft carried at most 2^52 µs, 142 years), at most kMaxRecorded, and 0 for N = 0.
uint64_t MaxWindowCount(const Limit& limit);

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
// Records a denied request of `cost` (count_denied) after EvaluateSlidingLog denied it. While the
// log is over the limit (sum > N) the cost joins the newest entry, which moves to now_us: so a log
// holds at most N + 1 entries, as without overdrafts (each entry but the newest was appended
// with the sum at most N, and holds at least 1). The sum is at most kMaxRecorded.
void RecordSlidingLog(LogState& state, int64_t now_us, const Limit& limit, uint64_t cost);
// sliding_log's DecideCompactCountingDenied: evaluate; when denied with cost > 0, record, and
// answer as a request of that cost would be answered now.
Decision DecideSlidingLogCountingDenied(LogState& state, int64_t now_us, const Limit& limit,
                                        uint64_t cost);

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
//   leaky_bucket:   as token_bucket.
// sliding_log is not charged (eventual does not decide it).
void ChargeCompact(CompactState& state, int64_t counted_at_us, int64_t now_us, const Limit& limit,
                   uint64_t cost);

}  // namespace sluice::algo

#endif  // SLUICE_ALGO_ALGORITHMS_H_
