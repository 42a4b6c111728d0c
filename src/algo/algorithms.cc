#include "algo/algorithms.h"

#include <algorithm>

#include "absl/base/attributes.h"
#include "algo/arith.h"

namespace sluice::algo {
namespace {

int64_t ToInt64(i128 v) { return static_cast<int64_t>(v); }

// token_bucket and leaky_bucket are one computation (GCRA) with different capacities; see
// docs/algorithms.md. Time is scaled by N so that the emission interval W/N is exact:
// D = (TAT - now) * N >= 0 is how far the bucket is from full, in 1/N µs, and the bucket holds
// C - D/W tokens.
Decision DecideBucket(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost,
                      bool report_delay) {
  const uint64_t n = limit.requests;
  const i128 w = limit.window_us;
  const uint64_t capacity = limit.Capacity();
  Decision d;
  if (n == 0) {  // nothing ever refills
    d.allowed = cost == 0;
    d.retry_after_us = d.allowed ? 0 : Decision::kNever;
    return d;
  }
  const i128 now_scaled = static_cast<i128>(now_us) * n;
  i128 debt = 0;  // D
  if (!state.IsIdle(now_us)) {
    const int64_t tat_floor = state.idle_at_us - (state.aux != 0 ? 1 : 0);
    debt = Max(0, static_cast<i128>(tat_floor) * n + state.aux - now_scaled);
  }
  const i128 full = static_cast<i128>(capacity) * w;  // C * W
  const i128 need = static_cast<i128>(cost) * w;
  d.allowed = cost <= capacity && debt + need <= full;
  if (d.allowed) {
    if (report_delay) d.delay_us = ToInt64(CeilDiv(debt, n));
    if (cost > 0) {
      debt += need;
      // TAT' = now + D'/N exactly: whole µs plus a remainder in 1/N µs.
      const int64_t whole = ToInt64(FloorDiv(debt, n));
      const uint64_t frac = static_cast<uint64_t>(debt - static_cast<i128>(whole) * n);
      state.idle_at_us = now_us + whole + (frac != 0 ? 1 : 0);
      state.aux = frac;
    }
  } else if (cost > capacity) {
    d.retry_after_us = Decision::kNever;
  } else {
    d.retry_after_us = ToInt64(CeilDiv(debt - (full - need), n));
  }
  d.remaining = std::max<int64_t>(0, static_cast<int64_t>(capacity) - ToInt64(CeilDiv(debt, w)));
  d.reset_after_us = ToInt64(CeilDiv(debt, n));
  return d;
}

}  // namespace

Decision DecideTokenBucket(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  return DecideBucket(state, now_us, limit, cost, /*report_delay=*/false);
}

Decision DecideLeakyBucket(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  return DecideBucket(state, now_us, limit, cost, /*report_delay=*/true);
}

namespace {

// The end of the fixed_window window that holds t_us: epoch-aligned, or its calendar's.
int64_t FixedWindowEnd(const Limit& limit, int64_t t_us) {
  if (limit.calendar) return limit.calendar->WindowAt(t_us).end_us;
  return WindowStart(t_us, limit.window_us) + limit.window_us;
}

// The current window of a fixed_window state: its end and its count so far. (A count that
// count_denied took past N ends with its window too, as upstream's counter does.) The window's
// bounds are looked up only when a new one starts.
std::pair<int64_t, uint64_t> CurrentWindow(const CompactState& state, int64_t now_us,
                                           const Limit& limit) {
  if (state.IsIdle(now_us)) return {FixedWindowEnd(limit, now_us), 0};
  return {state.idle_at_us, state.aux};
}

// DecideFixedWindow in the window [.., end_us) whose count so far is `count`.
inline Decision DecideInWindow(CompactState& state, int64_t now_us, const Limit& limit,
                               uint64_t cost, int64_t end_us, uint64_t count) {
  const uint64_t n = limit.requests;
  Decision d;
  d.allowed = cost <= n && count + cost <= n;
  if (d.allowed && cost > 0) {
    count += cost;
    state = {end_us, count};
  }
  d.remaining = static_cast<int64_t>(n - std::min(n, count));
  d.reset_after_us = end_us - now_us;
  if (!d.allowed) d.retry_after_us = cost > n ? Decision::kNever : end_us - now_us;
  return d;
}

// A calendar window's decision, out of line: its call to the calendar would otherwise cost every
// caller that inlines DecideFixedWindow (DecideCompact's dispatch) a stack frame.
ABSL_ATTRIBUTE_NOINLINE Decision DecideCalendarWindow(CompactState& state, int64_t now_us,
                                                      const Limit& limit, uint64_t cost) {
  const auto [end_us, count] = CurrentWindow(state, now_us, limit);
  return DecideInWindow(state, now_us, limit, cost, end_us, count);
}

}  // namespace

Decision DecideFixedWindow(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  if (limit.calendar) [[unlikely]]
    return DecideCalendarWindow(state, now_us, limit, cost);
  const int64_t w = limit.window_us;
  const bool idle = state.IsIdle(now_us);
  return DecideInWindow(state, now_us, limit, cost,
                        idle ? WindowStart(now_us, w) + w : state.idle_at_us, idle ? 0 : state.aux);
}

namespace {

// A sliding_window state rolled to now's window: the window's start, the previous window's count
// and the current one's. A recorded overdraft carried into later windows (RecordOverdraft) is
// stored as the last window it reaches (its start later than now's), with N in the window before
// it and what is left of the overdraft in it; each window before holds N more (`carried`: how
// many windows before that last one now's is).
struct SlidingNow {
  int64_t start_us = 0;
  uint64_t prev = 0;
  uint64_t cur = 0;
  int64_t carried = 0;
};

SlidingNow RollSliding(const CompactState& state, int64_t now_us, const Limit& limit) {
  const int64_t w = limit.window_us;
  const int64_t current_start = WindowStart(now_us, w);
  SlidingNow r{.start_us = current_start};
  if (state.IsIdle(now_us)) return r;
  uint64_t prev = state.aux >> 32;
  uint64_t cur = state.aux & 0xFFFFFFFFu;
  const int64_t start_us = (cur > 0 ? state.idle_at_us - w : state.idle_at_us) - w;
  if (start_us > current_start) {
    r.carried = (start_us - current_start) / w;
    r.prev = limit.requests;
    r.cur = cur + static_cast<uint64_t>(r.carried) * limit.requests;
    return r;
  }
  if (current_start >= start_us + 2 * w) {
    prev = cur = 0;
  } else if (current_start == start_us + w) {
    prev = cur;
    cur = 0;
  }
  r.prev = prev;
  r.cur = cur;
  return r;
}

}  // namespace

Decision DecideSlidingWindow(CompactState& state, int64_t now_us, const Limit& limit,
                             uint64_t cost) {
  const uint64_t n = limit.requests;
  const int64_t w = limit.window_us;
  const SlidingNow rolled = RollSliding(state, now_us, limit);
  if (rolled.carried > 0) {
    // Over the limit until the overdraft's last window: everything is denied (a look too), and a
    // cost that fits is admitted when it would be on the state as stored, from that window on.
    Decision d{.allowed = false,
               .remaining = 0,
               .retry_after_us = Decision::kNever,
               .reset_after_us = state.idle_at_us - now_us};
    if (cost <= n) {
      const int64_t last_start = rolled.start_us + rolled.carried * w;
      CompactState then = state;
      d.retry_after_us =
          last_start - now_us + DecideSlidingWindow(then, last_start, limit, cost).retry_after_us;
    }
    return d;
  }
  const int64_t start_us = rolled.start_us;
  uint64_t prev = rolled.prev, cur = rolled.cur;
  const int64_t elapsed = std::clamp<int64_t>(now_us - start_us, 0, w - 1);  // e
  const i128 prev_weight = static_cast<i128>(prev) * (w - elapsed);          // p * (W - e)
  const i128 limit_scaled = static_cast<i128>(n) * w;                        // N * W
  Decision d;
  d.allowed = cost <= n && prev_weight + static_cast<i128>(cur + cost) * w <= limit_scaled;
  if (d.allowed && cost > 0) {
    cur += cost;
    state.idle_at_us = start_us + 2 * w;
    state.aux = prev << 32 | cur;
  }
  const i128 estimate_ceil = cur + CeilDiv(prev_weight, w);
  d.remaining = estimate_ceil >= n ? 0 : ToInt64(n - estimate_ceil);
  d.reset_after_us = cur > 0 ? start_us + 2 * w - now_us : prev > 0 ? start_us + w - now_us : 0;
  if (!d.allowed) {
    if (cost > n) {
      d.retry_after_us = Decision::kNever;
    } else {
      // The estimate falls linearly to `cur` at the end of this window, then to 0 over the next.
      const i128 excess = prev_weight + static_cast<i128>(cur + cost) * w - limit_scaled;
      const int64_t to_window_end = w - elapsed;
      int64_t wait = -1;
      if (prev > 0) {
        const i128 x = CeilDiv(excess, prev);
        if (x <= to_window_end) wait = ToInt64(x);
      }
      if (wait < 0) {
        // In the next window the estimate is cur * (W - e') / W: admitted once
        // e' >= (cur + cost - N) * W / cur.
        i128 into_next = 0;
        if (cur > 0 && cur + cost > n)
          into_next = CeilDiv(static_cast<i128>(cur + cost - n) * w, cur);
        wait = to_window_end + ToInt64(into_next);
      }
      d.retry_after_us = wait;
    }
  }
  return d;
}

Decision DecideCompact(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
      return DecideTokenBucket(state, now_us, limit, cost);
    case Algorithm::kLeakyBucket:
      return DecideLeakyBucket(state, now_us, limit, cost);
    case Algorithm::kFixedWindow:
      return DecideFixedWindow(state, now_us, limit, cost);
    case Algorithm::kSlidingWindow:
      return DecideSlidingWindow(state, now_us, limit, cost);
    case Algorithm::kSlidingLog:
      break;
  }
  return Decision{.allowed = false, .retry_after_us = Decision::kNever};
}

