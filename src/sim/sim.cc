#include "sim/sim.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/redis/scripts.h"
#include "cli/bench/redis_stats.h"
#include "fmt/format.h"
#include "redis/client.h"
#include "sim/admission.h"
#include "sim/compare.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "util/json_string.h"
#include "util/percentile.h"

namespace sluice::sim {
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kMaxInstances = 64;
// Arrivals not sent by the end of the run plus this are dropped (the machine cannot keep up).
constexpr int64_t kLateLimitUs = 1000000;

int64_t MicrosSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - start).count();
}

// What the completion of one decision records.
struct Record {
  int64_t done_us = -1;       // steady µs from the start of the run; -1: not answered
  int64_t decided_at_us = 0;  // Outcome::decided_at_us (the backend's clock, µs since the epoch)
  bool admitted = false;
  bool failed = false;  // an error, or answered by the failure policy (closed: denied)
};

// One run's decisions: items, answers and records, one slot per arrival, written by that
// arrival's completion (on any thread) and read after every instance is gone.
struct Playback {
  std::vector<backend::Item> items;
  std::vector<Decision> answers;
  std::vector<Record> records;
  SteadyClock::time_point start;
  std::atomic<size_t> answered{0};

  void Complete(size_t i, const backend::Outcome& outcome) {
    Record& r = records[i];
    r.done_us = MicrosSince(start);
    r.decided_at_us = outcome.decided_at_us;
    r.admitted = outcome.status.ok() && outcome.allowed;
    r.failed = !outcome.status.ok() || outcome.fell_back;
    answered.fetch_add(1, std::memory_order_release);
  }
};

// Redis's clock minus this machine's wall clock (µs), from TIME; 0 if it cannot be read.
int64_t RedisClockOffset(redis::Client& client) {
  const int64_t before = SystemClock::Get()->NowMicros();
  auto reply = tools::CallRedis(client, "", {"TIME"});
  const int64_t after = SystemClock::Get()->NowMicros();
  if (!reply.ok() || reply->elements.size() != 2) return 0;
  int64_t seconds = 0, micros = 0;
  const std::string& s = reply->elements[0].str;
  const std::string& u = reply->elements[1].str;
  std::from_chars(s.data(), s.data() + s.size(), seconds);
  std::from_chars(u.data(), u.data() + u.size(), micros);
  return seconds * 1000000 + micros - (before + after) / 2;
}

// The states Redis read and wrote: the items decided in scripts. Each decision of the sim is one
// item, so every decision that reached a Redis store and was not refused by its breaker is one.
// Leased mode adds the leases taken and the calls giving units back (each reads and writes one
// state); eventual mode the states its merges read and wrote.
uint64_t StateOps(const stack::Stack::RedisCounters& work) {
  return work.decide_calls - work.refused + work.leases + work.lease_returns +
         work.eventual_states_synced;
}

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

// One look (cost 0) on each instance, awaited, so that every instance has its connections and
// Redis has the script before the run: a cold first call (NOSCRIPT, then the script loaded)
// would be decided late, in Redis's next window.
void WarmUp(const std::vector<std::unique_ptr<stack::Stack>>& instances, const Limit& limit,
            int64_t timeout_us) {
  struct Look {
    backend::Item item;
    Decision answer;
    std::atomic<bool> done{false};
  };
  // Shared with the completion, which may come after the wait below gave up.
  std::vector<std::shared_ptr<Look>> looks;
  for (const auto& instance : instances) {
    auto look = std::make_shared<Look>();
    look->item = {.limit = &limit, .limit_id = LimitId(limit), .key = "sim-warm-up", .cost = 0};
    instance->backend().Decide(
        std::span(&look->item, 1), SystemClock::Get()->NowMicros(), std::span(&look->answer, 1),
        [look](const backend::Outcome&) { look->done.store(true, std::memory_order_release); });
    looks.push_back(std::move(look));
  }
  const auto deadline = SteadyClock::now() + std::chrono::microseconds(timeout_us) + 1s;
  for (const auto& look : looks) {
    while (!look->done.load(std::memory_order_acquire) && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
  }
}

// The trace the options name, for a run starting at `start_us` (the backend's clock).
absl::StatusOr<Trace> MakeTrace(const SimOptions& o, int64_t start_us) {
  TraceOptions trace_options = o.trace;
  trace_options.window_us = o.limit.window_us;
  trace_options.window_phase_us = start_us % o.limit.window_us;
  absl::StatusOr<Trace> trace;
  if (trace_options.kind == TraceKind::kFile) {
    std::ifstream file(o.trace_name);
    if (!file || std::filesystem::is_directory(o.trace_name)) {
      return absl::InvalidArgumentError(fmt::format("--trace: cannot read {}", o.trace_name));
    }
    trace = ReadTrace(file, trace_options);
  } else {
    trace = GenerateTrace(trace_options);
  }
  if (trace.ok()) SpreadOverInstances(*trace, static_cast<uint32_t>(o.instances), o.spread);
  return trace;
}

}  // namespace

