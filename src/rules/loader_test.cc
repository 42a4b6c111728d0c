// Loading and validating rules configurations (loader.h): envoyproxy/ratelimit's files load
// unchanged (the format of its README and src/config/config_impl.go; examples A-D as in
// tests/rules/examples/), sluice's extensions load, and every error is reported with its exact
// FILE:LINE:COL and message (upstream's wording where it has one, and issue 4's list).
// Matching is tested in matcher_test.cc, decisions in engine/engine_test.cc, the binary in
// tests/rules_golden.sh.

#include "rules/loader.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/limit_id.h"
#include "cli/default_config.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

namespace fs = std::filesystem;

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr int64_t kSecondUs = 1000000;

// The error lines of loading `text` as the file "t.yaml" (empty when it loads).
std::vector<std::string> Errors(std::string_view text) {
  const LoadResult result = LoadConfigText("t.yaml", text);
  std::vector<std::string> lines;
  for (const ConfigError& e : result.errors) lines.push_back(e.ToString());
  EXPECT_EQ(result.config == nullptr, !lines.empty()) << "config must be null iff there are errors";
  return lines;
}

std::string Joined(const std::vector<ConfigError>& errors) {
  std::string s;
  for (const ConfigError& e : errors) s += e.ToString() + "\n";
  return s;
}

// Loads `text`, failing the test (with every error) if it does not load.
std::shared_ptr<const Config> MustLoad(std::string_view text) {
  LoadResult result = LoadConfigText("t.yaml", text);
  EXPECT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_NE(result.config, nullptr);
  return result.config;
}

using testing::TempDir;

const RuleNode* Child(const RuleNode& node, size_t i) {
  return i < node.children.size() ? node.children[i].get() : nullptr;
}

// ---------------------------------------------------------------------------------------------
// envoyproxy/ratelimit files, unchanged (examples A-D, as in tests/rules/examples/).

constexpr std::string_view kExampleA = R"yaml(domain: edge
descriptors:
  - key: remote_address          # every IP: 10 req/s, counted per IP
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address          # blocked IP
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address          # monitoring host, never limited
    value: 10.1.1.1
)yaml";

constexpr std::string_view kExampleB = R"yaml(domain: api
descriptors:
  - key: tenant                      # any tenant
    descriptors:
      - key: method
        value: POST
        rate_limit: {unit: minute, requests_per_unit: 100}
      - key: method                  # any other method
        rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: tenant
    value: acme
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 5000}
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 2000}
)yaml";