Decision EvaluateSlidingLog(LogState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  const uint64_t n = limit.requests;
  const int64_t w = limit.window_us;
  auto& e = state.entries;
  if (state.head < e.size()) now_us = std::max(now_us, e.back().at_us);  // never backwards
  // An entry admitted at s counts while now - s < W.
  while (state.head < e.size() && e[state.head].at_us + w <= now_us) {
    state.sum -= e[state.head].cost;
    ++state.head;
  }
  if (state.head == e.size()) {
    e.clear();
    state.head = 0;
  } else if (state.head >= 32 && state.head * 2 >= e.size()) {
    e.erase(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(state.head));
    state.head = 0;
  }
  Decision d;
  d.allowed = cost <= n && state.sum + cost <= n;
  d.remaining = static_cast<int64_t>(n - std::min(n, state.sum));
  d.reset_after_us = state.head < e.size() ? e.back().at_us + w - now_us : 0;
  if (!d.allowed) {
    if (cost > n) {
      d.retry_after_us = Decision::kNever;
    } else {
      // Wait for the oldest entries to stop counting until the request fits.
      uint64_t left = state.sum;
      for (size_t i = state.head; i < e.size(); ++i) {
        left -= e[i].cost;
        if (left + cost <= n) {
          d.retry_after_us = e[i].at_us + w - now_us;
          break;
        }
      }
    }
  }
  return d;
}