absl::StatusOr<Limit> ParseLimitSpec(std::string_view text) {
  const auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        fmt::format("--limit '{}': {} (expected ALGORITHM:N/WINDOW[:burst=B], e.g. "
                    "fixed_window:100/1s)",
                    text, why));
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return fail("no ':'");
  auto algorithm = ParseAlgorithm(text.substr(0, colon));
  if (!algorithm.ok()) return fail(std::string(algorithm.status().message()));
  std::string_view rest = text.substr(colon + 1);
  std::string_view burst;
  if (const size_t c = rest.find(':'); c != std::string_view::npos) {
    burst = rest.substr(c + 1);
    rest = rest.substr(0, c);
    if (!burst.starts_with("burst=")) return fail("the third part must be burst=B");
    burst.remove_prefix(6);
  }
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return fail("no '/' between N and WINDOW");
  Limit limit;
  limit.algorithm = *algorithm;
  const std::string_view n = rest.substr(0, slash);
  if (auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), limit.requests);
      ec != std::errc() || p != n.data() + n.size()) {
    return fail("N is not a non-negative integer");
  }
  auto window = ParseDuration(rest.substr(slash + 1));
  if (!window.ok()) return fail(std::string(window.status().message()));
  limit.window_us = *window;
  if (!burst.empty() || text.ends_with("burst=")) {
    uint64_t b = 0;
    if (auto [p, ec] = std::from_chars(burst.data(), burst.data() + burst.size(), b);
        ec != std::errc() || p != burst.data() + burst.size()) {
      return fail("B is not a non-negative integer");
    }
    limit.burst = b;
  }
  if (absl::Status s = ValidateLimit(limit); !s.ok()) return fail(std::string(s.message()));
  return limit;
}

// The options RunSim cannot run with: 2 (a message on `err`), else 0.
int CheckSimOptions(const SimOptions& o, std::ostream& err) {
  if (o.instances < 1 || o.instances > kMaxInstances) {
    err << "sim: --instances must be 1.." << kMaxInstances << "\n";
    return 2;
  }
  if (o.instance.redis_urls.empty()) {
    err << "sim: --redis URL is required\n";
    return 2;
  }
  if (auto s = redis::CheckExactRange(o.limit); !s.ok()) {
    err << "sim: --limit: " << s.message() << "\n";
    return 2;
  }
  if (o.warmup_seconds < 0 || (o.warmup_seconds > 0 && o.warmup_seconds >= o.trace.seconds)) {
    err << "sim: --warmup must be at least 0 and less than --seconds\n";
    return 2;
  }
  return 0;
}

// The instances of a run and the connections that watch Redis.
struct Fleet {
  std::vector<std::unique_ptr<stack::Stack>> instances;
  std::unique_ptr<redis::Client> probe;  // INFO and TIME
  std::vector<std::unique_ptr<redis::Client>> stats_clients;
};

// Builds the instances (sets config.key_prefix) and the watching connections: 0, or RunSim's exit
// status with a message on `err`.
int StartFleet(const SimOptions& o, InstanceConfig& config, Fleet& fleet, std::ostream& err) {
  // The instances, all on the same states: one key prefix for the run, new for every run.
  config.key_prefix =
      fmt::format("sluice-sim:{}:{}:", getpid(), SystemClock::Get()->MonotonicMicros());
  for (int i = 0; i < o.instances; ++i) {
    auto instance = BuildInstance(config, SystemClock::Get());
    if (!instance.ok()) {
      err << "sim: " << instance.status().message() << "\n";
      return absl::IsUnimplemented(instance.status()) ? 2 : 1;
    }
    fleet.instances.push_back(*std::move(instance));
  }
  // A connection of its own to each server for INFO and TIME.
  redis::Client::Options client_options;
  client_options.cluster = config.cluster;
  for (const std::string& url : config.redis_urls) {
    auto endpoint = redis::ParseUrl(url);
    if (!endpoint.ok()) {
      err << "sim: " << endpoint.status().message() << "\n";
      return 2;
    }
    client_options.seeds.push_back(*endpoint);
  }
  auto probe = redis::Client::Create(client_options);
  if (!probe.ok()) {
    err << "sim: " << probe.status().message() << "\n";
    return 1;
  }
  for (int i = 0; i < 500 && !(*probe)->Ready(); ++i) std::this_thread::sleep_for(10ms);
  if (!(*probe)->Ready()) {
    err << "sim: cannot reach " << config.redis_urls.front() << ": " << (*probe)->last_error()
        << "\n";
    return 1;
  }
  fleet.stats_clients = tools::RedisStatsClients(**probe, client_options);
  fleet.probe = *std::move(probe);
  return 0;
}