constexpr std::string_view kExampleC = R"yaml(domain: files
descriptors:
  - key: path
    value: /downloads/free/*         # listed first: first matching wildcard wins
    rate_limit: {unlimited: true}
  - key: path
    value: /downloads/*
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /downloads/big.iso        # exact match beats any wildcard
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: api_key
    detailed_metric: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: bucket
    value: reports-*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 10}
)yaml";

constexpr std::string_view kExampleD = R"yaml(domain: checkout
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 20}
  - key: plan
    value: premium
    descriptors:
      - key: user
        rate_limit:
          unit: minute
          requests_per_unit: 100
          replaces: [{name: per_user}]
  - key: route
    value: /pay
    rate_limit: {unit: second, requests_per_unit: 5}
)yaml";

TEST(LoaderExamplesTest, ExampleALoadsUnchanged) {
  auto config = MustLoad(kExampleA);
  ASSERT_NE(config, nullptr);
  const Domain* edge = config->FindDomain("edge");
  ASSERT_NE(edge, nullptr);
  EXPECT_EQ(edge->file, "t.yaml");
  ASSERT_THAT(edge->root.children, SizeIs(3));
  const RuleNode* any_ip = Child(edge->root, 0);
  EXPECT_EQ(any_ip->key, "remote_address");
  EXPECT_FALSE(any_ip->has_value);
  EXPECT_EQ(any_ip->path, "edge.remote_address");
  ASSERT_THAT(any_ip->limits, SizeIs(1));
  EXPECT_EQ(any_ip->limits[0].limit.algorithm, Algorithm::kFixedWindow);  // upstream's algorithm
  EXPECT_EQ(any_ip->limits[0].limit.requests, 10u);
  EXPECT_EQ(any_ip->limits[0].limit.window_us, kSecondUs);
  EXPECT_EQ(any_ip->limits[0].unit, "second");
  EXPECT_EQ(any_ip->limits[0].position.line, 4);

  const RuleNode* blocked = Child(edge->root, 1);
  EXPECT_EQ(blocked->path, "edge.remote_address_50.0.0.5");
  ASSERT_THAT(blocked->limits, SizeIs(1));
  EXPECT_EQ(blocked->limits[0].limit.requests, 0u);  // legal: denies everything

  const RuleNode* allowed = Child(edge->root, 2);
  EXPECT_FALSE(allowed->has_rate_limit);  // an allow-list entry
  EXPECT_THAT(allowed->limits, IsEmpty());
  EXPECT_EQ(config->limit_count, 2u);
}

TEST(LoaderExamplesTest, ExampleBLoadsUnchanged) {
  auto config = MustLoad(kExampleB);
  ASSERT_NE(config, nullptr);
  const Domain* api = config->FindDomain("api");
  ASSERT_NE(api, nullptr);
  ASSERT_THAT(api->root.children, SizeIs(3));
  const RuleNode* tenant = Child(api->root, 0);
  EXPECT_FALSE(tenant->has_rate_limit);
  ASSERT_THAT(tenant->children, SizeIs(2));
  EXPECT_EQ(Child(*tenant, 0)->path, "api.tenant.method_POST");
  EXPECT_EQ(Child(*tenant, 0)->limits[0].limit.window_us, 60 * kSecondUs);
  EXPECT_EQ(Child(*tenant, 1)->path, "api.tenant.method");
  EXPECT_EQ(Child(*tenant, 1)->limits[0].limit.requests, 1000u);
  EXPECT_EQ(Child(*Child(api->root, 1), 0)->path, "api.tenant_acme.method");
  EXPECT_EQ(api->limit_count, 4u);
}

TEST(LoaderExamplesTest, ExampleCLoadsUnchanged) {
  auto config = MustLoad(kExampleC);
  ASSERT_NE(config, nullptr);
  const Domain* files = config->FindDomain("files");
  ASSERT_NE(files, nullptr);
  ASSERT_THAT(files->root.children, SizeIs(5));
  const RuleNode* free = Child(files->root, 0);
  EXPECT_TRUE(free->wildcard);
  EXPECT_TRUE(free->unlimited);
  EXPECT_TRUE(free->has_rate_limit);
  EXPECT_THAT(free->limits, IsEmpty());
  EXPECT_TRUE(Child(files->root, 1)->wildcard);
  EXPECT_EQ(Child(files->root, 1)->limits[0].limit.window_us, 3600 * kSecondUs);
  EXPECT_FALSE(Child(files->root, 2)->wildcard);
  EXPECT_EQ(Child(files->root, 2)->limits[0].limit.window_us, 86400 * kSecondUs);
  const RuleNode* api_key = Child(files->root, 3);
  EXPECT_TRUE(api_key->shadow_mode);
  EXPECT_TRUE(api_key->detailed_metric);
  EXPECT_TRUE(Child(files->root, 4)->share_threshold);
  EXPECT_EQ(files->limit_count, 4u);  // the unlimited rule has no limit to count
}

TEST(LoaderExamplesTest, ExampleDLoadsUnchanged) {
  auto config = MustLoad(kExampleD);
  ASSERT_NE(config, nullptr);
  const Domain* checkout = config->FindDomain("checkout");
  ASSERT_NE(checkout, nullptr);
  const RuleNode* user = Child(checkout->root, 0);
  EXPECT_EQ(user->rate_limit_name, "per_user");
  EXPECT_EQ(user->limits[0].name, "per_user");
  const RuleNode* premium_user = Child(*Child(checkout->root, 1), 0);
  EXPECT_THAT(premium_user->replaces, ElementsAre("per_user"));
  EXPECT_EQ(premium_user->limits[0].limit.requests, 100u);
  EXPECT_EQ(checkout->limit_count, 3u);
}

TEST(LoaderExamplesTest, AllExamplesLoadTogetherFromADirectory) {
  TempDir dir;
  dir.Write("edge.yaml", kExampleA);
  dir.Write("api.yaml", kExampleB);
  dir.Write("files.yaml", kExampleC);
  dir.Write("checkout.yml", kExampleD);  // .yml counts too
  const LoadResult result = LoadConfig({dir.path().string()});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_THAT(result.config->domains, SizeIs(4));
  EXPECT_EQ(result.config->limit_count, 13u);
  for (const char* name : {"edge", "api", "files", "checkout"}) {
    EXPECT_NE(result.config->FindDomain(name), nullptr) << name;
  }
  EXPECT_EQ(result.config->FindDomain("api")->file, dir.Path("api.yaml"));
}

// Every key upstream accepts anywhere in the tree (its validKeys), including the newest
// (value_to_metric, share_threshold, quota_mode, metadata); metadata's content is not checked.
TEST(LoaderExamplesTest, EveryUpstreamKeyIsAccepted) {
  auto config = MustLoad(R"yaml(domain: all-keys
descriptors:
  - key: k
    value: v*
    shadow_mode: false
    detailed_metric: true
    value_to_metric: true
    share_threshold: true
    quota_mode: true
    metadata:
      owner: team-a
      anything: {nested: [1, 2.5, {deep: null}], not_a_known_key: yes}
    rate_limit:
      unit: second
      requests_per_unit: 7
      unlimited: false
      name: seven
      replaces:
        - name: other
    descriptors:
      - key: inner
        rate_limit: {unlimited: true, name: other}
)yaml");
  ASSERT_NE(config, nullptr);
  const RuleNode* k = Child(config->FindDomain("all-keys")->root, 0);
  EXPECT_TRUE(k->share_threshold);
  EXPECT_EQ(k->limits[0].limit.requests, 7u);
  EXPECT_TRUE(Child(*k, 0)->unlimited);
}

TEST(LoaderExamplesTest, UnitsAreCaseInsensitiveWithUpstreamWindowLengths) {
  auto config = MustLoad(R"yaml(domain: units
descriptors:
  - {key: a, rate_limit: {unit: SECOND, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: Minute, requests_per_unit: 1}}
  - {key: c, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: d, rate_limit: {unit: DAY, requests_per_unit: 1}}
  - {key: e, rate_limit: {unit: Week, requests_per_unit: 1}}
  - {key: f, rate_limit: {unit: MONTH, requests_per_unit: 1}}
  - {key: g, rate_limit: {unit: year, requests_per_unit: 1}}
)yaml");
  ASSERT_NE(config, nullptr);
  const RuleNode& root = config->FindDomain("units")->root;
  const int64_t expected_s[] = {1, 60, 3600, 86400, 604800, 2592000, 31536000};
  const char* expected_unit[] = {"second", "minute", "hour", "day", "week", "month", "year"};
  ASSERT_THAT(root.children, SizeIs(7));
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(Child(root, i)->limits[0].limit.window_us, expected_s[i] * kSecondUs) << i;
    EXPECT_EQ(Child(root, i)->limits[0].unit, expected_unit[i]) << i;
  }
}

TEST(LoaderExamplesTest, UnitMicros) {
  EXPECT_EQ(UnitMicros("second"), kSecondUs);
  EXPECT_EQ(UnitMicros("SeCoNd"), kSecondUs);
  EXPECT_EQ(UnitMicros("WEEK"), 604800 * kSecondUs);
  EXPECT_EQ(UnitMicros("month"), 2592000 * kSecondUs);  // 30 days, not a calendar month
  EXPECT_EQ(UnitMicros("year"), 31536000 * kSecondUs);  // 365 days
  EXPECT_EQ(UnitMicros("seconds"), 0);                  // plurals are unknown upstream too
  EXPECT_EQ(UnitMicros("unknown"), 0);
  EXPECT_EQ(UnitMicros(""), 0);
}

TEST(LoaderExamplesTest, LargestRequestsPerUnitIsUint32Max) {
  auto config = MustLoad(R"yaml(domain: big
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 4294967295}
)yaml");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(Child(config->FindDomain("big")->root, 0)->limits[0].limit.requests, 4294967295u);
}

TEST(LoaderExamplesTest, DomainWithoutDescriptorsLoads) {
  auto config = MustLoad("domain: bare\n");
  ASSERT_NE(config, nullptr);
  ASSERT_NE(config->FindDomain("bare"), nullptr);
  EXPECT_THAT(config->FindDomain("bare")->root.children, IsEmpty());
}

// ---------------------------------------------------------------------------------------------
// sluice's extensions.

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
  const Domain* plain = MustLoad("domain: d\n")->FindDomain("d");
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

constexpr std::string_view kPlans = R"yaml(domain: plans
plans:
  free:
    limits:
      - {requests: 10, window: 1s, algorithm: token_bucket, burst: 20}
      - {requests: 1000, window: 1d}
  pro:
    limits:
      - {requests: 100, window: 1s, algorithm: token_bucket, burst: 200}
  enterprise: {limits: [{requests: 1000, window: 1s}]}
default_plan: free
descriptors:
  - key: plan
    descriptors:
      - key: api_key
        plan_from: plan
)yaml";

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

TEST(LoaderErrorsTest, BadUpstreamUrls) {
  for (const char* url :
       {"http://", "http://h:", "http://h:0", "http://h:65536", "http://h:8x", "http://h/path",
        "http://u@h:1", "http://[::1", "http://[::1]x", "http://h:1?q", "http://:80"}) {
    EXPECT_THAT(Errors(fmt::format("domain: d\nhttp:\n  upstream: \"{}\"\n", url)),
                ElementsAre(fmt::format("t.yaml:3:13: bad upstream '{}': give http://HOST[:PORT] "
                                        "(no path, no user info)",
                                        url)));
  }
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

// ---------------------------------------------------------------------------------------------
// Errors: one line each, FILE:LINE:COL: message (issue 4, check-config; upstream's wording).

TEST(LoaderErrorsTest, YamlSyntaxError) {
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second\n"),
              ElementsAre("t.yaml:5:1: YAML syntax error: did not find expected ',' or '}' "
                          "(while parsing a flow mapping at 4:17)"));
  EXPECT_THAT(Errors("domain: d\n  bad: indent\n"),
              ElementsAre("t.yaml:2:6: YAML syntax error: mapping values are not allowed in this "
                          "context"));
}

// Issue 19 (2): malformed documents are YAML syntax errors at their position, as upstream's
// parser (go-yaml, a port of libyaml) says, never loaded as something else. yaml-cpp alone took
// the unterminated quotes: `'''` as "a config file must be a map", `domain: 'abc` as a domain.
TEST(LoaderErrorsTest, MalformedDocumentsAreSyntaxErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"'''",
       "t.yaml:1:4: YAML syntax error: found unexpected end of stream (while scanning a "
       "quoted scalar at 1:1)"},
      {"'''\n",
       "t.yaml:2:1: YAML syntax error: found unexpected end of stream (while scanning "
       "a quoted scalar at 1:1)"},
      {"domain: 'abc\ndescriptors: []\n",
       "t.yaml:3:1: YAML syntax error: found unexpected end of stream (while scanning a quoted "
       "scalar at 1:9)"},
      {"domain: \"abc\n",
       "t.yaml:2:1: YAML syntax error: found unexpected end of stream (while "
       "scanning a quoted scalar at 1:9)"},
      {"domain: d\ndescriptors:\n  - key: a\n     value: b\n",
       "t.yaml:4:11: YAML syntax error: mapping values are not allowed in this context"},
      {"domain: d\ndescriptors:\n\t- key: a\n",
       "t.yaml:3:1: YAML syntax error: found character that cannot start any token (while "
       "scanning for the next token at 3:1)"},
      {"domain: d\ndescriptors: [a, b\n",
       "t.yaml:3:1: YAML syntax error: did not find expected ',' or ']' (while parsing a flow "
       "sequence at 2:14)"},
      // Well-formed YAML with a key twice: a config error, at the second.
      {"domain: d\ndomain: e\ndescriptors: []\n",
       "t.yaml:2:1: duplicate key 'domain' in domain file"},
  };
  for (const auto& [text, error] : cases) {
    EXPECT_THAT(Errors(text), ElementsAre(error)) << text;
  }
}

TEST(LoaderErrorsTest, NearLimitRatioIsANumberFromZeroToOne) {
  EXPECT_THAT(Errors("near_limit_ratio: 1.5\n"),
              ElementsAre("t.yaml:1:19: near_limit_ratio must be a number from 0 to 1"));
  EXPECT_THAT(Errors("near_limit_ratio: lots\n"),
              ElementsAre("t.yaml:1:19: near_limit_ratio must be a number from 0 to 1"));
}

TEST(LoaderErrorsTest, UnknownKeyWithDidYouMean) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptor:
  - key: a
)yaml"),
              ElementsAre("t.yaml:2:1: unknown key 'descriptor' in domain file "
                          "(did you mean 'descriptors'?)"));
  EXPECT_THAT(
      Errors(R"yaml(domain: d
descriptors:
  - key: a
    ratelimit: {unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unt: 1}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1}
    totally_unrelated_thing: 1
)yaml"),
      ElementsAre("t.yaml:4:5: unknown key 'ratelimit' in descriptor (did you mean 'rate_limit'?)",
                  "t.yaml:6:32: unknown key 'requests_per_unt' in rate_limit "
                  "(did you mean 'requests_per_unit'?)",
                  "t.yaml:9:5: unknown key 'totally_unrelated_thing' in descriptor"));
  // In a limits entry, a plan, and the settings file.
  EXPECT_THAT(
      Errors(R"yaml(domain: d
plans:
  free: {limit: []}
default_plan: free
descriptors:
  - key: a
    limits: [{requests: 1, windw: 1s}]
)yaml"),
      ElementsAre("t.yaml:3:10: unknown key 'limit' in plan 'free' (did you mean 'limits'?)",
                  "t.yaml:7:28: unknown key 'windw' in limits entry (did you mean 'window'?)"));
  EXPECT_THAT(
      Errors("listen: x\nbakend: memory\n"),
      ElementsAre("t.yaml:2:1: unknown key 'bakend' in settings (did you mean 'backend'?)"));
}

TEST(LoaderErrorsTest, WrongType) {
  EXPECT_THAT(
      Errors(R"yaml(domain: d
count_denied: maybe
descriptors:
  - key: a
    shadow_mode: 3
    value: [x]
    rate_limit: {unit: [second], requests_per_unit: {n: 1}}
  - key: b
    descriptors: {key: c}
  - not a map
)yaml"),
      ElementsAre("t.yaml:2:15: count_denied must be true or false",
                  "t.yaml:5:18: shadow_mode must be true or false",
                  "t.yaml:6:12: value must be a string", "t.yaml:7:24: unit must be a string",
                  "t.yaml:7:53: requests_per_unit must be an integer",
                  "t.yaml:9:18: descriptors must be a list",
                  "t.yaml:10:5: descriptors must be a list of maps"));
}

TEST(LoaderErrorsTest, NegativeFloatAndTooLargeLimits) {
  EXPECT_THAT(
      Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: -1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1.5}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 4294967296}
  - key: d
    rate_limit: {requests: 1, window: 1s, algorithm: token_bucket, burst: -2}
)yaml"),
      ElementsAre("t.yaml:4:51: requests_per_unit must not be negative, got -1",
                  "t.yaml:6:51: requests_per_unit must be an integer, got '1.5'",
                  "t.yaml:8:51: requests_per_unit must be at most 4294967295, got 4294967296",
                  "t.yaml:10:75: burst must not be negative, got -2"));
}

TEST(LoaderErrorsTest, UnknownOrMissingUnitAndBadWindow) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unit: seconds, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: c
    rate_limit: {requests_per_unit: 1}
  - key: d
    rate_limit: {requests: 1, window: 0s}
  - key: e
    rate_limit: {requests: 1, unit: second, window: 1s}
)yaml"),
              ElementsAre("t.yaml:4:24: invalid rate limit unit 'seconds'",
                          "t.yaml:6:24: invalid rate limit unit 'fortnight'",
                          "t.yaml:8:17: rate_limit needs a unit (second, minute, hour, day, week, "
                          "month, year) or a window (e.g. 30s)",
                          "t.yaml:10:39: window: bad duration \"0s\": must be positive (write e.g. "
                          "250ms, 1s, 30s, 5m, 1h, 1d, 1w)",
                          "t.yaml:12:53: rate_limit: give unit or window, not both"));
}

TEST(LoaderErrorsTest, UnknownAlgorithm) {
  EXPECT_THAT(
      Errors("domain: d\ndescriptors:\n  - key: a\n"
             "    rate_limit: {algorithm: token-bucket, requests: 1, window: 1s}\n"),
      ElementsAre("t.yaml:4:29: unknown algorithm \"token-bucket\" (known: token_bucket, gcra, "
                  "leaky_bucket, fixed_window, sliding_log, sliding_window)"));
}

// One mistake, one error: an unknown algorithm does not also make its burst look misplaced.
TEST(LoaderErrorsTest, UnknownAlgorithmWithBurstIsOneError) {
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n"
                     "    rate_limit: {algorithm: bogus, requests: 1, window: 1s, burst: 5}\n"),
              ElementsAre("t.yaml:4:29: unknown algorithm \"bogus\" (known: token_bucket, gcra, "
                          "leaky_bucket, fixed_window, sliding_log, sliding_window)"));
  // A burst on a known algorithm without one is still an error of its own.
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n"
                     "    rate_limit: {algorithm: fixed_window, requests: 1, window: 1s, "
                     "burst: 5}\n"),
              SizeIs(1));
}

// A file with no document at all is an error, not "no rules" (see ConfigManagerTest's
// EmptyFileOverADomainKeepsTheDomain for why).
TEST(LoaderErrorsTest, EmptyFileIsAnError) {
  for (const char* text : {"", "# only a comment\n", "\n   \n", "---\n", "~\n"}) {
    EXPECT_THAT(Errors(text),
                ElementsAre("t.yaml:1:1: the file holds no YAML document (a rules file needs "
                            "`domain:`, a settings file a map of settings)"))
        << "text: '" << text << "'";
  }
}

// Rules whose `domain:` is missing are reported as such, not as an unknown settings key.
TEST(LoaderErrorsTest, RulesWithoutDomainSayTheDomainIsMissing) {
  EXPECT_THAT(Errors("descriptors:\n  - key: a\n    rate_limit: {unit: second, "
                     "requests_per_unit: 1}\n"),
              ElementsAre("t.yaml:1:1: a rules file needs a `domain:` (this one has "
                          "`descriptors:` but no domain)"));
}

TEST(LoaderErrorsTest, BurstRules) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {algorithm: token_bucket, requests: 1, window: 1s, burst: 0}
  - key: b
    rate_limit: {requests: 1, window: 1s, burst: 5}
  - key: c
    rate_limit: {algorithm: sliding_log, requests: 1, window: 1s, burst: 5}
  - key: d
    rate_limit: {algorithm: leaky_bucket, requests: 1, window: 1s, burst: 0}
)yaml"),
              ElementsAre("t.yaml:4:75: burst of a token_bucket must be at least 1",
                          "t.yaml:6:50: burst applies to token_bucket and leaky_bucket, not "
                          "fixed_window",
                          "t.yaml:8:74: burst applies to token_bucket and leaky_bucket, not "
                          "sliding_log"));
}

TEST(LoaderErrorsTest, DuplicateDescriptor) {
  EXPECT_THAT(
      Errors(R"yaml(domain: test-domain
descriptors:
  - key: key1
    value: value1
  - key: key1
    value: value1
  - key: key2
  - key: key2
  - key: key3
    value: v*
  - key: key3
    value: v*
  - key: key4
    descriptors:
      - key: inner
        value: x
      - key: inner
        value: x
)yaml"),
      ElementsAre("t.yaml:5:5: duplicate descriptor composite key 'test-domain.key1_value1'",
                  "t.yaml:8:5: duplicate descriptor composite key 'test-domain.key2'",
                  "t.yaml:11:5: duplicate descriptor composite key 'test-domain.key3_v*'",
                  "t.yaml:17:9: duplicate descriptor composite key "
                  "'test-domain.key4.inner_x'"));
}

TEST(LoaderErrorsTest, SameKeyWithDifferentValuesIsNoDuplicate) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - {key: k}
  - {key: k, value: a}
  - {key: k, value: a*}
  - {key: k, value: b}
)yaml"),
              IsEmpty());
}

TEST(LoaderErrorsTest, UnknownPlan) {
  EXPECT_THAT(Errors(R"yaml(domain: d
plans:
  free: {limits: [{requests: 1, window: 1s}]}
  pro: {limits: [{requests: 2, window: 1s}]}
default_plan: gold
)yaml"),
              ElementsAre("t.yaml:5:15: unknown plan 'gold' (plans: free, pro)"));
  EXPECT_THAT(Errors("domain: d\ndefault_plan: free\n"),
              ElementsAre("t.yaml:2:15: unknown plan 'free' (no plans are defined)"));
  EXPECT_THAT(Errors("domain: d\nplans:\n  free: {limits: [{requests: 1, window: 1s}]}\n"),
              ElementsAre("t.yaml:3:3: plans need a default_plan (used when a request names no "
                          "known plan)"));
}

TEST(LoaderErrorsTest, UnknownPlanInClientsCsv) {
  TempDir dir;
  const std::string csv = dir.Write("clients.csv", "key,plan\nk1,free\nk2,gold\nk3\n,free\nk4,\n");
  dir.Write("d.yaml", std::string(kPlans) + "clients: clients.csv\n");
  const LoadResult result = LoadConfig({dir.Path("d.yaml")});
  std::vector<std::string> lines;
  for (const ConfigError& e : result.errors) lines.push_back(e.ToString());
  EXPECT_THAT(lines,
              ElementsAre(csv + ":3:4: unknown plan 'gold'", csv + ":4:1: expected `key,plan`",
                          csv + ":5:1: expected `key,plan`", csv + ":6:1: expected `key,plan`"));
  EXPECT_EQ(result.config, nullptr);
}

TEST(LoaderErrorsTest, MissingClientsFile) {
  TempDir dir;
  dir.Write("d.yaml", std::string(kPlans) + "clients: nowhere.csv\n");
  const LoadResult result = LoadConfig({dir.Path("d.yaml")});
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].ToString(), dir.Path("nowhere.csv") + ": cannot read clients file");
}

TEST(LoaderErrorsTest, PlanFromWithoutPlans) {
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: api_key\n    plan_from: plan\n"),
              ElementsAre("t.yaml:4:16: plan_from needs top-level plans"));
  EXPECT_THAT(Errors(std::string(kPlans) +
                     "  - key: other\n    plan_from: plan\n    rate_limit: {unit: second, "
                     "requests_per_unit: 1}\n"),
              ElementsAre("t.yaml:18:16: a descriptor with plan_from takes its limits from the "
                          "plan; remove rate_limit/limits"));
}

TEST(LoaderErrorsTest, UnlimitedWithUnit) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unlimited: true, unit: second}
  - key: b
    rate_limit: {unlimited: true, window: 1s}
  - key: c
    rate_limit: {unlimited: true, requests_per_unit: 5}
)yaml"),
              ElementsAre("t.yaml:4:41: should not specify rate limit unit when unlimited",
                          "t.yaml:6:43: should not specify rate limit unit when unlimited"));
}

TEST(LoaderErrorsTest, EmptyOrSelfReplaces) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit:
      name: mine
      unit: second
      requests_per_unit: 1
      replaces:
        - name: ""
        - name: mine
        - {}
)yaml"),
              ElementsAre("t.yaml:9:11: should not have an empty replaces entry",
                          "t.yaml:10:11: replaces should not contain name of same descriptor",
                          "t.yaml:11:11: should not have an empty replaces entry"));
}

TEST(LoaderErrorsTest, ShareThresholdWithoutWildcard) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: bucket
    value: reports
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: other
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
)yaml"),
              ElementsAre("t.yaml:5:22: share_threshold can only be used with wildcard values "
                          "(containing '*'), but found key 'bucket'",
                          "t.yaml:8:22: share_threshold can only be used with wildcard values "
                          "(containing '*'), but found key 'other'"));
}

TEST(LoaderErrorsTest, EmptyDomain) {
  EXPECT_THAT(Errors("domain: \"\"\n"),
              ElementsAre("t.yaml:1:9: config file cannot have empty domain"));
  EXPECT_THAT(Errors("descriptors: []\ndomain: ''\n"),
              ElementsAre("t.yaml:2:9: config file cannot have empty domain"));
}

// A key written without a value (`domain:`, `key:`) is null; the error belongs on that key's line.
// (yaml-cpp marks a null value at the next token, i.e. on the next line.)
TEST(LoaderErrorsTest, NullDomainOrKeyIsReportedOnItsOwnLine) {
  LoadResult result = LoadConfigText("t.yaml", "domain:\ndescriptors: []\n");
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].message, "config file cannot have empty domain");
  EXPECT_EQ(result.errors[0].position.line, 1) << result.errors[0].ToString();
  result = LoadConfigText("t.yaml",
                          "domain: d\ndescriptors:\n  - key:\n    rate_limit: {unit: second, "
                          "requests_per_unit: 1}\n");
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].message, "descriptor has empty key");
  EXPECT_EQ(result.errors[0].position.line, 3) << result.errors[0].ToString();
}

TEST(LoaderErrorsTest, DuplicateYamlKeys) {
  EXPECT_THAT(Errors("domain: d\ndomain: e\n"),
              ElementsAre("t.yaml:2:1: duplicate key 'domain' in domain file"));
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n    key: b\n"),
              ElementsAre("t.yaml:4:5: duplicate key 'key' in descriptor"));
}

TEST(LoaderErrorsTest, EmptyKey) {
  EXPECT_THAT(
      Errors(R"yaml(domain: d
descriptors:
  - key: ""
  - value: x
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: ''
)yaml"),
      ElementsAre("t.yaml:3:10: descriptor has empty key", "t.yaml:4:5: descriptor has empty key",
                  "t.yaml:8:14: descriptor has empty key"));
}

TEST(LoaderErrorsTest, RateLimitAndLimitsBothGiven) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    limits:
      - {requests: 1, window: 1s}
)yaml"),
              ElementsAre("t.yaml:6:7: use either rate_limit or limits on a descriptor, not both"));
}

TEST(LoaderErrorsTest, RequestsAndRequestsPerUnitBothGiven) {
  EXPECT_THAT(
      Errors("domain: d\ndescriptors:\n  - key: a\n"
             "    limits: [{requests: 1, requests_per_unit: 1, window: 1s}]\n"),
      ElementsAre("t.yaml:4:25: limits entry: give requests or requests_per_unit, not both"));
}

TEST(LoaderErrorsTest, FailureModeAndHttpErrors) {
  EXPECT_THAT(
      Errors(R"yaml(domain: d
failure_mode: sometimes
http:
  deny_status: 100
  trusted_proxies: [10.0.0.0/33, not-an-ip]
  upstream: https://x
  refund_on: [4xx]
  routes:
    - match: {prefix: /a, path: /b}
      rate_limits:
        - actions:
            - request_headers: {header_name: X-A}
            - generic_key: {descriptor_key: k}
            - query: {name: q}
            - {path: {}, method: {}}
)yaml"),
      ElementsAre("t.yaml:2:15: unknown failure_mode 'sometimes' (open, closed or local)",
                  "t.yaml:4:16: deny_status must be an HTTP status between 200 and 599",
                  "t.yaml:5:21: bad address or CIDR '10.0.0.0/33' in trusted_proxies",
                  "t.yaml:5:34: bad address or CIDR 'not-an-ip' in trusted_proxies",
                  "t.yaml:6:13: upstream must be an http:// URL",
                  "t.yaml:7:15: unknown refund_on '4xx' (5xx, connect_error, timeout)",
                  "t.yaml:9:14: match takes prefix or path, not both",
                  "t.yaml:12:32: request_headers needs header_name and descriptor_key",
                  "t.yaml:13:15: generic_key needs a descriptor_value",
                  "t.yaml:14:15: unknown key 'query' in action",
                  "t.yaml:15:15: an action has exactly one of request_headers, remote_address, "
                  "generic_key, path, method"));
}

TEST(LoaderErrorsTest, SettingsErrors) {
  EXPECT_THAT(
      Errors(R"yaml(backend: cassandra
threads: many
unknown_domain: maybe
headers: [x_ratelimit, draft]
redis: {url: http://x, instances: 0}
rls: {unknown_domain: deny}
grpc: {threads: -2}
)yaml"),
      ElementsAre("t.yaml:1:10: unknown backend 'cassandra' (memory or redis)",
                  "t.yaml:2:10: threads must be an integer, got 'many'",
                  "t.yaml:3:17: unknown_domain must be allow or deny",
                  "t.yaml:4:24: unknown header style 'draft' (x_ratelimit, ietf, none)",
                  "t.yaml:5:14: bad Redis URL 'http://x' (redis://[user:pass@]host:port[/db])",
                  "t.yaml:5:35: instances must be at least 1",
                  "t.yaml:6:23: rls.unknown_domain must be ok or error",
                  "t.yaml:7:17: threads must not be negative, got -2"));
  EXPECT_THAT(Errors("grpc: {threads: 257}\n"),
              ElementsAre("t.yaml:1:17: threads must be at most 256, got 257"));
  EXPECT_THAT(Errors("grpc: {threads: two}\n"),
              ElementsAre("t.yaml:1:17: threads must be an integer, got 'two'"));
  EXPECT_THAT(Errors("redis: {url: redis://h:1, sync_interval: 100us}\n"),
              ElementsAre("t.yaml:1:42: sync_interval must be at least 1ms"));
  EXPECT_THAT(Errors("redis: {url: redis://h:1, buckets: 16777217}\n"),
              ElementsAre("t.yaml:1:36: buckets must be at most 16777216, got 16777217"));
  EXPECT_THAT(Errors("backend: redis\n"),
              ElementsAre("t.yaml:1:10: backend redis needs redis.url or redis.nodes"));
  EXPECT_THAT(Errors("store: {on_full: evict}\n"),
              ElementsAre("t.yaml:1:18: unknown store.on_full 'evict' (shared, deny or "
                          "allow_untracked)"));
}

TEST(LoaderErrorsTest, ADocumentThatIsNotAMap) {
  EXPECT_THAT(Errors("- domain: d\n"),
              ElementsAre("t.yaml:1:1: a config file must be a map (a domain file has `domain:`)"));
}

TEST(LoaderErrorsTest, EveryErrorOfAFileIsReportedInOrder) {
  // Parsing goes on after an error: one run reports everything, sorted by position.
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unit: sec, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: -5}
)yaml"),
              SizeIs(2));
}

// ---------------------------------------------------------------------------------------------
// Files and directories.

TEST(LoaderFilesTest, DuplicateDomainAcrossFiles) {
  TempDir dir;
  dir.Write("a.yaml", "domain: shared\n");
  dir.Write("b.yaml", "# again\ndomain: shared\n");
  const LoadResult result = LoadConfig({dir.path().string()});
  std::vector<std::string> lines;
  for (const ConfigError& e : result.errors) lines.push_back(e.ToString());
  EXPECT_THAT(lines, ElementsAre(dir.Path("b.yaml") +
                                 ":2:1: duplicate domain 'shared' in config "
                                 "file (also in " +
                                 dir.Path("a.yaml") + ")"));
  EXPECT_EQ(result.config, nullptr);
}

TEST(LoaderFilesTest, DirectoryIgnoresNonYamlFilesAndDotEntries) {
  TempDir dir;
  dir.Write("edge.yaml", kExampleA);
  dir.Write("sub/api.yml", kExampleB);
  dir.Write("README.md", "domain: readme\n: not yaml at all [\n");
  dir.Write("edge.yaml.bak", "domain: edge\n");
  dir.Write("notes.txt", "domain: notes\n");
  dir.Write(".hidden.yaml", "domain: [broken\n");
  dir.Write(".git/config.yaml", "domain: edge\n");
  // A Kubernetes ConfigMap mount: the files are symlinks through `..data` to a dated directory.
  dir.Write("..2024_01_01_00_00_00.000/files.yaml", kExampleC);
  fs::create_directory_symlink("..2024_01_01_00_00_00.000", dir.path() / "..data");
  fs::create_symlink("..data/files.yaml", dir.path() / "files.yaml");
  const LoadResult result = LoadConfig({dir.path().string()});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_THAT(result.config->domains, SizeIs(3));
  EXPECT_NE(result.config->FindDomain("edge"), nullptr);
  EXPECT_NE(result.config->FindDomain("api"), nullptr);
  EXPECT_NE(result.config->FindDomain("files"), nullptr);
  EXPECT_EQ(result.config->FindDomain("readme"), nullptr);
}

TEST(LoaderFilesTest, MissingPath) {
  const LoadResult result = LoadConfig({"/nonexistent/sluice/rules"});
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].ToString(), "/nonexistent/sluice/rules: no such file or directory");
}

TEST(LoaderFilesTest, SettingsFileInTheDirectory) {
  TempDir dir;
  dir.Write("edge.yaml", kExampleA);
  dir.Write("sluice.yaml", "listen: 0.0.0.0:1234\ncount_denied: true\n");
  const LoadResult result = LoadConfig({dir.path().string()});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_EQ(result.config->settings.file, dir.Path("sluice.yaml"));
  EXPECT_EQ(result.config->settings.listen, "0.0.0.0:1234");
  EXPECT_TRUE(result.config->settings.count_denied);
  EXPECT_THAT(result.config->domains, SizeIs(1));
}

TEST(LoaderFilesTest, TwoSettingsFilesAreAnError) {
  TempDir dir;
  dir.Write("a.yaml", "listen: 0.0.0.0:1\n");
  dir.Write("b.yaml", "listen: 0.0.0.0:2\n");
  const LoadResult result = LoadConfig({dir.path().string()});
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].ToString(),
            dir.Path("b.yaml") +
                ":1:1: a second settings file (a document without `domain:`); "
                "the first is " +
                dir.Path("a.yaml"));
}

TEST(LoaderFilesTest, SettingsFileNamedDirectlyBringsItsRules) {
  TempDir dir;
  dir.Write("rules/edge.yaml", kExampleA);
  dir.Write("rules/api.yaml", kExampleB);
  dir.Write("etc/sluice.yaml", "rules: ../rules\nlisten: 127.0.0.1:1\n");
  const LoadResult result = LoadConfig({dir.Path("etc/sluice.yaml")});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_EQ(result.config->settings.listen, "127.0.0.1:1");
  EXPECT_THAT(result.config->domains, SizeIs(2));
  EXPECT_EQ(result.config->limit_count, 6u);

  // An absolute rules path works too; a missing one is an error.
  dir.Write("etc/abs.yaml", "rules: " + dir.Path("rules") + "\n");
  const LoadResult absolute = LoadConfig({dir.Path("etc/abs.yaml")});
  ASSERT_THAT(absolute.errors, IsEmpty()) << Joined(absolute.errors);
  EXPECT_THAT(absolute.config->domains, SizeIs(2));
  dir.Write("etc/missing.yaml", "rules: ../nowhere\n");
  const LoadResult missing = LoadConfig({dir.Path("etc/missing.yaml")});
  ASSERT_THAT(missing.errors, SizeIs(1));
  EXPECT_EQ(missing.errors[0].message, "no such file or directory");
}

TEST(LoaderFilesTest, RulesOfASettingsFileInADirectoryAreNotFollowed) {
  // `rules:` applies only when the settings file is named directly.
  TempDir dir;
  dir.Write("other/edge.yaml", kExampleA);
  dir.Write("conf/sluice.yaml", "rules: ../other\n");
  const LoadResult result = LoadConfig({dir.Path("conf")});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_THAT(result.config->domains, IsEmpty());
}

TEST(LoaderFilesTest, MillionRowClientsCsvLoads) {
  TempDir dir;
  constexpr int kRows = 1000000;
  {
    std::string csv = "key,plan\n";
    csv.reserve(size_t{kRows} * 24);
    static const char* kPlanNames[] = {"free", "pro", "enterprise"};
    for (int i = 0; i < kRows; ++i) {
      csv += "key-";
      csv += std::to_string(i);
      csv += ',';
      csv += kPlanNames[i % 3];
      csv += '\n';
    }
    dir.Write("clients.csv", csv);
  }
  dir.Write("plans.yaml", std::string(kPlans) + "clients: clients.csv\n");
  const auto start = std::chrono::steady_clock::now();
  const LoadResult result = LoadConfig({dir.path().string()});
  const auto elapsed = std::chrono::steady_clock::now() - start;
  std::cout << "[ timing   ] 1M-row clients CSV loaded in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms\n";
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  const Domain* plans = result.config->FindDomain("plans");
  ASSERT_NE(plans->clients, nullptr);
  EXPECT_EQ(plans->clients->size(), size_t{kRows});
  EXPECT_EQ(plans->clients->Find("key-0")->name, "free");
  EXPECT_EQ(plans->clients->Find("key-1")->name, "pro");
  EXPECT_EQ(plans->clients->Find("key-500000")->name, "enterprise");
  EXPECT_EQ(plans->clients->Find("key-999999")->name, "free");
}

TEST(LoaderFilesTest, VersionChangesWhenAFileChangesAndNotOtherwise) {
  TempDir dir;
  dir.Write("edge.yaml", kExampleA);
  dir.Write("plans.yaml", std::string(kPlans) + "clients: clients.csv\n");
  dir.Write("clients.csv", "k1,pro\n");
  const auto version = [&] {
    const LoadResult r = LoadConfig({dir.path().string()});
    EXPECT_THAT(r.errors, IsEmpty()) << Joined(r.errors);
    return r.config ? r.config->version : std::string();
  };
  const std::string v1 = version();
  EXPECT_EQ(v1.size(), 16u);
  EXPECT_EQ(version(), v1);  // same files, same version

  dir.Write("notes.txt", "ignored files do not count");
  EXPECT_EQ(version(), v1);

  dir.Write("edge.yaml", std::string(kExampleA) + "# a comment\n");
  const std::string v2 = version();
  EXPECT_NE(v2, v1);

  dir.Write("clients.csv", "k1,free\n");  // the clients file is part of the configuration
  const std::string v3 = version();
  EXPECT_NE(v3, v2);

  dir.Write("clients.csv", "k1,pro\n");
  dir.Write("edge.yaml", kExampleA);
  EXPECT_EQ(version(), v1);  // back to the same bytes, back to the same version
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

// ---------------------------------------------------------------------------------------------

TEST(SuggestTest, ClosestCandidateWithinASmallDistance) {
  const std::vector<std::string_view> keys = {"rate_limit", "requests_per_unit", "descriptors",
                                              "value"};
  EXPECT_EQ(Suggest("ratelimit", keys), "rate_limit");
  EXPECT_EQ(Suggest("rate_limits", keys), "rate_limit");
  EXPECT_EQ(Suggest("requests_per_units", keys), "requests_per_unit");
  EXPECT_EQ(Suggest("vaule", keys), "value");
  EXPECT_EQ(Suggest("frobnicate", keys), "");
  EXPECT_EQ(Suggest("x", keys), "");
}

}  // namespace
}  // namespace sluice::rules