void CommitSlidingLog(LogState& state, int64_t now_us, const Limit& limit, uint64_t cost,
                      Decision& decision) {
  if (cost == 0) return;
  auto& e = state.entries;
  if (state.head < e.size()) now_us = std::max(now_us, e.back().at_us);
  if (state.head < e.size() && e.back().at_us == now_us) {
    e.back().cost += cost;
  } else {
    e.push_back({now_us, cost});
  }
  state.sum += cost;
  state.idle_at_us = now_us + limit.window_us;
  decision.remaining = static_cast<int64_t>(limit.requests - std::min(limit.requests, state.sum));
  decision.reset_after_us = limit.window_us;
}

Decision DecideSlidingLog(LogState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  Decision d = EvaluateSlidingLog(state, now_us, limit, cost);
  if (d.allowed) CommitSlidingLog(state, now_us, limit, cost, d);
  return d;
}

}  // namespace sluice::algo

namespace sluice::algo {
namespace {

// token_bucket / leaky_bucket: D = (TAT - now) * N shrinks by cost * W, not below 0 (full).
void RefundBucket(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  const uint64_t n = limit.requests;
  if (n == 0 || state.IsIdle(now_us)) return;  // nothing consumed, or already full again
  const int64_t tat_floor = state.idle_at_us - (state.aux != 0 ? 1 : 0);
  const i128 now_scaled = static_cast<i128>(now_us) * n;
  i128 debt = static_cast<i128>(tat_floor) * n + state.aux - now_scaled;
  debt -= static_cast<i128>(cost) * limit.window_us;
  if (debt <= 0) {
    state = {};
    return;
  }
  const int64_t whole = ToInt64(FloorDiv(debt, n));
  const uint64_t frac = static_cast<uint64_t>(debt - static_cast<i128>(whole) * n);
  state.idle_at_us = now_us + whole + (frac != 0 ? 1 : 0);
  state.aux = frac;
}

void RefundFixedWindow(CompactState& state, int64_t consumed_at_us, int64_t now_us,
                       const Limit& limit, uint64_t cost) {
  if (state.IsIdle(now_us)) return;
  if (state.idle_at_us != FixedWindowEnd(limit, consumed_at_us)) return;  // the window rolled
  state.aux -= std::min(state.aux, cost);
  if (state.aux == 0) state = {};
}

void RefundSlidingWindow(CompactState& state, int64_t consumed_at_us, int64_t now_us,
                         const Limit& limit, uint64_t cost) {
  const int64_t w = limit.window_us;
  const int64_t window_start = WindowStart(consumed_at_us, w);
  if (state.IsIdle(now_us) || WindowStart(now_us, w) != window_start) return;
  uint64_t prev = state.aux >> 32;
  uint64_t cur = state.aux & 0xFFFFFFFFu;
  if (cur == 0 || state.idle_at_us != window_start + 2 * w) return;  // not counted in this window
  cur -= std::min(cur, cost);
  if (cur == 0 && prev == 0) {
    state = {};
    return;
  }
  // With nothing in the current window the estimate is 0 from the window's end on.
  state.idle_at_us = cur > 0 ? window_start + 2 * w : window_start + w;
  state.aux = prev << 32 | cur;
}

}  // namespace

void RefundCompact(CompactState& state, int64_t consumed_at_us, int64_t now_us, const Limit& limit,
                   uint64_t cost) {
  if (cost == 0) return;
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      return RefundBucket(state, now_us, limit, cost);
    case Algorithm::kFixedWindow:
      return RefundFixedWindow(state, consumed_at_us, now_us, limit, cost);
    case Algorithm::kSlidingWindow:
      return RefundSlidingWindow(state, consumed_at_us, now_us, limit, cost);
    case Algorithm::kSlidingLog:
      return;
  }
}