// Plays the trace open loop from `start`: every arrival due is sent to its instance, then a
// sleep until the next one; stops once it is kLateLimitUs behind. Returns how many were sent.
size_t PlayOpenLoop(const Trace& trace, const std::vector<std::unique_ptr<stack::Stack>>& instances,
                    Playback& play, SteadyClock::time_point start, int64_t duration_us) {
  const size_t n = trace.arrivals.size();
  size_t sent = 0;
  while (sent < n) {
    const int64_t now = MicrosSince(start);
    if (now > duration_us + kLateLimitUs) break;
    for (; sent < n && trace.arrivals[sent].t_us <= now; ++sent) {
      Playback* p = &play;
      const size_t i = sent;
      instances[trace.arrivals[i].instance]->backend().Decide(
          std::span(&play.items[i], 1), SystemClock::Get()->NowMicros(),
          std::span(&play.answers[i], 1),
          [p, i](const backend::Outcome& outcome) { p->Complete(i, outcome); });
    }
    if (sent < n) {
      std::this_thread::sleep_for(std::chrono::microseconds(trace.arrivals[sent].t_us - now));
    }
  }
  return sent;
}

// What the instances asked of Redis since `before`.
stack::Stack::RedisCounters WorkSince(const std::vector<std::unique_ptr<stack::Stack>>& instances,
                                      const std::vector<stack::Stack::RedisCounters>& before) {
  stack::Stack::RedisCounters work;
  for (size_t i = 0; i < instances.size(); ++i) {
    const stack::Stack::RedisCounters now = instances[i]->GetRedisCounters();
    work.decide_calls += now.decide_calls - before[i].decide_calls;
    work.refused += now.refused - before[i].refused;
    work.script_calls += now.script_calls - before[i].script_calls;
    work.over_limit_cache_hits += now.over_limit_cache_hits - before[i].over_limit_cache_hits;
    work.lease_local += now.lease_local - before[i].lease_local;
    work.leases += now.leases - before[i].leases;
    work.lease_returns += now.lease_returns - before[i].lease_returns;
    work.eventual_local += now.eventual_local - before[i].eventual_local;
    work.eventual_leased += now.eventual_leased - before[i].eventual_leased;
    work.leases_fenced += now.leases_fenced - before[i].leases_fenced;
    work.leases_empty += now.leases_empty - before[i].leases_empty;
    work.eventual_syncs += now.eventual_syncs - before[i].eventual_syncs;
    work.eventual_states_synced += now.eventual_states_synced - before[i].eventual_states_synced;
    work.eventual_max_round_trip_us =
        std::max(work.eventual_max_round_trip_us, now.eventual_max_round_trip_us);
  }
  return work;
}

namespace {

// What the decisions sent came to, from their records.
struct Results {
  std::vector<int64_t> admitted_at;  // Redis's time of each admission; kNotAdmitted
  std::vector<int64_t> latencies;    // µs, of those answered
  uint64_t errors = 0;               // failed or never answered
  int64_t last_done_us = 1;          // the last answer, from the start
};

Results Collect(const Playback& play, const Trace& trace, size_t sent, int64_t start_us) {
  Results r;
  r.admitted_at.assign(trace.arrivals.size(), kNotAdmitted);
  r.latencies.reserve(sent);
  for (size_t i = 0; i < sent; ++i) {
    const Record& record = play.records[i];
    if (record.failed || record.done_us < 0) ++r.errors;
    if (record.done_us < 0) continue;
    r.last_done_us = std::max(r.last_done_us, record.done_us);
    r.latencies.push_back(record.done_us - trace.arrivals[i].t_us);
    if (record.admitted) {
      r.admitted_at[i] =
          record.decided_at_us > 0 ? record.decided_at_us : start_us + record.done_us;
    }
  }
  return r;
}

}  // namespace

