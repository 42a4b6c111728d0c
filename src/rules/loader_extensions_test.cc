// The loader (loader.h) on sluice's extensions of upstream's format: algorithms, bursts and
// windows, consistency, hot keys, lists of limits, plans and clients files, domain settings, the
// http section and the settings file; and the state id each of a node's limits carries from load.

#include <cstdint>
#include <string>
#include <vector>

#include "backend/limit_id.h"
#include "cli/default_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "rules/loader_testing.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

using test::Child;
using test::Errors;
using test::Joined;
using test::kPlans;
using test::kSecondUs;
using test::MustLoad;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::TempDir;

TEST(LoaderExtensionsTest, AlgorithmBurstWindowAndRequests) {
  auto config = MustLoad(R"yaml(domain: ext
descriptors:
  - key: a
    rate_limit: {algorithm: token_bucket, requests: 10, window: 1s, burst: 20}
  - key: b
    rate_limit: {algorithm: gcra, requests_per_unit: 5, window: 1h30m}
  - key: c
    rate_limit: {algorithm: leaky_bucket, requests: 3, window: 250ms, burst: 0}
  - key: d
    rate_limit: {algorithm: sliding_log, requests: 4, unit: minute}
  - key: e
    rate_limit: {algorithm: sliding_window, requests: 6, window: 30s}
  - key: f
    rate_limit: {algorithm: fixed_window, requests: 0, window: 1d}
  - key: g
    rate_limit: {requests: 9, window: 1w}
)yaml");
  ASSERT_NE(config, nullptr);
  const RuleNode& root = config->FindDomain("ext")->root;
  ASSERT_THAT(root.children, SizeIs(7));
  const Limit& a = Child(root, 0)->limits[0].limit;
  EXPECT_EQ(a.algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(a.requests, 10u);
  EXPECT_EQ(a.window_us, kSecondUs);
  EXPECT_EQ(a.burst, std::optional<uint64_t>(20));
  EXPECT_EQ(Child(root, 0)->limits[0].unit, "");  // window: has no RLS unit
  const Limit& b = Child(root, 1)->limits[0].limit;
  EXPECT_EQ(b.algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(b.window_us, 5400 * kSecondUs);
  EXPECT_EQ(b.burst, std::nullopt);
  const Limit& c = Child(root, 2)->limits[0].limit;
  EXPECT_EQ(c.algorithm, Algorithm::kLeakyBucket);
  EXPECT_EQ(c.window_us, 250000);
  EXPECT_EQ(c.burst, std::optional<uint64_t>(0));
  EXPECT_EQ(Child(root, 3)->limits[0].limit.algorithm, Algorithm::kSlidingLog);
  EXPECT_EQ(Child(root, 3)->limits[0].limit.window_us, 60 * kSecondUs);
  EXPECT_EQ(Child(root, 4)->limits[0].limit.algorithm, Algorithm::kSlidingWindow);
  EXPECT_EQ(Child(root, 5)->limits[0].limit.requests, 0u);
  EXPECT_EQ(Child(root, 6)->limits[0].limit.algorithm, Algorithm::kFixedWindow);  // the default
  EXPECT_EQ(Child(root, 6)->limits[0].limit.window_us, int64_t{7} * 86400 * kSecondUs);
}

TEST(LoaderExtensionsTest, ConsistencyPerDomainAndPerLimit) {
  auto config = MustLoad(R"yaml(domain: hybrid
consistency: leased
descriptors:
  - key: a
    rate_limit: {requests: 10, window: 1s}
  - key: b
    rate_limit: {requests: 10, window: 1s, consistency: exact}
  - key: c
    limits: [{requests: 5, window: 1m, consistency: leased}]
)yaml");
  ASSERT_NE(config, nullptr);
  const Domain* domain = config->FindDomain("hybrid");
  EXPECT_EQ(domain->consistency, Consistency::kLeased);
  EXPECT_EQ(Child(domain->root, 0)->limits[0].consistency, std::nullopt);  // the domain's
  EXPECT_EQ(Child(domain->root, 1)->limits[0].consistency, Consistency::kExact);
  EXPECT_EQ(Child(domain->root, 2)->limits[0].consistency, Consistency::kLeased);
  EXPECT_EQ(MustLoad("domain: d\n")->FindDomain("d")->consistency, Consistency::kExact);
  EXPECT_EQ(MustLoad("domain: d\nconsistency: eventual\n")->FindDomain("d")->consistency,
            Consistency::kEventual);
  EXPECT_THAT(Errors("domain: d\nconsistency: loose\n"),
              ElementsAre("t.yaml:2:14: unknown consistency 'loose' (exact, leased or eventual)"));
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n"
                     "    rate_limit: {requests: 1, window: 1s, consistency: loose}\n"),
              ElementsAre("t.yaml:4:56: unknown consistency 'loose' (exact, leased or eventual)"));
}