void RefundSlidingLog(LogState& state, int64_t consumed_at_us, int64_t now_us, const Limit& limit,
                      uint64_t cost) {
  auto& e = state.entries;
  if (cost == 0 || consumed_at_us + limit.window_us <= now_us) return;  // no longer counts
  // Entries are in time order; the request's is the one stamped with its decision time.
  auto it =
      std::lower_bound(e.begin() + static_cast<std::ptrdiff_t>(state.head), e.end(), consumed_at_us,
                       [](const LogState::Entry& entry, int64_t t) { return entry.at_us < t; });
  if (it == e.end() || it->at_us != consumed_at_us) return;
  const uint64_t give_back = std::min(it->cost, cost);
  it->cost -= give_back;
  state.sum -= give_back;
  if (it->cost == 0) e.erase(it);
  if (state.head >= e.size()) {
    state = {};
    return;
  }
  state.idle_at_us = e.back().at_us + limit.window_us;
}

namespace {

// A bucket's debt grows by cost * W from now on; `max_debt` (> 0) caps what it grows to (a debt
// already above it stays).
void ChargeBucket(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost,
                  i128 max_debt = 0) {
  const uint64_t n = limit.requests;
  if (n == 0) return;
  i128 debt = 0;
  if (!state.IsIdle(now_us)) {
    const int64_t tat_floor = state.idle_at_us - (state.aux != 0 ? 1 : 0);
    debt = Max(0, static_cast<i128>(tat_floor) * n + state.aux - static_cast<i128>(now_us) * n);
  }
  const i128 grown = debt + static_cast<i128>(cost) * limit.window_us;
  debt = max_debt > 0 && grown > max_debt ? Max(debt, max_debt) : grown;
  const int64_t whole = ToInt64(FloorDiv(debt, n));
  const uint64_t frac = static_cast<uint64_t>(debt - static_cast<i128>(whole) * n);
  state.idle_at_us = now_us + whole + (frac != 0 ? 1 : 0);
  state.aux = frac;
}

void ChargeFixedWindow(CompactState& state, int64_t counted_at_us, int64_t now_us,
                       const Limit& limit, uint64_t cost) {
  const int64_t end_us = FixedWindowEnd(limit, now_us);
  if (FixedWindowEnd(limit, counted_at_us) != end_us) return;  // its window is over
  uint64_t count = state.IsIdle(now_us) ? 0 : state.aux;
  count = count > UINT64_MAX - cost ? UINT64_MAX : count + cost;
  state = {end_us, count};
}

void ChargeSlidingWindow(CompactState& state, int64_t counted_at_us, int64_t now_us,
                         const Limit& limit, uint64_t cost) {
  constexpr uint64_t kMaxCount = 0xFFFFFFFFu;
  const int64_t w = limit.window_us;
  const int64_t current_start = WindowStart(now_us, w);
  const int64_t counted_start = WindowStart(counted_at_us, w);
  if (counted_start != current_start && counted_start != current_start - w) return;
  // The state rolled to now's window, as DecideSlidingWindow rolls it.
  uint64_t prev = 0, cur = 0;
  if (!state.IsIdle(now_us)) {
    prev = state.aux >> 32;
    cur = state.aux & kMaxCount;
    const int64_t start_us = (cur > 0 ? state.idle_at_us - w : state.idle_at_us) - w;
    if (current_start >= start_us + 2 * w) {
      prev = cur = 0;
    } else if (current_start == start_us + w) {
      prev = cur;
      cur = 0;
    }
  }
  uint64_t& count = counted_start == current_start ? cur : prev;
  count = std::min(kMaxCount, count + std::min(kMaxCount, cost));
  if (cur == 0 && prev == 0) {
    state = {};
    return;
  }
  state.idle_at_us = cur > 0 ? current_start + 2 * w : current_start + w;
  state.aux = prev << 32 | cur;
}

}  // namespace

