// How `sluice sim` judges what a set of instances admitted: against the limit, window by window
// (over-admission: `max` and `total`), and against an exact single limiter run on the same
// arrivals (under-admission). Both are computed exactly, in one pass over each key's admissions
// in time order.
//
// Thread safety: no shared state; each function touches only its arguments.
// Units: times in microseconds (window_us), amounts in cost units.
//
// Design: docs/sim.md#windows-what-over-admission-is-measured-against (each algorithm's windows
// and allowance; the JSON line's over_admission_max and over_admission_total).

#ifndef SLUICE_SIM_ADMISSION_H_
#define SLUICE_SIM_ADMISSION_H_

#include <climits>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/trace.h"
#include "sluice/limit.h"

namespace sluice::sim {

// The windows of an algorithm and what an exact limiter admits in each (docs/sim.md).
struct WindowRule {
  bool aligned = true;  // epoch-aligned windows; else every span of length window_us
  int64_t window_us = 0;
  uint64_t allowance = 0;  // cost units
};
WindowRule WindowRuleFor(const Limit& limit);

// One admitted request of a key: when it was decided (µs since the epoch, in the clock the
// deciding backend aligns its windows to) and its cost.
struct Admission {
  int64_t t_us = 0;
  uint64_t cost = 1;
};

struct OverAdmission {
  uint64_t max = 0;    // cost units
  uint64_t total = 0;  // cost units
};

// One key's over-admission. `admissions` sorted by time.
OverAdmission MeasureOverAdmission(std::span<const Admission> admissions, const WindowRule& rule);

// Over-admission over every key: `admissions` holds each key's admissions (any order; sorted
// here), indexed by key.
OverAdmission MeasureOverAdmission(std::vector<std::vector<Admission>>& admissions,
                                   const WindowRule& rule);

// Arrival i's entry in `admitted_at` when it was not admitted.
inline constexpr int64_t kNotAdmitted = INT64_MIN;

// What a run admitted, judged against the limit and against the exact model.
struct Judgement {
  uint64_t admitted = 0;        // cost units
  uint64_t exact_admitted = 0;  // cost units the exact model admitted
  OverAdmission over;
  uint64_t under = 0;    // exact_admitted - admitted when positive, else 0
  double under_pct = 0;  // under as a percentage of exact_admitted (0 when that is 0)
};

// `admitted_at[i]`: when arrival i of `trace` was admitted (µs since the epoch, the deciding
// backend's clock), or kNotAdmitted; `exact[i]`: whether the exact model admitted it.
Judgement Judge(const Limit& limit, const Trace& trace, std::span<const int64_t> admitted_at,
                const std::vector<bool>& exact);

// The most cost units of `admissions` (sorted by time) in any span [t, t + span_us).
uint64_t MostInSpan(std::span<const Admission> admissions, int64_t span_us);

// consistency: eventual's bound (backend/hybrid/eventual.h, docs/hybrid.md) on a run: a key's
// over-admission in any window is at most what the other instances admitted in their busiest
// span of `span_us` (V + T + D). Per key, the bound taken is the sum over instances of each
// one's most units in such a span, less the smallest (the instance whose admission went over may
// be any one). `within`: every key's largest over-admission is under its bound.
struct EventualBound {
  uint64_t max_bound = 0;  // the largest key's bound, cost units
  bool within = true;
  uint64_t tightest_margin = UINT64_MAX;  // the least bound - over-admission, over the keys
};
EventualBound CheckEventualBound(const Limit& limit, const Trace& trace,
                                 std::span<const int64_t> admitted_at, int64_t span_us,
                                 size_t instances);

// The exact model: one in-process limiter (the library's, on a manual clock) deciding every
// arrival of `trace` in order, at `start_us` + its time. Returns whether each was admitted.
absl::StatusOr<std::vector<bool>> RunExactModel(const Limit& limit, const Trace& trace,
                                                int64_t start_us);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_ADMISSION_H_