namespace {

// Redis's work once the warm-up is over (--warmup): the decisions due from then on, and what the
// instances asked and Redis did from that moment to the end of the run.
struct Steady {
  size_t decisions = 0;
  stack::Stack::RedisCounters work;
  tools::RedisExecuted executed;
};

// The instances' stores' counters and Redis's INFO at one moment, for WorkSince and
// RedisExecutedBetween.
struct WorkSnapshot {
  std::vector<stack::Stack::RedisCounters> counters;
  tools::RedisSnapshot info;
};

WorkSnapshot TakeWorkSnapshot(const Fleet& fleet) {
  WorkSnapshot s;
  for (const auto& instance : fleet.instances) s.counters.push_back(instance->GetRedisCounters());
  s.info = tools::TakeRedisSnapshot(fleet.stats_clients);
  return s;
}

// The snapshot when the warm-up ends, taken by a thread of its own so that the open loop does not
// wait for INFO. Join `reader` before reading `at_end`.
struct WarmUpEnd {
  WorkSnapshot at_end;
  std::thread reader;
};

void ReadWhenWarmUpEnds(const Fleet& fleet, SteadyClock::time_point when, WarmUpEnd& end) {
  end.reader = std::thread([&fleet, when, &end] {
    std::this_thread::sleep_until(when);
    end.at_end = TakeWorkSnapshot(fleet);
  });
}

}  // namespace

namespace {

// What a run's JSON line reports, besides the options.
struct Line {
  size_t sent, not_sent;
  uint64_t errors;
  int64_t last_done_us;
  stack::Stack::RedisCounters work;
  tools::RedisExecuted executed;
  Judgement judged;
  std::optional<EventualBound> bound;  // eventual mode
  int64_t bound_span_us = 0;
  std::optional<Steady> steady;  // --warmup
};

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

namespace {

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

}  // namespace

namespace {

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

namespace {

// What Redis did during the run, and after its warm-up.
struct Measured {
  size_t sent = 0;
  stack::Stack::RedisCounters work;
  tools::RedisExecuted executed;
  std::optional<Steady> steady;  // --warmup
};

// Plays the trace from play.start and waits for its answers (at most the Redis timeout plus 5 s),
// reading the work before, after and, with --warmup, when the warm-up ends. Ends with the
// instances gone: every completion has run (those still waiting failed), so the records are final.
Measured PlayAndMeasure(const SimOptions& o, const Trace& trace, Fleet& fleet, Playback& play,
                        int64_t timeout_us) {
  const WorkSnapshot before = TakeWorkSnapshot(fleet);
  const auto warmup_us = static_cast<int64_t>(o.warmup_seconds * 1e6);
  WarmUpEnd warm_end;
  if (warmup_us > 0) {
    ReadWhenWarmUpEnds(fleet, play.start + std::chrono::microseconds(warmup_us), warm_end);
  }
  if (const auto late = SteadyClock::now() - play.start; late > 0ms) {
    spdlog::warn(
        "the trace starts {} ms late (building it took longer): the first decisions' "
        "latencies include that",
        std::chrono::duration_cast<std::chrono::milliseconds>(late).count());
  }
  std::this_thread::sleep_until(play.start);
  Measured m;
  m.sent = PlayOpenLoop(trace, fleet.instances, play, play.start,
                        static_cast<int64_t>(o.trace.seconds * 1e6));
  const auto answer_deadline = SteadyClock::now() + std::chrono::microseconds(timeout_us) + 5s;
  while (play.answered.load(std::memory_order_acquire) < m.sent &&
         SteadyClock::now() < answer_deadline) {
    std::this_thread::sleep_for(2ms);
  }
  // Joined first: a recorded trace may end before its warm-up does.
  if (warm_end.reader.joinable()) warm_end.reader.join();
  const tools::RedisSnapshot info_after = tools::TakeRedisSnapshot(fleet.stats_clients);
  m.work = WorkSince(fleet.instances, before.counters);
  m.executed = tools::RedisExecutedBetween(before.info, info_after);
  if (warmup_us > 0) {
    Steady steady{.work = WorkSince(fleet.instances, warm_end.at_end.counters),
                  .executed = tools::RedisExecutedBetween(warm_end.at_end.info, info_after)};
    for (size_t i = 0; i < m.sent; ++i)
      if (trace.arrivals[i].t_us >= warmup_us) ++steady.decisions;
    m.steady = steady;
  }
  fleet.instances.clear();
  return m;
}

}  // namespace

int RunSim(const SimOptions& o, std::ostream& out, std::ostream& err) {
  if (o.accuracy) return RunAccuracy(o, out, err);
  if (int status = CheckSimOptions(o, err); status != 0) return status;
  // Logs (e.g. Redis's eviction policy warning) go to stderr: stdout is the JSON line.
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "sim", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
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
