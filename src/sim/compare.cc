#include "sim/compare.h"

#include <algorithm>
#include <deque>
#include <vector>

#include "sim/admission.h"

namespace sluice::sim {

absl::StatusOr<Accuracy> MeasureAccuracy(const Limit& limit, const Trace& trace, int64_t start_us) {
  auto admitted = RunExactModel(limit, trace, start_us);
  if (!admitted.ok()) return admitted.status();
  // Per key, its admissions of the last W (oldest first) and their cost.
  struct Recent {
    std::deque<Admission> admissions;
    uint64_t units = 0;
  };
  std::vector<Recent> recent(trace.keys.size());
  std::vector<std::vector<Admission>> by_key(trace.keys.size());
  Accuracy a;
  a.decisions = trace.arrivals.size();
  for (size_t i = 0; i < trace.arrivals.size(); ++i) {
    const Arrival& arrival = trace.arrivals[i];
    Recent& r = recent[arrival.key];
    while (!r.admissions.empty() && r.admissions.front().t_us <= arrival.t_us - limit.window_us) {
      r.units -= r.admissions.front().cost;
      r.admissions.pop_front();
    }
    const bool exact = r.units + arrival.cost <= limit.requests;
    const bool allowed = (*admitted)[i];
    a.false_allows += allowed && !exact ? 1 : 0;
    a.false_denies += !allowed && exact ? 1 : 0;
    if (!allowed) continue;
    a.admitted += arrival.cost;
    r.admissions.push_back({.t_us = arrival.t_us, .cost = arrival.cost});
    r.units += arrival.cost;
    by_key[arrival.key].push_back({.t_us = arrival.t_us, .cost = arrival.cost});
  }
  for (const auto& admissions : by_key) {
    a.most_in_window = std::max(a.most_in_window, MostInSpan(admissions, limit.window_us));
  }
  return a;
}

}  // namespace sluice::sim