void ChargeCompact(CompactState& state, int64_t counted_at_us, int64_t now_us, const Limit& limit,
                   uint64_t cost) {
  if (cost == 0) return;
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      return ChargeBucket(state, now_us, limit, cost);
    case Algorithm::kFixedWindow:
      return ChargeFixedWindow(state, counted_at_us, now_us, limit, cost);
    case Algorithm::kSlidingWindow:
      return ChargeSlidingWindow(state, counted_at_us, now_us, limit, cost);
    case Algorithm::kSlidingLog:
      return;
  }
}

// --- count_denied: recorded overdrafts (docs/algorithms.md, "Recorded overdrafts").

u128 MaxDebt(const Limit& limit) {
  const u128 full = static_cast<u128>(limit.Capacity()) * static_cast<u128>(limit.window_us);
  return full <= kMaxRecorded ? u128{kMaxRecorded} : 2 * full;
}

uint64_t MaxWindowCount(const Limit& limit) {
  const uint64_t n = limit.requests;
  if (limit.algorithm != Algorithm::kSlidingWindow) return kMaxRecorded;  // nothing carried
  if (n == 0) return 0;
  const u128 windows = 1 + (u128{1} << 52) / static_cast<u128>(limit.window_us);
  return static_cast<uint64_t>(std::min<u128>(kMaxRecorded, windows * n));
}