TEST(LoaderExtensionsTest, HotKeysAndHotKeyRate) {
  const auto plain_config = MustLoad("domain: d\n");  // (kept: the domain lives in it)
  const Domain* plain = plain_config->FindDomain("d");
  EXPECT_FALSE(plain->lease_hot_keys);  // exact: no promotion
  EXPECT_EQ(plain->hot_key_rate, 1000u);
  auto config = MustLoad("domain: d\nhot_keys: lease\nhot_key_rate: 200\n");
  ASSERT_NE(config, nullptr);
  EXPECT_TRUE(config->FindDomain("d")->lease_hot_keys);
  EXPECT_EQ(config->FindDomain("d")->hot_key_rate, 200u);
  EXPECT_FALSE(MustLoad("domain: d\nhot_keys: exact\n")->FindDomain("d")->lease_hot_keys);
  EXPECT_FALSE(plain->lease_cold_keys);  // eventual: every key on copies
  EXPECT_TRUE(MustLoad("domain: d\ncold_keys: lease\n")->FindDomain("d")->lease_cold_keys);
  EXPECT_FALSE(MustLoad("domain: d\ncold_keys: copy\n")->FindDomain("d")->lease_cold_keys);
  EXPECT_THAT(Errors("domain: d\ncold_keys: leased\n"),
              ElementsAre("t.yaml:2:12: unknown cold_keys 'leased' (copy or lease)"));
  EXPECT_THAT(Errors("domain: d\nhot_keys: leased\n"),
              ElementsAre("t.yaml:2:11: unknown hot_keys 'leased' (exact or lease)"));
  EXPECT_THAT(Errors("domain: d\nhot_key_rate: 0\n"),
              ElementsAre("t.yaml:2:15: hot_key_rate must be positive (requests per second)"));
  EXPECT_THAT(Errors("domain: d\nhot_key_rate: -5\n"),
              ElementsAre("t.yaml:2:15: hot_key_rate must not be negative, got -5"));
  EXPECT_THAT(Errors("domain: d\nhot_key_rate: fast\n"),
              ElementsAre("t.yaml:2:15: hot_key_rate must be an integer, got 'fast'"));
  EXPECT_THAT(Errors("domain: d\nhot_key_rate: 2000000000\n"),
              ElementsAre("t.yaml:2:15: hot_key_rate must be at most 1000000000, got 2000000000"));
}

