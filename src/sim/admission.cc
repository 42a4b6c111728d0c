#include "sim/admission.h"

#include <algorithm>
#include <memory>

#include "sluice/clock.h"
#include "sluice/limiter.h"

namespace sluice::sim {
namespace {

// Adds one admission to a window now holding `in_window` units (this one included).
void Count(uint64_t in_window, uint64_t cost, uint64_t allowance, OverAdmission& out) {
  if (in_window <= allowance) return;
  out.max = std::max(out.max, in_window - allowance);
  out.total += std::min(cost, in_window - allowance);
}

// floor(t / w) for any sign of t.
int64_t WindowIndex(int64_t t_us, int64_t w) {
  return t_us >= 0 ? t_us / w : -((-t_us + w - 1) / w);
}

}  // namespace

WindowRule WindowRuleFor(const Limit& limit) {
  switch (limit.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
      return {.aligned = true, .window_us = limit.window_us, .allowance = limit.requests};
    case Algorithm::kSlidingLog:
      return {.aligned = false, .window_us = limit.window_us, .allowance = limit.requests};
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      break;
  }
  // C + N - 1 (N = 0 admits nothing: allowance 0).
  const uint64_t allowance = limit.requests == 0 ? 0 : limit.Capacity() + limit.requests - 1;
  return {.aligned = false, .window_us = limit.window_us, .allowance = allowance};
}

OverAdmission MeasureOverAdmission(std::span<const Admission> admissions, const WindowRule& rule) {
  OverAdmission out;
  if (rule.aligned) {
    uint64_t in_window = 0;
    int64_t window = 0;
    for (size_t j = 0; j < admissions.size(); ++j) {
      const int64_t w = WindowIndex(admissions[j].t_us, rule.window_us);
      if (j == 0 || w != window) {
        window = w;
        in_window = 0;
      }
      in_window += admissions[j].cost;
      Count(in_window, admissions[j].cost, rule.allowance, out);
    }
    return out;
  }
  // Every span [t, t + W) holds the same admissions as the span (s - W, s] that ends at its last
  // admission s, so the spans ending at each admission are enough: [first, j] is the run of
  // admissions less than W before admission j.
  uint64_t in_window = 0;
  size_t first = 0;
  for (size_t j = 0; j < admissions.size(); ++j) {
    in_window += admissions[j].cost;
    while (admissions[j].t_us - admissions[first].t_us >= rule.window_us) {
      in_window -= admissions[first].cost;
      ++first;
    }
    Count(in_window, admissions[j].cost, rule.allowance, out);
  }
  return out;
}

OverAdmission MeasureOverAdmission(std::vector<std::vector<Admission>>& admissions,
                                   const WindowRule& rule) {
  OverAdmission out;
  for (std::vector<Admission>& key : admissions) {
    std::stable_sort(key.begin(), key.end(),
                     [](const Admission& a, const Admission& b) { return a.t_us < b.t_us; });
    const OverAdmission one = MeasureOverAdmission(key, rule);
    out.max = std::max(out.max, one.max);
    out.total += one.total;
  }
  return out;
}

Judgement Judge(const Limit& limit, const Trace& trace, std::span<const int64_t> admitted_at,
                const std::vector<bool>& exact) {
  Judgement j;
  std::vector<std::vector<Admission>> by_key(trace.keys.size());
  for (size_t i = 0; i < trace.arrivals.size(); ++i) {
    const Arrival& a = trace.arrivals[i];
    if (i < exact.size() && exact[i]) j.exact_admitted += a.cost;
    if (i >= admitted_at.size() || admitted_at[i] == kNotAdmitted) continue;
    j.admitted += a.cost;
    by_key[a.key].push_back({.t_us = admitted_at[i], .cost = a.cost});
  }
  j.over = MeasureOverAdmission(by_key, WindowRuleFor(limit));
  if (j.exact_admitted > j.admitted) j.under = j.exact_admitted - j.admitted;
  if (j.exact_admitted > 0) {
    j.under_pct = 100.0 * static_cast<double>(j.under) / static_cast<double>(j.exact_admitted);
  }
  return j;
}

absl::StatusOr<std::vector<bool>> RunExactModel(const Limit& limit, const Trace& trace,
                                                int64_t start_us) {
  ManualClock clock(start_us);
  // Room for every key of the trace, so that no state is ever dropped.
  auto limiter = Limiter::Create(
      limit, {.clock = &clock, .max_keys = std::max<size_t>(1024, 2 * trace.keys.size())});
  if (!limiter.ok()) return limiter.status();
  std::vector<bool> admitted;
  admitted.reserve(trace.arrivals.size());
  for (const Arrival& a : trace.arrivals) {
    admitted.push_back((*limiter)->DecideAt(trace.keys[a.key], a.cost, start_us + a.t_us).allowed);
  }
  return admitted;
}

uint64_t MostInSpan(std::span<const Admission> admissions, int64_t span_us) {
  uint64_t most = 0, in = 0;
  for (size_t first = 0, last = 0; last < admissions.size(); ++last) {
    in += admissions[last].cost;
    while (admissions[last].t_us - admissions[first].t_us >= span_us)
      in -= admissions[first++].cost;
    most = std::max(most, in);
  }
  return most;
}

EventualBound CheckEventualBound(const Limit& limit, const Trace& trace,
                                 std::span<const int64_t> admitted_at, int64_t span_us,
                                 size_t instances) {
  // Each key's admissions, by instance.
  std::vector<std::vector<std::vector<Admission>>> by_key(
      trace.keys.size(), std::vector<std::vector<Admission>>(std::max<size_t>(1, instances)));
  for (size_t i = 0; i < trace.arrivals.size() && i < admitted_at.size(); ++i) {
    const Arrival& a = trace.arrivals[i];
    if (admitted_at[i] == kNotAdmitted) continue;
    by_key[a.key][a.instance % by_key[a.key].size()].push_back(
        {.t_us = admitted_at[i], .cost = a.cost});
  }
  const WindowRule rule = WindowRuleFor(limit);
  EventualBound out;
  for (auto& per_instance : by_key) {
    std::vector<Admission> all;
    uint64_t sum = 0, least = UINT64_MAX;
    for (auto& admissions : per_instance) {
      std::sort(admissions.begin(), admissions.end(),
                [](const Admission& x, const Admission& y) { return x.t_us < y.t_us; });
      const uint64_t most = MostInSpan(admissions, span_us);
      sum += most;
      least = std::min(least, most);
      all.insert(all.end(), admissions.begin(), admissions.end());
    }
    if (all.empty()) continue;
    std::sort(all.begin(), all.end(),
              [](const Admission& x, const Admission& y) { return x.t_us < y.t_us; });
    const uint64_t bound = sum - least;
    const uint64_t over = MeasureOverAdmission(all, rule).max;
    out.max_bound = std::max(out.max_bound, bound);
    if (over > bound) out.within = false;
    out.tightest_margin = std::min(out.tightest_margin, over > bound ? 0 : bound - over);
  }
  return out;
}

}  // namespace sluice::sim