namespace {

// A sliding window's count `x` of now's window (which starts at `start_us`), stored so that what
// passes N is carried: x <= N as it is; else as the last window x reaches, m = ceil(x / N) - 1
// windows on, holding x - m * N, with N as its previous window's count (each window before it
// N more).
void StoreSlidingCount(CompactState& state, int64_t start_us, uint64_t prev, uint64_t x,
                       const Limit& limit) {
  const uint64_t n = limit.requests;
  const int64_t w = limit.window_us;
  if (x <= n) {
    state = {start_us + 2 * w, prev << 32 | x};
    return;
  }
  const uint64_t m = (x + n - 1) / n - 1;
  state = {start_us + (static_cast<int64_t>(m) + 2) * w, uint64_t{n} << 32 | (x - m * n)};
}

}  // namespace

void RecordOverdraft(CompactState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  if (cost == 0) return;
  const uint64_t most = MaxWindowCount(limit);
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      return ChargeBucket(state, now_us, limit, cost, static_cast<i128>(MaxDebt(limit)));
    case Algorithm::kFixedWindow: {
      // Upstream's counter: the count passes N, and ends with its window.
      auto [end_us, count] = CurrentWindow(state, now_us, limit);
      if (count >= most) return;
      state = {end_us, count + std::min(cost, most - count)};
      return;
    }
    case Algorithm::kSlidingWindow: {
      if (limit.requests == 0) return;  // a zero limit repays nothing
      const SlidingNow r = RollSliding(state, now_us, limit);
      if (r.cur >= most) return;
      return StoreSlidingCount(state, r.start_us, r.prev, r.cur + std::min(cost, most - r.cur),
                               limit);
    }
    case Algorithm::kSlidingLog:
      return;
  }
}

Decision DecideCompactCountingDenied(CompactState& state, int64_t now_us, const Limit& limit,
                                     uint64_t cost) {
  Decision d = DecideCompact(state, now_us, limit, cost);
  if (d.allowed || cost == 0) return d;
  RecordOverdraft(state, now_us, limit, cost);
  CompactState look = state;  // what the same request would be told now: denied
  return DecideCompact(look, now_us, limit, cost);
}

void RecordSlidingLog(LogState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  auto& e = state.entries;
  if (state.sum >= kMaxRecorded) return;
  cost = std::min(cost, kMaxRecorded - state.sum);
  if (cost == 0) return;
  const bool live = state.head < e.size();
  if (live) now_us = std::max(now_us, e.back().at_us);
  if (live && (e.back().at_us == now_us || state.sum > limit.requests)) {
    // Over the limit already: the newest entry takes the cost and counts from now (it counts
    // longer than it would have: never less).
    e.back().at_us = now_us;
    e.back().cost += cost;
  } else {
    e.push_back({now_us, cost});
  }
  state.sum += cost;
  state.idle_at_us = now_us + limit.window_us;
}

Decision DecideSlidingLogCountingDenied(LogState& state, int64_t now_us, const Limit& limit,
                                        uint64_t cost) {
  Decision d = EvaluateSlidingLog(state, now_us, limit, cost);
  if (d.allowed) {
    CommitSlidingLog(state, now_us, limit, cost, d);
    return d;
  }
  if (cost == 0) return d;
  RecordSlidingLog(state, now_us, limit, cost);
  return EvaluateSlidingLog(state, now_us, limit, cost);
}

}  // namespace sluice::algo