TEST(LoaderExtensionsTest, LimitsList) {
  auto config = MustLoad(R"yaml(domain: multi
descriptors:
  - key: api_key
    shadow_mode: false
    limits:
      - {requests: 10, window: 1s, algorithm: token_bucket, burst: 20, name: burst}
      - {requests_per_unit: 1000, unit: day, name: daily, shadow_mode: true}
)yaml");
  ASSERT_NE(config, nullptr);
  const Domain* multi = config->FindDomain("multi");
  const RuleNode* node = Child(multi->root, 0);
  EXPECT_TRUE(node->has_rate_limit);
  ASSERT_THAT(node->limits, SizeIs(2));
  EXPECT_EQ(node->limits[0].name, "burst");
  EXPECT_EQ(node->limits[0].limit.algorithm, Algorithm::kTokenBucket);
  EXPECT_FALSE(node->limits[0].shadow_mode);
  EXPECT_EQ(node->limits[1].name, "daily");
  EXPECT_EQ(node->limits[1].limit.algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(node->limits[1].limit.window_us, 86400 * kSecondUs);
  EXPECT_EQ(node->limits[1].unit, "day");
  EXPECT_TRUE(node->limits[1].shadow_mode);
  EXPECT_EQ(multi->limit_count, 2u);
  EXPECT_EQ(config->limit_count, 2u);
}

TEST(LoaderExtensionsTest, PlansDefaultPlanAndPlanFrom) {
  auto config = MustLoad(kPlans);
  ASSERT_NE(config, nullptr);
  const Domain* plans = config->FindDomain("plans");
  ASSERT_THAT(plans->plans, SizeIs(3));
  EXPECT_EQ(plans->default_plan, "free");
  EXPECT_THAT(plans->plans.at("free").limits, SizeIs(2));
  EXPECT_EQ(plans->plans.at("pro").limits[0].limit.burst, std::optional<uint64_t>(200));
  const RuleNode* api_key = Child(*Child(plans->root, 0), 0);
  EXPECT_EQ(api_key->plan_from, "plan");
  EXPECT_TRUE(api_key->has_rate_limit);
  EXPECT_THAT(api_key->limits, IsEmpty());
  EXPECT_EQ(plans->limit_count, 4u);  // plan limits count once each
}

TEST(LoaderExtensionsTest, ClientsCsvIsLoadedRelativeToTheDomainFile) {
  TempDir dir;
  dir.Write("rules/plans.yaml", std::string(kPlans) + "clients: clients.csv\n");
  dir.Write("rules/clients.csv",
            "key,plan\n"
            "# comment\n"
            "\n"
            "k1,pro\r\n"
            "k2,enterprise\n"
            "k1,free\n"  // a later row wins
            "k3,free");  // no final newline
  const LoadResult result = LoadConfig({dir.Path("rules")});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  const Domain* plans = result.config->FindDomain("plans");
  ASSERT_NE(plans->clients, nullptr);
  EXPECT_THAT(*plans->clients, SizeIs(3));
  EXPECT_EQ(plans->clients->Find("k1")->name, "free");
  EXPECT_EQ(plans->clients->Find("k2")->name, "enterprise");
  EXPECT_EQ(plans->clients->Find("k3")->name, "free");
}

TEST(LoaderExtensionsTest, DomainSettings) {
  auto config = MustLoad(R"yaml(domain: d
failure_mode: local
count_denied: true
shadow_mode: true
)yaml");
  ASSERT_NE(config, nullptr);
  const Domain* d = config->FindDomain("d");
  EXPECT_EQ(d->failure_mode, FailureMode::kLocal);
  EXPECT_EQ(d->count_denied, std::optional<bool>(true));
  EXPECT_TRUE(d->shadow_mode);

  config = MustLoad("domain: d\nfailure_mode: closed\ncount_denied: false\n");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->FindDomain("d")->failure_mode, FailureMode::kClosed);
  EXPECT_EQ(config->FindDomain("d")->count_denied, std::optional<bool>(false));

  config = MustLoad("domain: d\n");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->FindDomain("d")->failure_mode, FailureMode::kOpen);
  EXPECT_EQ(config->FindDomain("d")->count_denied, std::nullopt);  // the global setting applies
  EXPECT_FALSE(config->FindDomain("d")->shadow_mode);
}

