#include "metrics/server_metrics.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/exposition_testing.h"
#include "metrics/registry.h"
#include "tests/support/units.h"

namespace sluice::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using sluice::testing::kSecond;
using sluice::testing::kT0;

ServerMetrics::Sources FixedSources() {
  return {
      .store =
          [] {
            return ServerMetrics::StoreStats{.entries = 3,
                                             .memory_bytes = 4096,
                                             .reclaimed = 2,
                                             .overflow_states = 1,
                                             .on_full = "shared",
                                             .no_room_allowed = 5,
                                             .no_room_denied = 7};
          },
      .config =
          [] {
            return ServerMetrics::ConfigStats{"abc123", 2, 1};
          },
      .limits =
          [] {
            return std::vector<ServerMetrics::LimitSample>{{"api", "10-per-1m", 10, 60},
                                                           {"api", "daily", 1000, 86400}};
          },
      .holds =
          [] {
            return std::vector<ServerMetrics::HoldsSample>{{"api", "reports", 2}};
          },
      .now_us = [] { return kT0 + 90 * kSecond + kSecond / 2; },
      .start_time_us = kT0,
  };
}

TEST(ServerMetrics, FreshRegistryExposesTheDocumentedFamilies) {
  Registry registry;
  auto metrics = ServerMetrics::Register(&registry, FixedSources());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::string hist = "sluice_decision_duration_seconds";
  std::string buckets;
  for (const char* le :
       {"1e-06", "2e-06", "5e-06", "1e-05", "2e-05", "3e-05", "5e-05", "7.5e-05", "0.0001",
        "0.0002", "0.0005", "0.001", "0.0025", "0.01", "0.1", "1", "+Inf"}) {
    buckets += hist + "_bucket{le=\"" + le + "\"} 0\n";
  }
  EXPECT_EQ(registry.Render(),
            "# HELP process_start_time_seconds Start time of the process since unix epoch in "
            "seconds.\n"
            "# TYPE process_start_time_seconds gauge\n"
            "process_start_time_seconds 1700000000\n"
            "# HELP sluice_concurrency_holds Holds in use of each concurrency limit, by domain "
            "and limit (the memory store's; with Redis, holds are spread over its keys and not "
            "counted here).\n"
            "# TYPE sluice_concurrency_holds gauge\n"
            "sluice_concurrency_holds{domain=\"api\",limit=\"reports\"} 2\n"
            "# HELP sluice_config_info The active configuration: always 1, labelled with its "
            "version.\n"
            "# TYPE sluice_config_info gauge\n"
            "sluice_config_info{version=\"abc123\"} 1\n"
            "# HELP sluice_config_reloads_total Configuration reloads, by result.\n"
            "# TYPE sluice_config_reloads_total counter\n"
            "sluice_config_reloads_total{result=\"failure\"} 1\n"
            "sluice_config_reloads_total{result=\"success\"} 2\n"
            "# HELP sluice_decision_duration_seconds Time the engine took to decide a request "
            "(all its limits).\n"
            "# TYPE sluice_decision_duration_seconds histogram\n" +
                buckets +
                "sluice_decision_duration_seconds_sum 0\n"
                "sluice_decision_duration_seconds_count 0\n"
                "# HELP sluice_http_connections_rejected_total HTTP connections refused because "
                "max-connections were open.\n"
                "# TYPE sluice_http_connections_rejected_total counter\n"
                "sluice_http_connections_rejected_total 0\n"
                "# HELP sluice_http_connections_total HTTP connections accepted.\n"
                "# TYPE sluice_http_connections_total counter\n"
                "sluice_http_connections_total 0\n"
                "# HELP sluice_http_open_connections HTTP connections open now.\n"
                "# TYPE sluice_http_open_connections gauge\n"
                "sluice_http_open_connections 0\n"
                "# HELP sluice_limit Requests per window of each configured limit, by domain "
                "and limit (labelled as sluice_decisions_total labels it).\n"
                "# TYPE sluice_limit gauge\n"
                "sluice_limit{domain=\"api\",limit=\"10-per-1m\"} 10\n"
                "sluice_limit{domain=\"api\",limit=\"daily\"} 1000\n"
                "# HELP sluice_limit_window_seconds The window of each configured limit, in "
                "seconds.\n"
                "# TYPE sluice_limit_window_seconds gauge\n"
                "sluice_limit_window_seconds{domain=\"api\",limit=\"10-per-1m\"} 60\n"
                "sluice_limit_window_seconds{domain=\"api\",limit=\"daily\"} 86400\n"
                "# HELP sluice_proxy_refunds_total Reverse proxy requests whose consumed quota "
                "was given back (refund_on).\n"
                "# TYPE sluice_proxy_refunds_total counter\n"
                "sluice_proxy_refunds_total 0\n"
                "# HELP sluice_store_entries Limiter states held by the in-memory store (at "
                "most store.max_entries).\n"
                "# TYPE sluice_store_entries gauge\n"
                "sluice_store_entries 3\n"
                "# HELP sluice_store_memory_bytes Memory of the in-memory store's tables.\n"
                "# TYPE sluice_store_memory_bytes gauge\n"
                "sluice_store_memory_bytes 4096\n"
                "# HELP sluice_store_no_room_decisions_total Decisions of keys new to the "
                "in-memory store that found it full (no live state is ever dropped for room), by "
                "store.on_full mode and decision.\n"
                "# TYPE sluice_store_no_room_decisions_total counter\n"
                "sluice_store_no_room_decisions_total{on_full=\"shared\",decision=\"allowed\"} 5\n"
                "sluice_store_no_room_decisions_total{on_full=\"shared\",decision=\"denied\"} 7\n"
                "# HELP sluice_store_overflow_states Overflow states held by the in-memory store "
                "(store.on_full shared): one per limit and shard that ran out of room.\n"
                "# TYPE sluice_store_overflow_states gauge\n"
                "sluice_store_overflow_states 1\n"
                "# HELP sluice_store_reclaimed_total Idle limiter states reclaimed.\n"
                "# TYPE sluice_store_reclaimed_total counter\n"
                "sluice_store_reclaimed_total 2\n"
                "# HELP sluice_uptime_seconds Seconds since the server started.\n"
                "# TYPE sluice_uptime_seconds gauge\n"
                "sluice_uptime_seconds 90.5\n");
}

