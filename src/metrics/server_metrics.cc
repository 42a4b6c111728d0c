#include "metrics/server_metrics.h"

#include <algorithm>
#include <memory>
#include <utility>

namespace sluice::metrics {

std::vector<int64_t> ServerMetrics::DecisionLatencyBoundsUs() {
  return {1, 2, 5, 10, 20, 30, 50, 75, 100, 200, 500, 1000, 2500, 10000, 100000, 1000000};
}

namespace {

using StoreStats = ServerMetrics::StoreStats;
using ConfigStats = ServerMetrics::ConfigStats;

// The decisions: counts by domain, limit and outcome, near-limit admissions, latency.
absl::Status RegisterDecisions(Registry* registry, ServerMetrics::Sources& sources,
                               ServerMetrics& m) {
  {
    auto f = registry->AddCounter(
        {.name = "sluice_decisions_total",
         .help = "Rate limit decisions per applied limit, by domain, limit name and decision.",
         .label_names = {"domain", "limit", "decision"},
         .max_children = sources.max_decision_series});
    if (!f.ok()) return f.status();
    m.decisions = *f;
  }
  {
    auto f = registry->AddCounter(
        {.name = "sluice_near_limit_decisions_total",
         .help = "Admitted decisions that left the limit used past near_limit_ratio of it "
                 "(upstream's near_limit), by domain and limit name.",
         .label_names = {"domain", "limit"},
         .max_children = sources.max_decision_series});
    if (!f.ok()) return f.status();
    m.near_limit = *f;
  }
  {
    auto f = registry->AddCounter(
        {.name = "sluice_decision_reasons_total",
         .help = "Decisions per applied limit that were not a plain admission by the backend, by "
                 "domain, limit name and reason (over_limit, shadow, quota, failure_open, "
                 "failure_closed, failure_local, penalty).",
         .label_names = {"domain", "limit", "reason"},
         .max_children = sources.max_decision_series});
    if (!f.ok()) return f.status();
    m.reasons = *f;
  }
  {
    auto f = registry->AddHistogram(
        {.name = "sluice_decision_duration_seconds",
         .help = "Time the engine took to decide a request (all its limits)."},
        {.bounds = ServerMetrics::DecisionLatencyBoundsUs(), .unit_divisor = 1000000});
    if (!f.ok()) return f.status();
    m.decision_duration = (*f)->Get();
  }
  return absl::OkStatus();
}

// The HTTP server: connections and responses.
absl::Status RegisterHttp(Registry* registry, ServerMetrics::Sources& /*sources*/,
                          ServerMetrics& m) {
  {
    auto f = registry->AddGauge(
        {.name = "sluice_http_open_connections", .help = "HTTP connections open now."});
    if (!f.ok()) return f.status();
    m.http_open_connections = (*f)->Get();
  }
  {
    auto f = registry->AddCounter(
        {.name = "sluice_http_connections_total", .help = "HTTP connections accepted."});
    if (!f.ok()) return f.status();
    m.http_connections = (*f)->Get();
  }
  {
    auto f = registry->AddCounter(
        {.name = "sluice_http_connections_rejected_total",
         .help = "HTTP connections refused because max-connections were open."});
    if (!f.ok()) return f.status();
    m.http_connections_rejected = (*f)->Get();
  }
  {
    auto f = registry->AddCounter({.name = "sluice_http_requests_total",
                                   .help = "HTTP responses sent, by status code.",
                                   .label_names = {"code"},
                                   .max_children = 100});
    if (!f.ok()) return f.status();
    m.http_requests = *f;
  }
  return absl::OkStatus();
}

// The reverse proxy: outcomes, refunds, answers cut short.
absl::Status RegisterProxy(Registry* registry, ServerMetrics::Sources& /*sources*/,
                           ServerMetrics& m) {
  {
    auto f = registry->AddCounter(
        {.name = "sluice_proxy_requests_total",
         .help = "Reverse proxy requests by outcome: forwarded (the upstream answered), denied, "
                 "upstream_error (502), timeout (504), shaped_rejected (503: too many delayed), "
                 "client_gone (the client left during its shaping delay: not forwarded), "
                 "cancelled (503: still delayed, or no answer from the upstream, at the shutdown "
                 "deadline), held_refused (429: a concurrency limit had no slot free; 503: "
                 "Redis could not answer under failure_mode closed).",
         .label_names = {"outcome"},
         .max_children = 16});
    if (!f.ok()) return f.status();
    m.proxy_requests = *f;
  }
  {
    auto f = registry->AddCounter(
        {.name = "sluice_proxy_refunds_total",
         .help = "Reverse proxy requests whose consumed quota was given back (refund_on)."});
    if (!f.ok()) return f.status();
    m.proxy_refunds = (*f)->Get();
  }
  {
    auto f = registry->AddCounter(
        {.name = "sluice_proxy_answers_cut_total",
         .help = "Reverse proxy answers whose body was cut short, by the side that cut it: "
                 "upstream (it closed, broke off or was silent mid-body), client (it went away "
                 "mid-body).",
         .label_names = {"side"},
         .max_children = 4});
    if (!f.ok()) return f.status();
    m.proxy_answers_cut = *f;
  }
  return absl::OkStatus();
}

// The in-memory store, read from sources.store on each scrape.
absl::Status RegisterStore(Registry* registry, ServerMetrics::Sources& sources,
                           ServerMetrics& /*m*/) {
  if (!sources.store) return absl::OkStatus();
  {
    auto store = std::make_shared<std::function<StoreStats()>>(std::move(sources.store));
    const std::pair<const char*, double StoreStats::*> gauges[] = {
        {"sluice_store_entries", &StoreStats::entries},
        {"sluice_store_memory_bytes", &StoreStats::memory_bytes},
        {"sluice_store_overflow_states", &StoreStats::overflow_states}};
    const char* gauge_help[] = {
        "Limiter states held by the in-memory store (at most store.max_entries).",
        "Memory of the in-memory store's tables.",
        ("Overflow states held by the in-memory store (store.on_full shared): one per limit and "
         "shard that ran out of room.")};
    for (size_t i = 0; i < 3; ++i) {
      auto field = gauges[i].second;
      if (absl::Status s = registry->AddCallbackGauge(gauges[i].first, gauge_help[i],
                                                      [store, field] { return (*store)().*field; });
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = registry->AddCallbackCounter("sluice_store_reclaimed_total",
                                                      "Idle limiter states reclaimed.",
                                                      [store] { return (*store)().reclaimed; });
        !s.ok()) {
      return s;
    }
    if (absl::Status s = registry->AddCallback(
            {.name = "sluice_store_no_room_decisions_total",
             .help = "Decisions of keys new to the in-memory store that found it full (no live "
                     "state is ever dropped for room), by store.on_full mode and decision.",
             .label_names = {"on_full", "decision"}},
            MetricType::kCounter,
            [store] {
              const StoreStats stats = (*store)();
              return std::vector<CallbackSample>{
                  {{stats.on_full, "allowed"}, stats.no_room_allowed},
                  {{stats.on_full, "denied"}, stats.no_room_denied}};
            });
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// The configuration: its version and reloads, from sources.config.
absl::Status RegisterConfig(Registry* registry, ServerMetrics::Sources& sources,
                            ServerMetrics& /*m*/) {
  if (!sources.config) return absl::OkStatus();
  {
    auto config = std::make_shared<std::function<ConfigStats()>>(std::move(sources.config));
    if (absl::Status s = registry->AddCallback(
            {.name = "sluice_config_info",
             .help = "The active configuration: always 1, labelled with its version.",
             .label_names = {"version"}},
            MetricType::kGauge,
            [config] {
              std::vector<CallbackSample> out;
              ConfigStats stats = (*config)();
              if (!stats.version.empty()) out.push_back({{std::move(stats.version)}, 1});
              return out;
            });
        !s.ok()) {
      return s;
    }
    if (absl::Status s = registry->AddCallback({.name = "sluice_config_reloads_total",
                                                .help = "Configuration reloads, by result.",
                                                .label_names = {"result"}},
                                               MetricType::kCounter,
                                               [config] {
                                                 const ConfigStats stats = (*config)();
                                                 return std::vector<CallbackSample>{
                                                     {{"failure"}, stats.reload_failures},
                                                     {{"success"}, stats.reload_successes}};
                                               });
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// The configured limits' sizes, from sources.limits.
absl::Status RegisterLimits(Registry* registry, ServerMetrics::Sources& sources,
                            ServerMetrics& /*m*/) {
  if (!sources.limits) return absl::OkStatus();
  using LimitSample = ServerMetrics::LimitSample;
  auto limits =
      std::make_shared<std::function<std::vector<LimitSample>()>>(std::move(sources.limits));
  const auto add = [&](const char* name, const char* help, double LimitSample::*field) {
    return registry->AddCallback(
        {.name = name, .help = help, .label_names = {"domain", "limit"}}, MetricType::kGauge,
        [limits, field] {
          std::vector<CallbackSample> out;
          for (LimitSample& l : (*limits)()) {
            out.push_back({{std::move(l.domain), std::move(l.limit)}, l.*field});
          }
          return out;
        });
  };
  if (absl::Status s = add("sluice_limit",
                           "Requests per window of each configured limit, by domain and limit "
                           "(labelled as sluice_decisions_total labels it).",
                           &LimitSample::requests);
      !s.ok()) {
    return s;
  }
  return add("sluice_limit_window_seconds", "The window of each configured limit, in seconds.",
             &LimitSample::window_seconds);
}

// Concurrency limits: acquisitions by result, and holds in use (from sources.holds).
absl::Status RegisterConcurrency(Registry* registry, ServerMetrics::Sources& sources,
                                 ServerMetrics& m) {
  auto f = registry->AddCounter(
      {.name = "sluice_concurrency_requests_total",
       .help = "Holds asked of concurrency limits (POST /v1/acquire, the reverse proxy), by "
               "domain, limit and result: granted or refused (429).",
       .label_names = {"domain", "limit", "result"},
       .max_children = 10000});
  if (!f.ok()) return f.status();
  m.concurrency = *f;
  if (!sources.holds) return absl::OkStatus();
  auto holds = std::make_shared<std::function<std::vector<ServerMetrics::HoldsSample>()>>(
      std::move(sources.holds));
  return registry->AddCallback(
      {.name = "sluice_concurrency_holds",
       .help = "Holds in use of each concurrency limit, by domain and limit (the memory store's; "
               "with Redis, holds are spread over its keys and not counted here).",
       .label_names = {"domain", "limit"}},
      MetricType::kGauge, [holds] {
        std::vector<CallbackSample> out;
        for (ServerMetrics::HoldsSample& h : (*holds)()) {
          out.push_back({{std::move(h.domain), std::move(h.limit)}, h.holds});
        }
        return out;
      });
}

// Uptime and start time, from sources.now_us.
absl::Status RegisterUptime(Registry* registry, ServerMetrics::Sources& sources,
                            ServerMetrics& /*m*/) {
  if (!sources.now_us) return absl::OkStatus();
  {
    auto now_us = std::make_shared<std::function<int64_t()>>(std::move(sources.now_us));
    const int64_t start_us = sources.start_time_us;
    if (absl::Status s = registry->AddCallbackGauge(
            "sluice_uptime_seconds", "Seconds since the server started.",
            [now_us, start_us] {
              return static_cast<double>(std::max<int64_t>((*now_us)() - start_us, 0)) / 1e6;
            });
        !s.ok()) {
      return s;
    }
    if (absl::Status s = registry->AddCallbackGauge(
            "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
            [start_us] { return static_cast<double>(start_us) / 1e6; });
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerMetrics> ServerMetrics::Register(Registry* registry, Sources sources) {
  ServerMetrics m;
  for (auto step : {RegisterDecisions, RegisterHttp, RegisterProxy, RegisterStore, RegisterConfig,
                    RegisterLimits, RegisterConcurrency, RegisterUptime}) {
    if (absl::Status s = step(registry, sources, m); !s.ok()) return s;
  }
  return m;
}

}  // namespace sluice::metrics