TEST(LoaderExtensionsTest, HttpSection) {
  auto config = MustLoad(R"yaml(domain: web
http:
  deny_status: 403
  trusted_proxies: [10.0.0.0/8, "::1", 192.168.1.1]
  upstream: http://127.0.0.1:9000
  refund_on: [5xx, connect_error, timeout]
  routes:
    - match: {prefix: /api, methods: [GET, POST]}
      rate_limits:
        - actions:
            - request_headers: {header_name: X-Api-Key, descriptor_key: api_key}
            - remote_address: {}
            - generic_key: {descriptor_value: api, descriptor_key: generic_key}
            - path: {descriptor_key: path}
            - method: {descriptor_key: method}
        - actions:
            - request_headers: {header_name: X-Tenant, descriptor_key: tenant, skip_if_absent: true}
            - generic_key: {descriptor_value: v}
            - remote_address:
            - path:
            - method: {}
    - match: {path: /exact}
      rate_limits:
        - actions: [{generic_key: {descriptor_value: exact}}]
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 1}
)yaml");
  ASSERT_NE(config, nullptr);
  const Domain* web = config->FindDomain("web");
  ASSERT_TRUE(web->http.has_value());
  const HttpSection& http = *web->http;
  EXPECT_EQ(http.deny_status, 403);
  ASSERT_THAT(http.trusted_proxies, SizeIs(3));
  EXPECT_EQ(http.trusted_proxies[0].prefix_bits, 96 + 8);
  EXPECT_EQ(http.trusted_proxies[1].prefix_bits, 128);
  EXPECT_EQ(http.trusted_proxies[2].prefix_bits, 128);
  EXPECT_EQ(http.upstream, "http://127.0.0.1:9000");
  EXPECT_EQ(http.upstream_host, "127.0.0.1");
  EXPECT_EQ(http.upstream_port, 9000);
  EXPECT_THAT(http.refund_on, ElementsAre("5xx", "connect_error", "timeout"));
  ASSERT_THAT(http.routes, SizeIs(2));
  const HttpRoute& api = http.routes[0];
  EXPECT_EQ(api.prefix, "/api");
  EXPECT_EQ(api.path, "");
  EXPECT_THAT(api.methods, ElementsAre("GET", "POST"));
  ASSERT_THAT(api.rate_limits, SizeIs(2));
  const std::vector<HttpAction>& first = api.rate_limits[0];
  ASSERT_THAT(first, SizeIs(5));
  EXPECT_EQ(first[0].kind, HttpAction::Kind::kRequestHeaders);
  EXPECT_EQ(first[0].header_name, "X-Api-Key");
  EXPECT_EQ(first[0].descriptor_key, "api_key");
  EXPECT_EQ(first[1].kind, HttpAction::Kind::kRemoteAddress);
  EXPECT_EQ(first[1].descriptor_key, "remote_address");
  EXPECT_EQ(first[2].kind, HttpAction::Kind::kGenericKey);
  EXPECT_EQ(first[2].descriptor_value, "api");
  EXPECT_EQ(first[3].kind, HttpAction::Kind::kPath);
  EXPECT_EQ(first[4].kind, HttpAction::Kind::kMethod);
  // Defaults of the descriptor keys (Envoy's: generic_key, remote_address; sluice's: path, method).
  const std::vector<HttpAction>& second = api.rate_limits[1];
  ASSERT_THAT(second, SizeIs(5));
  EXPECT_TRUE(second[0].skip_if_absent);
  EXPECT_EQ(second[1].descriptor_key, "generic_key");
  EXPECT_EQ(second[2].descriptor_key, "remote_address");
  EXPECT_EQ(second[3].descriptor_key, "path");
  EXPECT_EQ(second[4].descriptor_key, "method");
  EXPECT_EQ(http.routes[1].path, "/exact");
  EXPECT_EQ(http.routes[1].prefix, "");
}

TEST(LoaderExtensionsTest, HttpSectionDefaults) {
  auto config = MustLoad("domain: web\nhttp:\n  routes:\n    - rate_limits: []\n");
  ASSERT_NE(config, nullptr);
  const HttpSection& http = *config->FindDomain("web")->http;
  EXPECT_EQ(http.deny_status, 429);
  ASSERT_THAT(http.routes, SizeIs(1));
  EXPECT_EQ(http.routes[0].prefix, "/");  // no match: every path
  EXPECT_FALSE(MustLoad("domain: web\n")->FindDomain("web")->http.has_value());
}