TEST(ServerMetrics, UnsetSourcesLeaveTheirFamiliesOut) {
  Registry registry;
  auto metrics = ServerMetrics::Register(&registry, {});
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::string text = registry.Render();
  EXPECT_THAT(text, Not(HasSubstr("sluice_store_")));
  EXPECT_THAT(text, Not(HasSubstr("sluice_config_")));
  EXPECT_THAT(text, Not(HasSubstr("uptime")));
  EXPECT_THAT(text, HasSubstr("\nsluice_http_connections_total 0\n"));
  // Registering twice in one registry is a caller error, reported.
  EXPECT_EQ(ServerMetrics::Register(&registry, {}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

// A registry as a busy server would have it: every family with data, awkward label values, an
// overflowed family. The promtool check (tests/promtool_check.sh) runs this test with
// SLUICE_METRICS_DUMP_DIR set and lints the files it writes there.
std::string RealisticExposition(bool fresh) {
  Registry registry;
  ServerMetrics::Sources sources = FixedSources();
  sources.max_decision_series = 8;
  auto metrics = ServerMetrics::Register(&registry, std::move(sources));
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  if (!metrics.ok() || fresh) return registry.Render();
  ServerMetrics& m = *metrics;
  for (const char* domain : {"api", "web", "ünïcode", "we\"ird\\dom\nain"}) {
    for (const char* decision : {"allowed", "denied"}) {
      m.decisions->WithLabels({domain, "per_ip", decision})->Inc(7);
    }
  }
  for (int i = 0; i < 100; ++i) {
    m.decisions->WithLabels({"flood", std::to_string(i), "allowed"})->Inc();  // over the cap
  }
  for (int64_t us : {0, 1, 3, 12, 40, 49, 51, 80, 150, 900, 3000, 2000000}) {
    m.decision_duration->Observe(us);
  }
  m.http_connections->Inc(12);
  m.http_open_connections->Set(3);
  m.http_connections_rejected->Inc();
  for (const char* code : {"200", "429", "400", "431", "413", "502"}) {
    m.http_requests->WithLabels({code})->Inc(5);
  }
  for (const char* outcome :
       {"forwarded", "denied", "upstream_error", "timeout", "shaped_rejected", "client_gone"}) {
    m.proxy_requests->WithLabels({outcome})->Inc(3);
  }
  m.proxy_refunds->Inc(2);
  for (const char* side : {"upstream", "client"}) m.proxy_answers_cut->WithLabels({side})->Inc();
  auto extra = registry.AddHistogram({.name = "sluice_upstream_response_seconds",
                                      .help = "Extra: a labelled histogram.",
                                      .label_names = {"upstream"}},
                                     {.bounds = {1000, 10000, 100000}, .unit_divisor = kSecond});
  EXPECT_TRUE(extra.ok());
  if (extra.ok()) {
    (*extra)->WithLabels({"http://127.0.0.1:9000"})->Observe(4321);
    (*extra)->WithLabels({"backup"})->Observe(123456);
  }
  return registry.Render();
}

TEST(ServerMetrics, RealisticExpositionHasUniqueSeries) {
  const std::string busy = RealisticExposition(false);
  const std::string fresh = RealisticExposition(true);
  ExpectUniqueSeries(busy);
  ExpectUniqueSeries(fresh);
  EXPECT_THAT(busy, HasSubstr("sluice_decisions_total{domain=\"other\",limit=\"other\","
                              "decision=\"other\"} 100\n"));
  EXPECT_THAT(busy, HasSubstr("sluice_decision_duration_seconds_count 12\n"));
  EXPECT_THAT(busy, HasSubstr("sluice_decision_duration_seconds_sum 2.004286\n"));

  if (const char* dir = std::getenv("SLUICE_METRICS_DUMP_DIR")) {
    for (const auto& [file, text] :
         {std::pair<std::string, std::string>{"busy.prom", busy}, {"fresh.prom", fresh}}) {
      std::ofstream out(std::string(dir) + "/" + file, std::ios::binary);
      out << text;
      ASSERT_TRUE(out.good()) << dir << "/" << file;
    }
  }
}

}  // namespace
}  // namespace sluice::metrics
