// sim's report: the run's JSON line (with eventual mode's and --warmup's fields) and --csv's
// windows.csv.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "sim/sim_internal.h"
#include "util/json_string.h"
#include "util/percentile.h"

namespace sluice::sim {
namespace {

// The states Redis read and wrote: the items decided in scripts. Each decision of the sim is one
// item, so every decision that reached a Redis store and was not refused by its breaker is one.
// Leased mode adds the leases taken and the calls giving units back (each reads and writes one
// state); eventual mode the states its merges read and wrote.
uint64_t StateOps(const stack::Stack::RedisCounters& work) {
  return work.decide_calls - work.refused + work.leases + work.lease_returns +
         work.eventual_states_synced;
}

std::string ResultLine(const SimOptions& o, const Line& l, std::vector<int64_t>& latencies) {
  const double per = l.sent == 0 ? 0 : 1.0 / static_cast<double>(l.sent);
  return fmt::format(
      "{{\"mode\":\"{}\",\"instances\":{},\"trace\":{},\"limit\":\"{}\","
      "\"over_limit_cache\":\"{}\",\"decisions\":{},\"not_sent\":{},\"errors\":{},"
      "\"decisions_per_s\":{:.0f},\"redis_script_calls_per_decision\":{:.4f},"
      "\"redis_state_ops_per_decision\":{:.4f},\"redis_commands_per_decision\":{:.4f},"
      "\"redis_cpu_us_per_decision\":{:.3f},\"admitted\":{},\"exact_admitted\":{},"
      "\"over_admission_max\":{},\"over_admission_total\":{},\"under_admission\":{},"
      "\"under_admission_pct\":{:.3f},\"p50_us\":{},\"p99_us\":{},"
      "\"over_limit_cache_hits\":{},\"lease_local_decisions\":{},\"leases\":{},"
      "\"leases_empty\":{}}}",
      ModeName(o.instance.mode), o.instances, Json(o.trace_name), DescribeLimit(o.limit),
      o.instance.over_limit_cache ? "on" : "off", l.sent, l.not_sent, l.errors,
      static_cast<double>(l.sent) * 1e6 / static_cast<double>(l.last_done_us),
      static_cast<double>(l.work.script_calls) * per, static_cast<double>(StateOps(l.work)) * per,
      static_cast<double>(l.executed.commands) * per, l.executed.cpu_seconds * 1e6 * per,
      l.judged.admitted, l.judged.exact_admitted, l.judged.over.max, l.judged.over.total,
      l.judged.under, l.judged.under_pct, util::Percentile(latencies, 0.50),
      util::Percentile(latencies, 0.99), l.work.over_limit_cache_hits, l.work.lease_local,
      l.work.leases, l.work.leases_empty);
}

// Eventual mode's fields, spliced before the line's closing brace: its decisions on copies, its
// requests sent to leases (cold keys), its merges, the longest merge (D) and the bound of
// eventual.h over spans of V + T + D.
std::string EventualFields(const Line& l) {
  if (!l.bound) return "";
  return fmt::format(
      ",\"eventual_local_decisions\":{},\"eventual_leased_decisions\":{},"
      "\"eventual_fenced_leases\":{},\"eventual_syncs\":{},"
      "\"sync_round_trip_max_us\":{},\"eventual_bound_span_us\":{},\"eventual_bound_max\":{},"
      "\"eventual_within_bound\":{}",
      l.work.eventual_local, l.work.eventual_leased, l.work.leases_fenced, l.work.eventual_syncs,
      l.work.eventual_max_round_trip_us, l.bound_span_us, l.bound->max_bound,
      l.bound->within ? "true" : "false");
}

// --warmup's fields, spliced before the line's closing brace.
std::string SteadyFields(const SimOptions& o, const Line& l) {
  if (!l.steady) return "";
  const Steady& s = *l.steady;
  const double per = s.decisions == 0 ? 0 : 1.0 / static_cast<double>(s.decisions);
  return fmt::format(
      ",\"warmup_s\":{},\"steady_decisions\":{},\"steady_redis_script_calls_per_decision\":{:.4f},"
      "\"steady_redis_state_ops_per_decision\":{:.4f},\"steady_redis_cpu_us_per_decision\":{:.3f}",
      o.warmup_seconds, s.decisions, static_cast<double>(s.work.script_calls) * per,
      static_cast<double>(StateOps(s.work)) * per, s.executed.cpu_seconds * 1e6 * per);
}

}  // namespace

std::string Json(std::string_view text) {
  std::string out;
  util::AppendJsonString(&out, text);
  return out;
}

// DIR/windows.csv: for the keys with the most arrivals, what was admitted in each epoch-aligned
// window of the run, by the instances and by the exact model, next to the allowance.
absl::Status WriteWindowsCsv(const SimOptions& o, const Trace& trace,
                             std::span<const int64_t> admitted_at, const std::vector<bool>& exact,
                             int64_t start_us) {
  constexpr size_t kKeys = 5;
  constexpr int64_t kMaxWindows = 20000;
  std::error_code ec;
  std::filesystem::create_directories(o.csv_dir, ec);
  std::ofstream csv(std::filesystem::path(o.csv_dir) / "windows.csv");
  if (!csv) return absl::InvalidArgumentError(fmt::format("--csv: cannot write in {}", o.csv_dir));
  std::vector<uint64_t> arrivals_per_key(trace.keys.size());
  for (const Arrival& a : trace.arrivals) ++arrivals_per_key[a.key];
  std::vector<uint32_t> keys(trace.keys.size());
  for (uint32_t k = 0; k < keys.size(); ++k) keys[k] = k;
  const size_t top = std::min(kKeys, keys.size());
  std::partial_sort(
      keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(top), keys.end(),
      [&](uint32_t a, uint32_t b) { return arrivals_per_key[a] > arrivals_per_key[b]; });
  keys.resize(top);
  const int64_t w = o.limit.window_us;
  const int64_t first = start_us / w;
  const int64_t last = (start_us + static_cast<int64_t>(o.trace.seconds * 1e6) + kLateLimitUs) / w;
  const int64_t windows = std::min(kMaxWindows, last - first + 1);
  const uint64_t allowance = WindowRuleFor(o.limit).allowance;
  csv << "mode,instances,key,window_start_s,admitted,exact_admitted,allowance\n";
  for (const uint32_t key : keys) {
    std::vector<uint64_t> admitted(static_cast<size_t>(windows)),
        model(static_cast<size_t>(windows));
    const auto add = [&](std::vector<uint64_t>& per_window, int64_t t_us, uint64_t cost) {
      const int64_t index = t_us / w - first;
      if (index >= 0 && index < windows) per_window[static_cast<size_t>(index)] += cost;
    };
    for (size_t i = 0; i < trace.arrivals.size(); ++i) {
      const Arrival& a = trace.arrivals[i];
      if (a.key != key) continue;
      if (admitted_at[i] != kNotAdmitted) add(admitted, admitted_at[i], a.cost);
      if (exact[i]) add(model, start_us + a.t_us, a.cost);
    }
    for (int64_t i = 0; i < windows; ++i) {
      const auto s = static_cast<size_t>(i);
      csv << fmt::format("{},{},{},{:.6f},{},{},{}\n", ModeName(o.instance.mode), o.instances,
                         trace.keys[key], static_cast<double>((first + i) * w - start_us) / 1e6,
                         admitted[s], model[s], allowance);
    }
  }
  if (!csv) return absl::InternalError(fmt::format("--csv: error writing in {}", o.csv_dir));
  return absl::OkStatus();
}

// Prints the run's JSON line; in eventual mode with the bound checked on the run.
void PrintLine(const SimOptions& o, const Trace& trace, std::span<const int64_t> admitted_at,
               Line line, std::vector<int64_t>& latencies, std::ostream& out) {
  if (o.instance.mode == Mode::kEventual) {
    // V + T + D, V = 2 T (Eventual::Options::max_age_us's default).
    line.bound_span_us = 3 * o.instance.sync_interval_us + line.work.eventual_max_round_trip_us;
    line.bound = CheckEventualBound(o.limit, trace, admitted_at, line.bound_span_us,
                                    static_cast<size_t>(o.instances));
  }
  std::string json = ResultLine(o, line, latencies);
  json.insert(json.size() - 1, EventualFields(line) + SteadyFields(o, line));
  out << json << std::endl;
}

}  // namespace sluice::sim