TEST(LoaderExtensionsTest, SettingsFileWithoutDomain) {
  auto config = MustLoad(R"yaml(# sluice.yaml
rules: ./rules
listen: 0.0.0.0:8080
admin: {listen: 127.0.0.1:9999, token_file: /etc/sluice/token}
grpc: {listen: 127.0.0.1:8181, threads: 3}
threads: 4
backend: redis
redis:
  url: redis://user:pass@127.0.0.1:6379/0
  key_prefix: "x:"
  timeout: 25ms
  instances: 3
  buckets: 65536
  lease_interval: 50ms
  window_lease_life: 5m
  sync_interval: 250ms
store: {max_entries: 1000, on_full: deny}
headers: [ietf]
http: {max_header_bytes: 8192, max_body_bytes: 4096, max_key_bytes: 512, upstream_timeout: 2500ms,
       max_delayed: 77, shutdown_timeout: 3s}
count_denied: true
shadow_mode: true
unknown_domain: allow
rls: {response_headers: true, unknown_domain: error}
)yaml");
  ASSERT_NE(config, nullptr);
  EXPECT_THAT(config->domains, IsEmpty());
  const Settings& s = config->settings;
  EXPECT_EQ(s.file, "t.yaml");
  EXPECT_EQ(s.rules_path, "./rules");
  EXPECT_EQ(s.listen, "0.0.0.0:8080");
  EXPECT_EQ(s.admin_listen, "127.0.0.1:9999");
  EXPECT_EQ(s.admin_token_file, "/etc/sluice/token");
  EXPECT_EQ(s.grpc_listen, "127.0.0.1:8181");
  EXPECT_EQ(s.grpc_threads, 3);
  EXPECT_EQ(s.threads, 4);
  EXPECT_EQ(s.backend, "redis");
  EXPECT_EQ(s.redis_url, "redis://user:pass@127.0.0.1:6379/0");
  EXPECT_EQ(s.redis_key_prefix, "x:");
  EXPECT_EQ(s.redis_timeout_us, 25000);
  EXPECT_EQ(s.local_instances, 3);
  EXPECT_EQ(s.redis_buckets, 65536u);
  EXPECT_EQ(s.redis_lease_interval_us, 50000);
  EXPECT_EQ(s.redis_window_lease_life_us, 300000000);
  EXPECT_EQ(s.redis_sync_interval_us, 250000);
  EXPECT_EQ(s.max_entries, 1000u);
  EXPECT_EQ(s.on_full, OnFull::kDeny);
  EXPECT_THAT(s.headers, ElementsAre("ietf"));
  EXPECT_FALSE(s.x_ratelimit_headers);
  EXPECT_TRUE(s.ietf_headers);
  EXPECT_EQ(s.max_header_bytes, 8192u);
  EXPECT_EQ(s.max_body_bytes, 4096u);
  EXPECT_EQ(s.max_key_bytes, 512u);
  EXPECT_EQ(s.upstream_timeout_us, 2500000);
  EXPECT_EQ(s.shutdown_timeout_us, 3000000);
  EXPECT_EQ(s.max_delayed, 77u);
  EXPECT_TRUE(s.count_denied);
  EXPECT_TRUE(s.shadow_mode);
  EXPECT_TRUE(s.allow_unknown_domain);
  EXPECT_TRUE(s.rls_response_headers);
  EXPECT_TRUE(s.rls_reject_unknown_domain);
}

TEST(LoaderExtensionsTest, RlsResponseHeadersIetfOrUpstreams) {
  auto config =
      MustLoad("rls:\n  response_headers: upstream\n  header_names: {limit: A, reset: C}\n");
  ASSERT_NE(config, nullptr);
  EXPECT_TRUE(config->settings.rls_upstream_headers);
  EXPECT_FALSE(config->settings.rls_response_headers);
  EXPECT_EQ(config->settings.rls_limit_header, "A");
  EXPECT_EQ(config->settings.rls_remaining_header, "RateLimit-Remaining");
  EXPECT_EQ(config->settings.rls_reset_header, "C");
  config = MustLoad("rls: {response_headers: ietf}\n");
  ASSERT_NE(config, nullptr);
  EXPECT_TRUE(config->settings.rls_response_headers);
  EXPECT_FALSE(config->settings.rls_upstream_headers);
}

TEST(LoaderExtensionsTest, UpstreamUrls) {
  const auto upstream = [](const std::string& url) -> std::pair<std::string, int> {
    auto config = MustLoad("domain: d\nhttp:\n  upstream: \"" + url + "\"\n");
    if (config == nullptr) return {"<error>", -1};
    const HttpSection& http = *config->FindDomain("d")->http;
    return {http.upstream_host, http.upstream_port};
  };
  EXPECT_EQ(upstream("http://127.0.0.1:9000"), std::make_pair(std::string("127.0.0.1"), 9000));
  EXPECT_EQ(upstream("http://127.0.0.1:9000/"), std::make_pair(std::string("127.0.0.1"), 9000));
  EXPECT_EQ(upstream("http://backend"), std::make_pair(std::string("backend"), 80));
  EXPECT_EQ(upstream("http://[::1]:8081"), std::make_pair(std::string("::1"), 8081));
  EXPECT_EQ(upstream("http://[::1]"), std::make_pair(std::string("::1"), 80));
}

TEST(LoaderExtensionsTest, EmbeddedDefaultConfigLoads) {
  const LoadResult result = LoadConfigText("<embedded default>", cli::kDefaultConfig);
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  const Domain* d = result.config->FindDomain("default");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->default_plan, "free");
  EXPECT_THAT(d->plans, SizeIs(3));
  EXPECT_GT(result.config->limit_count, 0u);
}

