// sluice's own metric set: the families `sluice serve` exposes on its admin listener's
// GET /metrics, registered on a Registry (metrics/registry.h) at once. Every frontend counts into
// them (HTTP directly; the gRPC port through the HTTP service's RecordDecision).
//
// Thread safety: Register() is called once, before serving; the pointers it fills in are then
// safe for concurrent use (see registry.h).

#ifndef SLUICE_METRICS_SERVER_METRICS_H_
#define SLUICE_METRICS_SERVER_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "metrics/registry.h"

namespace sluice::metrics {

// The families `sluice serve` exposes on the admin listener's GET /metrics.
//
//   sluice_decisions_total{domain,limit,decision}   counter    per configured limit that applied
//       decision: "allowed" | "denied" (a shadow limit that would deny included) |
//       "quota_exceeded" (a quota-mode limit over its limit, which does not deny by itself);
//       limit: the limit's `name`, else "N-per-WINDOW" — never a descriptor key or value.
//   sluice_near_limit_decisions_total{domain,limit}  counter    admitted past near_limit_ratio
//   sluice_decision_reasons_total{domain,limit,reason}  counter  the decisions that were not a
//       plain admission by the backend, by why: "over_limit" (denied), "shadow" (would have
//       denied), "quota" (a quota-mode limit over its limit), "failure_open" | "failure_closed" |
//       "failure_local" (the backend failed; the domain's failure_mode decided)
//   sluice_decision_duration_seconds                 histogram  engine decision time (observe µs)
//   sluice_store_entries                             gauge      live limiter states (callback)
//   sluice_store_memory_bytes                        gauge      table memory (callback)
//   sluice_store_overflow_states                     gauge      on_full shared states (callback)
//   sluice_store_reclaimed_total                     counter    idle states reclaimed (callback)
//   sluice_store_no_room_decisions_total{on_full,decision}  counter  new keys that found the store
//       full (callback); on_full: the store's mode, decision: "allowed" | "denied". No live state
//       is ever dropped for room, so there is no evictions counter.
//   sluice_config_info{version}                      gauge      1, labelled with the active version
//   sluice_config_reloads_total{result}              counter    result: "success" | "failure"
//   sluice_limit{domain,limit}                       gauge      requests per window of each
//       configured limit, labelled as sluice_decisions_total labels it (callback)
//   sluice_limit_window_seconds{domain,limit}        gauge      that limit's window (callback)
//   sluice_http_open_connections                     gauge      connections open now
//   sluice_http_connections_total                    counter    connections accepted
//   sluice_http_connections_rejected_total           counter    refused at max-connections
//   sluice_http_requests_total{code}                 counter    responses by HTTP status code
//   sluice_uptime_seconds                            gauge      since start (callback)
//   process_start_time_seconds                       gauge      unix time of start (callback)
//
// Register() registers all of them at once; callback families whose source is not set are left
// out. The returned pointers live as long as the registry.
struct ServerMetrics {
  struct StoreStats {
    double entries = 0;
    double memory_bytes = 0;
    double reclaimed = 0;
    double overflow_states = 0;
    // Decisions of new keys that found the store full, under the store's `on_full` mode.
    std::string on_full = "shared";
    double no_room_allowed = 0;
    double no_room_denied = 0;
  };
  struct ConfigStats {
    std::string version;  // empty: no config loaded yet (no sluice_config_info series)
    double reload_successes = 0;
    double reload_failures = 0;
  };
  // One configured limit (engine::ConfiguredLimits).
  struct LimitSample {
    std::string domain, limit;
    double requests = 0;
    double window_seconds = 0;
  };
  // One concurrency limit's holds in use, in this process's store.
  struct HoldsSample {
    std::string domain, limit;
    double holds = 0;
  };
  struct Sources {
    std::function<StoreStats()> store;
    std::function<ConfigStats()> config;
    std::function<std::vector<LimitSample>()> limits;
    std::function<std::vector<HoldsSample>()> holds;  // none: no sluice_concurrency_holds
    // Microseconds since the unix epoch (inject the server's Clock), and the start time on it.
    std::function<int64_t()> now_us;
    int64_t start_time_us = 0;
    // Label sets of sluice_decisions_total before the `other` series: one per (domain, limit
    // name, decision) in the config, so make it comfortably above the config's size.
    size_t max_decision_series = 10000;
  };

  static absl::StatusOr<ServerMetrics> Register(Registry* registry, Sources sources);

  // Decision latency buckets, µs: 1 µs .. 1 s, dense below 100 µs where the target is.
  static std::vector<int64_t> DecisionLatencyBoundsUs();

  Family<Counter>* decisions = nullptr;    // WithLabels({domain, limit_name, decision})
  Family<Counter>* near_limit = nullptr;   // WithLabels({domain, limit_name})
  Family<Counter>* reasons = nullptr;      // WithLabels({domain, limit_name, reason})
  Histogram* decision_duration = nullptr;  // Observe(elapsed_us)
  // Acquisitions of concurrency limits' holds: WithLabels({domain, limit, result}), result
  // granted or refused.
  Family<Counter>* concurrency = nullptr;
  Gauge* http_open_connections = nullptr;
  Counter* http_connections = nullptr;
  Counter* http_connections_rejected = nullptr;
  Family<Counter>* http_requests = nullptr;  // WithLabels({"200"}); cache per status code
  // Reverse proxy: WithLabels({outcome}), outcome one of forwarded, denied, upstream_error,
  // timeout, shaped_rejected, client_gone.
  Family<Counter>* proxy_requests = nullptr;
  Counter* proxy_refunds = nullptr;  // requests whose consumed quota was given back
  // Answers whose body was cut short: WithLabels({side}), side one of upstream (it closed,
  // broke off or was silent mid-body), client (it went away mid-body).
  Family<Counter>* proxy_answers_cut = nullptr;
};

}  // namespace sluice::metrics

#endif  // SLUICE_METRICS_SERVER_METRICS_H_
