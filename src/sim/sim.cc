// RunSim: one run of the simulation, step by step (its steps are in the files sim_internal.h
// names), and --accuracy's run, which needs no Redis.
#include "sim/sim.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "fmt/format.h"
#include "sim/compare.h"
#include "sim/sim_internal.h"
#include "spdlog/spdlog.h"

namespace sluice::sim {
namespace {

using namespace std::chrono_literals;

backend::Consistency ConsistencyOf(Mode mode) {
  switch (mode) {
    case Mode::kLeased:
      return backend::Consistency::kLeased;
    case Mode::kEventual:
      return backend::Consistency::kEventual;
    case Mode::kExact:
      break;
  }
  return backend::Consistency::kExact;
}

}  // namespace

// --accuracy: the limit's exact model on the trace judged against the exact log, no Redis
// (sim/compare.h).
int RunAccuracy(const SimOptions& o, std::ostream& out, std::ostream& err) {
  // A fixed start (the trace's windows align to it as they would to a run's): the same options
  // give the same line.
  constexpr int64_t kStartUs = int64_t{1700000000} * 1000000;
  auto trace = MakeTrace(o, kStartUs);
  if (!trace.ok()) {
    err << "sim: " << trace.status().message() << "\n";
    return 2;
  }
  auto a = MeasureAccuracy(o.limit, *trace, kStartUs);
  if (!a.ok()) {
    err << "sim: " << a.status().message() << "\n";
    return 2;
  }
  const double per = a->decisions == 0 ? 0 : 100.0 / static_cast<double>(a->decisions);
  out << fmt::format(
             "{{\"accuracy\":true,\"trace\":{},\"limit\":\"{}\",\"decisions\":{},"
             "\"admitted\":{},\"false_allows\":{},\"false_denies\":{},"
             "\"false_allow_pct\":{:.4f},\"false_deny_pct\":{:.4f},\"wrong_pct\":{:.4f},"
             "\"most_in_window\":{},\"most_in_window_per_limit\":{:.3f}}}",
             Json(o.trace_name), DescribeLimit(o.limit), a->decisions, a->admitted, a->false_allows,
             a->false_denies, static_cast<double>(a->false_allows) * per,
             static_cast<double>(a->false_denies) * per,
             static_cast<double>(a->false_allows + a->false_denies) * per, a->most_in_window,
             static_cast<double>(a->most_in_window) /
                 static_cast<double>(std::max<uint64_t>(1, o.limit.requests)))
      << std::endl;
  return 0;
}

int RunSim(const SimOptions& o, std::ostream& out, std::ostream& err) {
  if (o.accuracy) return RunAccuracy(o, out, err);
  if (int status = CheckSimOptions(o, err); status != 0) return status;
  // Warnings only (e.g. Redis's eviction policy), on stderr as all logs are: stdout is the JSON
  // line.
  spdlog::set_level(spdlog::level::warn);

  InstanceConfig config = o.instance;
  Fleet fleet;
  if (int status = StartFleet(o, config, fleet, err); status != 0) return status;
  WarmUp(fleet.instances, o.limit, config.timeout_us);
  const int64_t redis_offset_us = RedisClockOffset(*fleet.probe);

  // The trace, for a start a little ahead (time to build it). Its times are in the steady clock
  // from `start`; the model and the windows see them in Redis's clock from `start_us`.
  const auto lead =
      300ms + std::chrono::nanoseconds(static_cast<int64_t>(800 * o.trace.rate * o.trace.seconds));
  const SteadyClock::time_point start = SteadyClock::now() + lead;
  const int64_t start_us = SystemClock::Get()->NowMicros() +
                           std::chrono::duration_cast<std::chrono::microseconds>(lead).count() +
                           redis_offset_us;
  auto trace = MakeTrace(o, start_us);
  if (!trace.ok()) {
    err << "sim: " << trace.status().message() << "\n";
    return 2;
  }
  const size_t n = trace->arrivals.size();
  const uint64_t limit_id = LimitId(o.limit);
  Playback play;
  play.items.reserve(n);
  for (const Arrival& a : trace->arrivals) {
    play.items.push_back(
        {.limit = &o.limit,
         .limit_id = limit_id,
         .key = trace->keys[a.key],
         .cost = a.cost,
         .sharing = {.on_failure = backend::FailureMode::kClosed,
                     .instances = static_cast<uint32_t>(o.instances),
                     .consistency = ConsistencyOf(o.instance.mode),
                     .hot_key_rate = o.instance.mode == Mode::kEventual ? o.cold_keys_rate : 0}});
  }
  play.answers.resize(n);
  play.records.resize(n);
  play.start = start;

  const Measured measured = PlayAndMeasure(o, *trace, fleet, play, config.timeout_us);
  const size_t sent = measured.sent;

  Results results = Collect(play, *trace, sent, start_us);
  std::vector<int64_t>& admitted_at = results.admitted_at;
  std::vector<int64_t>& latencies = results.latencies;
  const uint64_t errors = results.errors;
  const int64_t last_done_us = results.last_done_us;
  auto exact = RunExactModel(o.limit, *trace, start_us);
  if (!exact.ok()) {
    err << "sim: " << exact.status().message() << "\n";
    return 2;
  }
  // The decisions not sent are judged as not asked: the model does not see them either.
  for (size_t i = sent; i < n; ++i) (*exact)[i] = false;
  const Judgement judged = Judge(o.limit, *trace, admitted_at, *exact);
  if (!o.csv_dir.empty()) {
    if (auto s = WriteWindowsCsv(o, *trace, admitted_at, *exact, start_us); !s.ok()) {
      err << "sim: " << s.message() << "\n";
      return 2;
    }
  }
  PrintLine(o, *trace, admitted_at,
            {.sent = sent,
             .not_sent = n - sent,
             .errors = errors,
             .last_done_us = last_done_us,
             .work = measured.work,
             .executed = measured.executed,
             .judged = judged,
             .bound = std::nullopt,
             .bound_span_us = 0,
             .steady = measured.steady},
            latencies, out);
  return errors == 0 && sent == n ? 0 : 1;
}

}  // namespace sluice::sim