// A node's limits carry their state identity from load (the engine keys state by it); a plan's
// limits do not, since theirs depends on the node that uses the plan.
TEST(LoaderTest, NodeLimitsCarryTheirStateIdFromLoad) {
  const auto config = MustLoad(R"(
domain: d
plans:
  free: {limits: [{name: f, requests: 5, window: 1s}]}
default_plan: free
descriptors:
  - key: a
    value: x
    limits:
      - {name: fast, requests: 10, window: 1s}
      - {name: slow, requests: 1000, window: 1d}
    descriptors:
      - key: b
        rate_limit: {requests: 3, window: 1m}
  - key: c
    plan_from: c
)");
  ASSERT_NE(config, nullptr);
  const Domain* d = config->FindDomain("d");
  ASSERT_NE(d, nullptr);
  const RuleNode& a = *d->root.children[0];
  ASSERT_THAT(a.limits, SizeIs(2));
  for (const LimitRule& rule : a.limits) {
    EXPECT_EQ(rule.state_id, backend::RuleLimitId(a.path, "", rule.limit)) << rule.name;
  }
  EXPECT_NE(a.limits[0].state_id, a.limits[1].state_id);
  const RuleNode& b = *a.children[0];
  ASSERT_THAT(b.limits, SizeIs(1));
  EXPECT_EQ(b.limits[0].state_id, backend::RuleLimitId(b.path, "", b.limits[0].limit));
  EXPECT_NE(b.limits[0].state_id, 0u);
  EXPECT_EQ(d->plans.at("free").limits[0].state_id, 0u);
}

}  // namespace
}  // namespace sluice::rules

namespace sluice::rules {
namespace {

TEST(LoaderCalendarTest, CalendarWindowsInALimitsZoneOrTheDomains) {
  auto config = test::MustLoad(R"yaml(domain: quotas
time_zone: Asia/Kolkata
descriptors:
  - key: plan
    value: pro
    rate_limit: {requests: 10000, window: calendar_month, time_zone: Europe/Berlin}
  - key: plan
    value: free
    limits:
      - {requests: 100, window: calendar_day}
      - {requests: 10, window: 1m}
  - key: legacy
    rate_limit: {unit: month, requests_per_unit: 5}
)yaml");
  ASSERT_NE(config, nullptr);
  const Domain* domain = config->FindDomain("quotas");
  EXPECT_EQ(domain->time_zone, "Asia/Kolkata");
  EXPECT_FALSE(domain->calendar_units);
  const Limit& pro = test::Child(domain->root, 0)->limits[0].limit;
  ASSERT_TRUE(pro.calendar.has_value());
  EXPECT_EQ(pro.calendar->unit(), Calendar::Unit::kMonth);
  EXPECT_EQ(pro.calendar->time_zone(), "Europe/Berlin");
  EXPECT_EQ(pro.algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(pro.window_us, 30 * 86400 * test::kSecondUs);
  const auto& free = test::Child(domain->root, 1)->limits;
  ASSERT_EQ(free.size(), 2u);
  EXPECT_EQ(free[0].limit.calendar->time_zone(), "Asia/Kolkata");  // the domain's
  EXPECT_EQ(free[0].limit.calendar->unit(), Calendar::Unit::kDay);
  EXPECT_FALSE(free[1].limit.calendar.has_value());
  // Without calendar_units, `unit: month` stays upstream's 30 days from the epoch.
  EXPECT_FALSE(test::Child(domain->root, 2)->limits[0].limit.calendar.has_value());
}

TEST(LoaderCalendarTest, CalendarUnitsTurnDaysToMonthsIntoCalendarWindows) {
  auto config = test::MustLoad(R"yaml(domain: d
calendar_units: true
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: DAY, requests_per_unit: 5}
  - key: c
    rate_limit: {unit: year, requests_per_unit: 5}
)yaml");
  ASSERT_NE(config, nullptr);
  const Domain* domain = config->FindDomain("d");
  EXPECT_FALSE(test::Child(domain->root, 0)->limits[0].limit.calendar.has_value());
  const Limit& day = test::Child(domain->root, 1)->limits[0].limit;
  ASSERT_TRUE(day.calendar.has_value());
  EXPECT_EQ(day.calendar->unit(), Calendar::Unit::kDay);
  EXPECT_EQ(day.calendar->time_zone(), "UTC");
  EXPECT_EQ(test::Child(domain->root, 2)->limits[0].limit.calendar->unit(), Calendar::Unit::kYear);
  EXPECT_EQ(domain->unit_calendars.size(), 4u);
}

TEST(LoaderCalendarTest, MistakesAreNamedWhereTheyAre) {
  using ::testing::ElementsAre;
  EXPECT_THAT(test::Errors("domain: d\ntime_zone: Mars/Olympus\n"),
              ElementsAre(::testing::HasSubstr("t.yaml:2:12: unknown time zone 'Mars/Olympus'")));
  EXPECT_THAT(test::Errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests: 1, "
                           "window: calendar_month, time_zone: Europe/Nowhere}\n"),
              ElementsAre(::testing::HasSubstr("unknown time zone 'Europe/Nowhere'")));
  EXPECT_THAT(test::Errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests: 1, "
                           "window: calendar_fortnight}\n"),
              ElementsAre(::testing::HasSubstr("unknown calendar window 'calendar_fortnight'")));
  EXPECT_THAT(test::Errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests: 1, "
                           "window: 1h, time_zone: UTC}\n"),
              ElementsAre(::testing::HasSubstr("time_zone applies to calendar windows")));
  EXPECT_THAT(test::Errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests: 1, "
                           "window: calendar_day, algorithm: token_bucket}\n"),
              ElementsAre(::testing::HasSubstr("applies to fixed_window, not token_bucket")));
}

}  // namespace
}  // namespace sluice::rules

namespace sluice::rules {
namespace {

TEST(LoaderPenaltyTest, APenaltyPerLimitWithDefaultsForWhatItLeavesOut) {
  auto config = test::MustLoad(R"yaml(domain: d
descriptors:
  - key: user
    limits:
      - requests: 10
        window: 1m
        penalty: {after: 3, within: 10m, block: 2m, growth: 2.5, max: 1h}
      - {requests: 1000, window: 1d, penalty: {block: 30s}}
      - {requests: 5, window: 1s}
)yaml");
  ASSERT_NE(config, nullptr);
  const auto& limits = test::Child(config->FindDomain("d")->root, 0)->limits;
  ASSERT_EQ(limits.size(), 3u);
  const Penalty issue_example{.after = 3,
                              .within_us = 600 * test::kSecondUs,
                              .block_us = 120 * test::kSecondUs,
                              .growth = 2.5,
                              .max_us = 3600 * test::kSecondUs,
                              .forget_us = 86400 * test::kSecondUs};
  EXPECT_EQ(limits[0].limit.penalty, issue_example);
  ASSERT_TRUE(limits[1].limit.penalty.has_value());
  EXPECT_EQ(limits[1].limit.penalty->block_us, 30 * test::kSecondUs);
  EXPECT_EQ(limits[1].limit.penalty->after, 3u);
  EXPECT_FALSE(limits[2].limit.penalty.has_value());
  // The penalty is not part of the state's identity: adding one keeps the limit's counts.
  Limit without = limits[0].limit;
  without.penalty.reset();
  EXPECT_EQ(LimitId(limits[0].limit), LimitId(without));
  EXPECT_EQ(DescribeLimit(limits[0].limit), "10/1m fixed_window penalty=3/10m:2mx2.5<=1h");
}

TEST(LoaderPenaltyTest, MistakesAreNamed) {
  using ::testing::ElementsAre;
  using ::testing::HasSubstr;
  const auto with = [](const std::string& penalty) {
    return test::Errors(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests: 1, "
        "window: 1m, penalty: " +
        penalty + "}\n");
  };
  EXPECT_THAT(with("{after: 0}"), ElementsAre(HasSubstr("penalty: after must be at least 1")));
  EXPECT_THAT(with("{growth: 0.5}"), ElementsAre(HasSubstr("penalty growth")));
  EXPECT_THAT(with("{block: 2h, max: 1h}"), ElementsAre(HasSubstr("max must be at least block")));
  EXPECT_THAT(with("{max: 2d, forget: 1d}"), ElementsAre(HasSubstr("forget must be at least max")));
  EXPECT_THAT(with("{blok: 1m}"), ElementsAre(HasSubstr("blok")));
  EXPECT_THAT(with("{within: soon}"), ElementsAre(HasSubstr("soon")));
}

}  // namespace
}  // namespace sluice::rules
