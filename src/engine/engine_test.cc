// The decision engine (engine.h) on configurations loaded from YAML: example domains A-D in
// envoyproxy/ratelimit's format (as in tests/rules/examples/), several limits at once,
// all-or-nothing consumption (also under 8 threads), count_denied, plans, shadow mode and the
// headline (most restrictive) limit. Time is a ManualClock; t0 = 1700000000 s, 20 s into a minute.

#include "engine/engine.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/memory/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "tests/support/temp_dir.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using Code = DescriptorResult::Code;
using testing::TempDir;

constexpr int64_t kSecondUs = 1000000;
constexpr int64_t kMinuteUs = 60 * kSecondUs;
constexpr int64_t kHourUs = 3600 * kSecondUs;
constexpr int64_t kDayUs = 86400 * kSecondUs;
// 2023-11-14 22:13:20 UTC: 20 s into a minute, 800 s into an hour, 80000 s into a day.
constexpr int64_t kT0 = int64_t{1700000000} * kSecondUs;

Descriptor Desc(engine::Entries entries) {
  Descriptor d;
  d.entries = std::move(entries);
  return d;
}

Descriptor Peek(engine::Entries entries) {
  Descriptor d = Desc(std::move(entries));
  d.hits_addend = 0;
  return d;
}

// "u0", "u1", ... (built without `"u" + std::string`, which trips GCC 12's -Wrestrict).
std::string UserName(int u) {
  std::string name = std::to_string(u);
  name.insert(name.begin(), 'u');
  return name;
}

Request Req(std::string domain, engine::Descriptors descriptors, uint64_t hits_addend = 1) {
  Request r;
  r.domain = std::move(domain);
  r.descriptors = std::move(descriptors);
  r.hits_addend = hits_addend;
  return r;
}

std::string Joined(const std::vector<rules::ConfigError>& errors) {
  std::string s;
  for (const auto& e : errors) s += e.ToString() + "\n";
  return s;
}

class EngineTest : public ::testing::Test {
 protected:
  void Load(std::string_view yaml) {
    rules::LoadResult result = rules::LoadConfigText("test.yaml", yaml);
    ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
    config_ = result.config;
  }

  void LoadPaths(const std::vector<std::string>& paths) {
    rules::LoadResult result = rules::LoadConfig(paths);
    ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
    config_ = result.config;
  }

  Response Check(const Request& request) {
    return engine_.Check(*config_, request, clock_.NowMicros());
  }

  // One descriptor, cost `hits`.
  Response Check1(const std::string& domain, engine::Entries entries, uint64_t hits = 1) {
    return Check(Req(domain, {Desc(std::move(entries))}, hits));
  }

  // The remaining of descriptor `d`'s limit `l`.
  static int64_t Remaining(const Response& r, size_t d = 0, size_t l = 0) {
    if (d >= r.descriptors.size() || l >= r.descriptors[d].limits.size()) return -100;
    return r.descriptors[d].limits[l].decision.remaining;
  }

  ManualClock clock_{kT0};
  store::MemoryStore store_{store::MemoryStore::Options{.max_entries = 1 << 16, .shards = 16},
                            &clock_};
  Engine engine_{&store_};
  std::shared_ptr<const rules::Config> config_;
};

// ---------------------------------------------------------------------------------------------
// Example A: per-IP limit with block and allow entries.

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

TEST_F(EngineTest, ExampleA_EleventhHitWithinOneSecondIsDenied) {
  Load(kExampleA);
  for (int i = 0; i < 10; ++i) {
    const Response r = Check1("edge", {{"remote_address", "10.0.0.1"}});
    ASSERT_TRUE(r.allowed) << "hit " << i + 1;
    EXPECT_TRUE(r.domain_found);
    ASSERT_THAT(r.descriptors, SizeIs(1));
    EXPECT_EQ(r.descriptors[0].code, Code::kOk);
    ASSERT_THAT(r.descriptors[0].limits, SizeIs(1));
    EXPECT_EQ(Remaining(r), 9 - i);
    EXPECT_EQ(r.descriptors[0].limits[0].decision.reset_after_us, kSecondUs);
    EXPECT_EQ(r.descriptors[0].limits[0].unit, "second");
  }
  const Response r = Check1("edge", {{"remote_address", "10.0.0.1"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.descriptors[0].code, Code::kOverLimit);
  ASSERT_NE(r.descriptors[0].rule, nullptr);
  EXPECT_EQ(r.descriptors[0].rule->path, "edge.remote_address");
  EXPECT_EQ(Remaining(r), 0);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.retry_after_us, kSecondUs);
  ASSERT_NE(r.Headline(), nullptr);
  EXPECT_EQ(r.headline_descriptor, 0);

  // Counted per IP: another address has its own 10.
  EXPECT_EQ(Remaining(Check1("edge", {{"remote_address", "10.0.0.2"}})), 9);
  // The next second is a new window.
  clock_.Advance(kSecondUs);
  const Response next = Check1("edge", {{"remote_address", "10.0.0.1"}});
  EXPECT_TRUE(next.allowed);
  EXPECT_EQ(Remaining(next), 9);
}

TEST_F(EngineTest, ExampleA_BlockedIpIsDeniedOnTheFirstHit) {
  Load(kExampleA);
  const Response r = Check1("edge", {{"remote_address", "50.0.0.5"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.descriptors[0].code, Code::kOverLimit);
  EXPECT_EQ(r.descriptors[0].rule->path, "edge.remote_address_50.0.0.5");
  EXPECT_EQ(Remaining(r), 0);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.retry_after_us, Decision::kNever);
}

TEST_F(EngineTest, ExampleA_AllowListEntryHasNoLimit) {
  Load(kExampleA);
  for (int i = 0; i < 50; ++i) {
    const Response r = Check1("edge", {{"remote_address", "10.1.1.1"}});
    ASSERT_TRUE(r.allowed);
    EXPECT_EQ(r.descriptors[0].code, Code::kOk);
    EXPECT_THAT(r.descriptors[0].limits, IsEmpty());
    EXPECT_EQ(r.Headline(), nullptr);
    EXPECT_EQ(r.headline_descriptor, -1);
  }
}

TEST_F(EngineTest, ExampleA_DeeperRequestHasNoLimit) {
  Load(kExampleA);
  for (int i = 0; i < 20; ++i) {
    const Response r = Check1("edge", {{"remote_address", "10.0.0.1"}, {"path", "/x"}});
    ASSERT_TRUE(r.allowed);
    EXPECT_THAT(r.descriptors[0].limits, IsEmpty());
    EXPECT_EQ(r.descriptors[0].rule, nullptr);
  }
  EXPECT_EQ(Remaining(Check1("edge", {{"remote_address", "10.0.0.1"}})), 9);  // not counted
}

TEST_F(EngineTest, ExampleA_UnknownDomainIsAllowedWithoutLimit) {
  Load(kExampleA);
  const Response r = Check1("other", {{"remote_address", "10.0.0.1"}});
  EXPECT_FALSE(r.domain_found);
  EXPECT_TRUE(r.allowed);
  ASSERT_THAT(r.descriptors, SizeIs(1));
  EXPECT_THAT(r.descriptors[0].limits, IsEmpty());
  EXPECT_EQ(r.Headline(), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Example B: nesting, key-only defaults, no backtracking.

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

TEST_F(EngineTest, ExampleB_WhichLimitAppliesToEachRequest) {
  Load(kExampleB);
  Response r = Check1("api", {{"tenant", "foo"}, {"method", "POST"}});
  ASSERT_THAT(r.descriptors[0].limits, SizeIs(1));
  EXPECT_EQ(r.descriptors[0].rule->path, "api.tenant.method_POST");
  EXPECT_EQ(r.descriptors[0].limits[0].limit.requests, 100u);
  EXPECT_EQ(r.descriptors[0].limits[0].limit.window_us, kMinuteUs);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.reset_after_us, 40 * kSecondUs);
  EXPECT_EQ(Remaining(r), 99);

  r = Check1("api", {{"tenant", "foo"}, {"method", "GET"}});
  EXPECT_EQ(r.descriptors[0].rule->path, "api.tenant.method");
  EXPECT_EQ(r.descriptors[0].limits[0].limit.requests, 1000u);
  EXPECT_EQ(Remaining(r), 999);

  r = Check1("api", {{"tenant", "acme"}, {"method", "POST"}});
  EXPECT_EQ(r.descriptors[0].rule->path, "api.tenant_acme.method");
  EXPECT_EQ(r.descriptors[0].limits[0].limit.requests, 5000u);
  EXPECT_EQ(Remaining(r), 4999);

  r = Check1("api", {{"tenant", "foo"}});
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(r.descriptors[0].limits, IsEmpty());

  r = Check1("api", {{"tenant", "foo"}, {"method", "POST"}, {"user", "bob"}});
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(r.descriptors[0].limits, IsEmpty());
}

TEST_F(EngineTest, ExampleB_TwoDescriptorsAreBothCountedAndEitherDenies) {
  Load(kExampleB);
  const Descriptor global = Desc({{"generic_key", "global"}});
  const Descriptor post = Desc({{"tenant", "foo"}, {"method", "POST"}});
  Response r = Check(Req("api", {global, post}));
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(Remaining(r, 0), 1999);
  EXPECT_EQ(Remaining(r, 1), 99);

  EXPECT_TRUE(Check(Req("api", {post}, 99)).allowed);  // POST exhausted
  r = Check(Req("api", {global, post}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.descriptors[0].code, Code::kOk);
  EXPECT_EQ(r.descriptors[1].code, Code::kOverLimit);
  EXPECT_EQ(Remaining(r, 0), 1999);  // nothing consumed
  EXPECT_EQ(Remaining(Check(Req("api", {global}))), 1998);
}

// ---------------------------------------------------------------------------------------------
// Example C: wildcards, unlimited, shadow, shared threshold.

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

TEST_F(EngineTest, ExampleC_UnlimitedMatchesAndNeverLimits) {
  Load(kExampleC);
  for (int i = 0; i < 200; ++i) {
    const Response r = Check1("files", {{"path", "/downloads/free/a.zip"}});
    ASSERT_TRUE(r.allowed);
    EXPECT_TRUE(r.descriptors[0].unlimited);
    ASSERT_NE(r.descriptors[0].rule, nullptr);
    EXPECT_EQ(r.descriptors[0].rule->path, "files.path_/downloads/free/*");
    EXPECT_THAT(r.descriptors[0].limits, IsEmpty());
    EXPECT_EQ(r.Headline(), nullptr);
  }
}

TEST_F(EngineTest, ExampleC_WildcardCountsEachValueSeparately) {
  Load(kExampleC);
  Response r = Check1("files", {{"path", "/downloads/x.zip"}});
  EXPECT_EQ(r.descriptors[0].rule->path, "files.path_/downloads/*");
  EXPECT_EQ(r.descriptors[0].limits[0].decision.reset_after_us, 2800 * kSecondUs);
  EXPECT_EQ(Remaining(r), 99);
  EXPECT_EQ(Remaining(Check1("files", {{"path", "/downloads/x.zip"}})), 98);
  EXPECT_EQ(Remaining(Check1("files", {{"path", "/downloads/y.zip"}})), 99);
}

TEST_F(EngineTest, ExampleC_ExactValueBeatsWildcards) {
  Load(kExampleC);
  const Response r = Check1("files", {{"path", "/downloads/big.iso"}});
  EXPECT_EQ(r.descriptors[0].rule->path, "files.path_/downloads/big.iso");
  EXPECT_EQ(r.descriptors[0].limits[0].limit.window_us, kDayUs);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.reset_after_us, 6400 * kSecondUs);
  EXPECT_EQ(Remaining(r), 2);
  EXPECT_TRUE(Check1("files", {{"path", "/downloads/big.iso"}}, 2).allowed);
  EXPECT_FALSE(Check1("files", {{"path", "/downloads/big.iso"}}).allowed);
}

TEST_F(EngineTest, ExampleC_ShadowModeAllowsButReportsOverLimit) {
  Load(kExampleC);
  EXPECT_EQ(Remaining(Check1("files", {{"api_key", "k1"}}, 60)), 0);
  for (int i = 0; i < 3; ++i) {
    const Response r = Check1("files", {{"api_key", "k1"}});
    EXPECT_TRUE(r.allowed);
    EXPECT_EQ(r.descriptors[0].code, Code::kOk);
    ASSERT_THAT(r.descriptors[0].limits, SizeIs(1));
    EXPECT_TRUE(r.descriptors[0].limits[0].shadow);
    EXPECT_FALSE(r.descriptors[0].limits[0].decision.allowed);  // would have been denied
    EXPECT_EQ(Remaining(r), 0);
    ASSERT_NE(r.Headline(), nullptr);
    EXPECT_EQ(r.Headline()->decision.remaining, 0);
  }
  EXPECT_EQ(Remaining(Check1("files", {{"api_key", "k2"}})), 59);  // per value
}

TEST_F(EngineTest, ExampleC_ShareThresholdSharesOneCounter) {
  Load(kExampleC);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(Check1("files", {{"bucket", "reports-2024"}}).allowed);
  for (int i = 0; i < 4; ++i) {
    const Response r = Check1("files", {{"bucket", "reports-2025"}});
    EXPECT_TRUE(r.allowed);
    EXPECT_EQ(Remaining(r), 3 - i);
  }
  EXPECT_FALSE(Check1("files", {{"bucket", "reports-2025"}}).allowed);  // the 11th overall
  EXPECT_FALSE(Check1("files", {{"bucket", "reports-x"}}).allowed);
  const Response other = Check1("files", {{"bucket", "logs-1"}});
  EXPECT_TRUE(other.allowed);
  EXPECT_THAT(other.descriptors[0].limits, IsEmpty());
}

// ---------------------------------------------------------------------------------------------
// Example D: several descriptors, replaces, hits_addend, override.

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

TEST_F(EngineTest, ExampleD_ReplacesDropsTheReplacedRule) {
  Load(kExampleD);
  const Response r =
      Check(Req("checkout", {Desc({{"user", "u1"}}), Desc({{"plan", "premium"}, {"user", "u1"}}),
                             Desc({{"route", "/pay"}})}));
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(r.descriptors[0].limits, IsEmpty());  // per_user replaced: OK without limit
  EXPECT_EQ(r.descriptors[0].code, Code::kOk);
  EXPECT_EQ(r.descriptors[1].rule->path, "checkout.plan_premium.user");
  EXPECT_EQ(Remaining(r, 1), 99);
  EXPECT_EQ(Remaining(r, 2), 4);
  EXPECT_EQ(r.descriptors[2].limits[0].decision.reset_after_us, kSecondUs);
  // per_user was not counted.
  EXPECT_EQ(Remaining(Check1("checkout", {{"user", "u1"}})), 19);
}

TEST_F(EngineTest, ExampleD_BasicPlanKeepsPerUser) {
  Load(kExampleD);
  const Response r =
      Check(Req("checkout", {Desc({{"user", "u1"}}), Desc({{"plan", "basic"}, {"user", "u1"}}),
                             Desc({{"route", "/pay"}})}));
  EXPECT_TRUE(r.allowed);
  ASSERT_THAT(r.descriptors[0].limits, SizeIs(1));
  EXPECT_EQ(r.descriptors[0].limits[0].name, "per_user");
  EXPECT_EQ(Remaining(r, 0), 19);
  EXPECT_THAT(r.descriptors[1].limits, IsEmpty());
  EXPECT_EQ(Remaining(r, 2), 4);
}

TEST_F(EngineTest, ExampleD_HitsAddendAddsToEveryCountedDescriptor) {
  Load(kExampleD);
  const Response r = Check(Req("checkout",
                               {Desc({{"user", "u1"}}), Desc({{"plan", "premium"}, {"user", "u1"}}),
                                Desc({{"route", "/pay"}})},
                               3));
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(Remaining(r, 1), 97);
  EXPECT_EQ(Remaining(r, 2), 2);
  EXPECT_EQ(Remaining(Check1("checkout", {{"user", "u1"}})), 19);
}

TEST_F(EngineTest, ExampleD_DescriptorHitsAddendZeroPeeks) {
  Load(kExampleD);
  for (int i = 0; i < 3; ++i) {
    const Response r = Check(
        Req("checkout", {Desc({{"plan", "premium"}, {"user", "u1"}}), Peek({{"route", "/pay"}})}));
    EXPECT_TRUE(r.allowed);
    EXPECT_EQ(Remaining(r, 0), 99 - i);
    EXPECT_EQ(Remaining(r, 1), 5);  // reports remaining, increments nothing
  }
  EXPECT_EQ(Remaining(Check1("checkout", {{"route", "/pay"}})), 4);
}

TEST_F(EngineTest, ExampleD_OverrideIgnoresTheYaml) {
  Load(kExampleD);
  Descriptor d3 = Desc({{"user", "u1"}});
  d3.limit = LimitOverride{.requests_per_unit = 2, .window_us = kHourUs, .unit = "HOUR"};
  Response r = Check(Req("checkout", {d3}));
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.descriptors[0].rule, nullptr);
  ASSERT_THAT(r.descriptors[0].limits, SizeIs(1));
  const AppliedLimit& applied = r.descriptors[0].limits[0];
  EXPECT_EQ(applied.limit.algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(applied.limit.requests, 2u);
  EXPECT_EQ(applied.limit.window_us, kHourUs);
  EXPECT_FALSE(applied.shadow);
  EXPECT_EQ(applied.decision.remaining, 1);
  EXPECT_EQ(applied.decision.reset_after_us, 2800 * kSecondUs);  // epoch-aligned hour
  EXPECT_TRUE(Check(Req("checkout", {d3})).allowed);
  r = Check(Req("checkout", {d3}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.descriptors[0].code, Code::kOverLimit);
  // The configured per_user limit of the same entries was never touched.
  EXPECT_EQ(Remaining(Check1("checkout", {{"user", "u1"}})), 19);
}

// ---------------------------------------------------------------------------------------------
// Several limits on one descriptor: "10 r/s AND 1000/day".

constexpr std::string_view kMulti = R"yaml(domain: multi
descriptors:
  - key: api_key
    limits:
      - {requests: 10, window: 1s, algorithm: token_bucket, burst: 20}
      - {requests: 1000, window: 1d, name: daily}
)yaml";

TEST_F(EngineTest, TenPerSecondAndThousandPerDay) {
  Load(kMulti);
  for (int i = 0; i < 20; ++i) {  // the burst
    const Response r = Check1("multi", {{"api_key", "a"}});
    ASSERT_TRUE(r.allowed) << i;
    EXPECT_EQ(Remaining(r, 0, 0), 19 - i);
    EXPECT_EQ(Remaining(r, 0, 1), 999 - i);
    EXPECT_EQ(r.headline_limit, 0);  // the bucket has the lower remaining
  }
  Response r = Check1("multi", {{"api_key", "a"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_FALSE(r.descriptors[0].limits[0].decision.allowed);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.retry_after_us, 100000);  // 1 token per 100 ms
  EXPECT_TRUE(r.descriptors[0].limits[1].decision.allowed);
  EXPECT_EQ(Remaining(r, 0, 1), 980);  // the day consumed nothing
  EXPECT_EQ(r.headline_limit, 0);

  // 10 per second for 98 more seconds: 20 + 980 = 1000 for the day.
  for (int s = 1; s <= 98; ++s) {
    clock_.Advance(kSecondUs);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(Check1("multi", {{"api_key", "a"}}).allowed) << s;
    ASSERT_FALSE(Check1("multi", {{"api_key", "a"}}).allowed) << s;  // the bucket is empty again
  }
  clock_.Advance(kSecondUs);  // t0 + 99 s: the bucket has 10 tokens, the day none
  r = Check1("multi", {{"api_key", "a"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_TRUE(r.descriptors[0].limits[0].decision.allowed);
  EXPECT_EQ(Remaining(r, 0, 0), 10);  // the bucket consumed nothing
  EXPECT_FALSE(r.descriptors[0].limits[1].decision.allowed);
  EXPECT_EQ(r.headline_limit, 1);
  EXPECT_EQ(r.Headline()->name, "daily");
  EXPECT_EQ(r.Headline()->decision.retry_after_us, (6400 - 99) * kSecondUs);
  // Another key is unaffected.
  EXPECT_TRUE(Check1("multi", {{"api_key", "b"}}).allowed);
}

// ---------------------------------------------------------------------------------------------
// All-or-nothing: a denied request consumes nothing, in any limit of any descriptor.

TEST_F(EngineTest, CostTwoAgainstOneRemainingReportsOne) {
  Load(
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: "
      "3}\n");
  EXPECT_EQ(Remaining(Check1("d", {{"k", "v"}}, 2)), 1);
  const Response r = Check1("d", {{"k", "v"}}, 2);
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r), 1);
  EXPECT_EQ(r.Headline()->decision.remaining, 1);
  EXPECT_EQ(r.Headline()->decision.retry_after_us, 40 * kSecondUs);
  const Response last = Check1("d", {{"k", "v"}});
  EXPECT_TRUE(last.allowed);
  EXPECT_EQ(Remaining(last), 0);
}

TEST_F(EngineTest, DeniedRequestConsumesNothingInItsOtherLimits) {
  Load(R"yaml(domain: d
descriptors:
  - key: k
    limits:
      - {requests: 2, window: 1m}
      - {requests: 10, window: 1m}
)yaml");
  EXPECT_TRUE(Check1("d", {{"k", "v"}}).allowed);
  EXPECT_TRUE(Check1("d", {{"k", "v"}}).allowed);
  for (int i = 0; i < 5; ++i) {
    const Response r = Check1("d", {{"k", "v"}});
    EXPECT_FALSE(r.allowed);
    EXPECT_TRUE(r.descriptors[0].limits[1].decision.allowed);
    EXPECT_EQ(Remaining(r, 0, 1), 8);
  }
  EXPECT_EQ(Remaining(Check(Req("d", {Peek({{"k", "v"}})})), 0, 1), 8);
}

TEST_F(EngineTest, DeniedRequestConsumesNothingAcrossDescriptorsOfAnyAlgorithm) {
  Load(R"yaml(domain: d
descriptors:
  - key: gate
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tb
    rate_limit: {algorithm: token_bucket, requests: 5, window: 1m}
  - key: lb
    rate_limit: {algorithm: leaky_bucket, requests: 5, window: 1m, burst: 4}
  - key: fw
    rate_limit: {algorithm: fixed_window, requests: 5, window: 1m}
  - key: sl
    rate_limit: {algorithm: sliding_log, requests: 5, window: 1m}
  - key: sw
    rate_limit: {algorithm: sliding_window, requests: 5, window: 1m}
)yaml");
  const std::vector<Descriptor> others = {Desc({{"tb", "x"}}), Desc({{"lb", "x"}}),
                                          Desc({{"fw", "x"}}), Desc({{"sl", "x"}}),
                                          Desc({{"sw", "x"}})};
  engine::Descriptors all = {Desc({{"gate", "x"}})};
  all.insert(all.end(), others.begin(), others.end());
  const Response first = Check(Req("d", all));
  ASSERT_TRUE(first.allowed);
  for (int i = 0; i < 3; ++i) {
    const Response denied = Check(Req("d", all));
    ASSERT_FALSE(denied.allowed);
    EXPECT_EQ(denied.descriptors[0].code, Code::kOverLimit);
    for (size_t d = 1; d < all.size(); ++d) {
      EXPECT_EQ(denied.descriptors[d].code, Code::kOk) << d;
      EXPECT_EQ(Remaining(denied, d), Remaining(first, d)) << d;
      EXPECT_EQ(denied.descriptors[d].limits[0].decision.delay_us, 0) << d;
    }
  }
  // Each of the others has exactly its first request's worth consumed: 4 more of cost 1 fit, and
  // the 5th does not (leaky_bucket: capacity burst + 1 = 5 at one instant).
  for (size_t d = 0; d < others.size(); ++d) {
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(Check(Req("d", {others[d]})).allowed) << d << " " << i;
    EXPECT_FALSE(Check(Req("d", {others[d]})).allowed) << d;
  }
}

// ---------------------------------------------------------------------------------------------
// count_denied: true reproduces envoyproxy/ratelimit's counting: every hit, denied or not.

constexpr std::string_view kCountDenied = R"yaml(domain: up
count_denied: true
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 5}
)yaml";

TEST_F(EngineTest, CountDeniedCountsDeniedRequests) {
  Load(kCountDenied);
  EXPECT_EQ(Remaining(Check1("up", {{"ip", "1"}})), 1);
  // Cost 2 against 1 left: over (count 3 > 2), counted, remaining 0 (upstream's numbers).
  Response r = Check1("up", {{"ip", "1"}}, 2);
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r), 0);
  // Unlike sluice's default, the 1 that was left is gone: the denied request was counted.
  r = Check1("up", {{"ip", "1"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r), 0);
}

TEST_F(EngineTest, CountDeniedCountsOtherDescriptorsEvenWhenOneIsOver) {
  Load(kCountDenied);
  EXPECT_TRUE(Check1("up", {{"ip", "1"}}, 2).allowed);
  const Response r = Check(Req("up", {Desc({{"ip", "1"}}), Desc({{"route", "/r"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.descriptors[0].code, Code::kOverLimit);
  EXPECT_EQ(Remaining(r, 1), 4);
  EXPECT_EQ(Remaining(Check1("up", {{"route", "/r"}})), 3);
}

TEST_F(EngineTest, WithoutCountDeniedDeniedRequestsAreNotCounted) {
  Load(R"yaml(domain: d
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 5}
)yaml");
  EXPECT_EQ(Remaining(Check1("d", {{"ip", "1"}})), 1);
  Response r = Check1("d", {{"ip", "1"}}, 2);
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r), 1);
  EXPECT_TRUE(Check1("d", {{"ip", "1"}}).allowed);
  r = Check(Req("d", {Desc({{"ip", "1"}}), Desc({{"route", "/r"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r, 1), 5);
}

TEST_F(EngineTest, CountDeniedFromTheSettingsFileAndPerDomainOverride) {
  TempDir dir;
  dir.Write("sluice.yaml", "count_denied: true\n");
  dir.Write("global.yaml",
            "domain: global\ndescriptors:\n  - key: ip\n"
            "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  dir.Write("local.yaml",
            "domain: local\ncount_denied: false\ndescriptors:\n  - key: ip\n"
            "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  LoadPaths({dir.path().string()});
  ASSERT_NE(config_, nullptr);
  // global: the settings' count_denied applies; cost 2 against 1 left is counted -> remaining 0.
  Response r = Check1("global", {{"ip", "1"}}, 2);
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r), 0);
  EXPECT_FALSE(Check1("global", {{"ip", "1"}}).allowed);
  // local: count_denied: false in the domain file wins.
  r = Check1("local", {{"ip", "1"}}, 2);
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r), 1);
  EXPECT_TRUE(Check1("local", {{"ip", "1"}}).allowed);
}

TEST_F(EngineTest, CheckAllIsAllOrNothingAcrossDomains) {
  TempDir dir;
  dir.Write("a.yaml",
            "domain: a\ndescriptors:\n  - key: ip\n"
            "    rate_limit: {unit: minute, requests_per_unit: 5}\n");
  dir.Write("b.yaml",
            "domain: b\ndescriptors:\n  - key: user\n"
            "    rate_limit: {unit: minute, requests_per_unit: 2}\n");
  LoadPaths({dir.path().string()});
  ASSERT_NE(config_, nullptr);
  const std::vector<Request> both = {Req("a", {Desc({{"ip", "1"}})}),
                                     Req("b", {Desc({{"user", "x"}})})};
  for (int i = 0; i < 2; ++i) {
    const std::vector<Response> r = engine_.CheckAll(*config_, both, clock_.NowMicros());
    ASSERT_THAT(r, SizeIs(2));
    EXPECT_TRUE(r[0].allowed && r[1].allowed);
  }
  // b is out: the batch is denied and a consumes nothing.
  std::vector<Response> r = engine_.CheckAll(*config_, both, clock_.NowMicros());
  EXPECT_FALSE(r[0].allowed);
  EXPECT_FALSE(r[1].allowed);
  EXPECT_EQ(r[0].descriptors[0].code, Code::kOk);
  EXPECT_EQ(r[1].descriptors[0].code, Code::kOverLimit);
  EXPECT_EQ(Remaining(Check(Req("a", {Peek({{"ip", "1"}})}))), 3);

  // Combine: descriptors in order, the headline is b's denying limit.
  const Response combined = Combine(std::span(r));
  EXPECT_FALSE(combined.allowed);
  ASSERT_THAT(combined.descriptors, SizeIs(2));
  EXPECT_EQ(combined.headline_descriptor, 1);
  EXPECT_EQ(combined.remaining, 0);
}

// ---------------------------------------------------------------------------------------------
// Plans.

constexpr std::string_view kPlans = R"yaml(domain: plans
plans:
  free: {limits: [{requests: 2, window: 1m}]}
  pro:  {limits: [{requests: 5, window: 1m}, {requests: 100, window: 1d, name: pro_daily}]}
default_plan: free
descriptors:
  - key: plan
    descriptors:
      - key: api_key
        plan_from: plan
  - key: api_key
    plan_from: plan
)yaml";

TEST_F(EngineTest, PlanFromTheRequestEntry) {
  Load(kPlans);
  const Response r = Check1("plans", {{"plan", "pro"}, {"api_key", "abc"}});
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.descriptors[0].plan, "pro");
  ASSERT_THAT(r.descriptors[0].limits, SizeIs(2));
  EXPECT_EQ(r.descriptors[0].limits[0].limit.requests, 5u);
  EXPECT_EQ(r.descriptors[0].limits[1].name, "pro_daily");
  EXPECT_EQ(Remaining(r, 0, 0), 4);
  EXPECT_EQ(Remaining(r, 0, 1), 99);
}

TEST_F(EngineTest, UnknownOrMissingPlanFallsBackToDefaultPlan) {
  Load(kPlans);
  Response r = Check1("plans", {{"plan", "gold"}, {"api_key", "abc"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
  EXPECT_EQ(Remaining(r), 1);
  r = Check1("plans", {{"api_key", "abc"}});  // no plan entry, no clients file
  EXPECT_EQ(r.descriptors[0].plan, "free");
  EXPECT_EQ(Remaining(r), 1);
  r = Check1("plans", {{"plan", ""}, {"api_key", "abc"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
}

TEST_F(EngineTest, PlansCountPerFullDescriptor) {
  Load(kPlans);
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(Check1("plans", {{"plan", "pro"}, {"api_key", "abc"}}).allowed);
  EXPECT_FALSE(Check1("plans", {{"plan", "pro"}, {"api_key", "abc"}}).allowed);
  // Another API key on the same plan, and the same key on another plan, are other counters.
  EXPECT_EQ(Remaining(Check1("plans", {{"plan", "pro"}, {"api_key", "def"}})), 4);
  EXPECT_EQ(Remaining(Check1("plans", {{"plan", "free"}, {"api_key", "abc"}})), 1);
  EXPECT_EQ(Remaining(Check1("plans", {{"plan", "gold"}, {"api_key", "abc"}})), 1);
  EXPECT_EQ(Remaining(Check1("plans", {{"api_key", "abc"}})), 1);
}

TEST_F(EngineTest, ClientsCsvLookupByApiKey) {
  TempDir dir;
  dir.Write("plans.yaml", std::string(kPlans) + "clients: clients.csv\n");
  dir.Write("clients.csv", "key,plan\nk-pro,pro\nk-free,free\n");
  LoadPaths({dir.path().string()});
  ASSERT_NE(config_, nullptr);
  Response r = Check1("plans", {{"api_key", "k-pro"}});
  EXPECT_EQ(r.descriptors[0].plan, "pro");
  EXPECT_EQ(Remaining(r), 4);
  r = Check1("plans", {{"api_key", "k-free"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
  r = Check1("plans", {{"api_key", "unlisted"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
  // A plan in the request takes precedence over the clients file.
  r = Check1("plans", {{"plan", "free"}, {"api_key", "k-pro"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
}

// ---------------------------------------------------------------------------------------------
// The headline: the most restrictive limit over the whole request.

TEST_F(EngineTest, HeadlineOnAllowIsTheLowestRemaining) {
  Load(kExampleB);
  const Response r = Check(
      Req("api", {Desc({{"generic_key", "global"}}), Desc({{"tenant", "foo"}, {"method", "POST"}}),
                  Desc({{"tenant", "foo"}, {"method", "GET"}})}));
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.headline_descriptor, 1);
  EXPECT_EQ(r.headline_limit, 0);
  EXPECT_EQ(r.Headline()->decision.remaining, 99);
}

TEST_F(EngineTest, HeadlineOnDenyIsTheLongestRetry) {
  Load(R"yaml(domain: h
descriptors:
  - key: burst
    rate_limit: {algorithm: token_bucket, requests: 10, window: 1s}
  - key: daily
    rate_limit: {requests: 1, window: 1d}
  - key: roomy
    rate_limit: {requests: 1000, window: 1m}
)yaml");
  EXPECT_TRUE(Check1("h", {{"burst", "a"}}, 10).allowed);
  EXPECT_TRUE(Check1("h", {{"daily", "a"}}).allowed);
  Response r =
      Check(Req("h", {Desc({{"burst", "a"}}), Desc({{"daily", "a"}}), Desc({{"roomy", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.headline_descriptor, 1);
  EXPECT_EQ(r.Headline()->decision.retry_after_us, 6400 * kSecondUs);
  r = Check(Req("h", {Desc({{"daily", "a"}}), Desc({{"burst", "a"}}), Desc({{"roomy", "a"}})}));
  EXPECT_EQ(r.headline_descriptor, 0);
  // Only the bucket denies: it is the headline, even though a roomy limit allows.
  r = Check(Req("h", {Desc({{"roomy", "a"}}), Desc({{"burst", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.headline_descriptor, 1);
  EXPECT_EQ(r.Headline()->decision.retry_after_us, 100000);
}

TEST_F(EngineTest, ShadowDenyNeverDeniesAndARealDenyOutranksIt) {
  Load(R"yaml(domain: s
descriptors:
  - key: shadowed
    limits: [{requests: 1, window: 1d, shadow_mode: true}]
  - key: real
    rate_limit: {unit: minute, requests_per_unit: 2}
)yaml");
  const Descriptor shadowed = Desc({{"shadowed", "a"}});
  const Descriptor real = Desc({{"real", "a"}});
  EXPECT_TRUE(Check(Req("s", {shadowed})).allowed);
  Response r = Check(Req("s", {shadowed, real}));
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.descriptors[0].code, Code::kOk);
  EXPECT_FALSE(r.descriptors[0].limits[0].decision.allowed);
  EXPECT_EQ(r.headline_descriptor, 0);  // remaining 0 beats 1
  EXPECT_EQ(Remaining(r, 1), 1);
  EXPECT_TRUE(Check(Req("s", {real})).allowed);
  r = Check(Req("s", {shadowed, real}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.headline_descriptor, 1);
}

TEST_F(EngineTest, DomainShadowModeAllowsEverything) {
  Load(R"yaml(domain: s
shadow_mode: true
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
)yaml");
  EXPECT_TRUE(Check1("s", {{"k", "a"}}).allowed);
  const Response r = Check1("s", {{"k", "a"}});
  EXPECT_TRUE(r.allowed);
  EXPECT_TRUE(r.descriptors[0].limits[0].shadow);
  EXPECT_FALSE(r.descriptors[0].limits[0].decision.allowed);
  EXPECT_EQ(Remaining(r), 0);
}

// Upstream's requests_per_unit is a uint32 whose zero value denies everything; a rate_limit
// without it loads (upstream does not complain) and denies every request.
TEST_F(EngineTest, MissingRequestsPerUnitDeniesEverythingAsUpstream) {
  Load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n");
  const Response r = Check1("d", {{"k", "v"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.descriptors[0].limits[0].limit.requests, 0u);
}

// docs/rls.md §4: a descriptor's hits_addend when present (0 = peek), else
// max(1, request.hits_addend) — a request-level hits_addend of 0 (RLS's default when unset)
// counts as 1; only a descriptor-level hits_addend of 0 peeks.
TEST_F(EngineTest, RequestHitsAddendZeroCountsAsOne) {
  Load(
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: "
      "3}\n");
  EXPECT_EQ(Remaining(Check1("d", {{"k", "v"}}, 0)), 2);
  EXPECT_EQ(Remaining(Check1("d", {{"k", "v"}}, 0)), 1);
}

// ---------------------------------------------------------------------------------------------
// All-or-nothing under concurrency.

TEST_F(EngineTest, MultiLimitAllOrNothingUnderEightThreads) {
  Load(R"yaml(domain: c
descriptors:
  - key: key
    limits:
      - {requests: 50, window: 1h}
      - {requests: 1000, window: 1h}
      - {requests: 1000, window: 1h, algorithm: sliding_log}
      - {requests: 1000, window: 1h, algorithm: token_bucket}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 60}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 20}
)yaml");
  constexpr int kThreads = 8;
  const int64_t now = clock_.NowMicros();
  const auto run = [&](int per_thread, const std::function<Request(int)>& request_of,
                       std::vector<int>* admitted) {
    admitted->assign(kThreads, 0);
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const Request request = request_of(t);
        while (!go.load(std::memory_order_acquire)) {
        }
        for (int i = 0; i < per_thread; ++i) {
          if (engine_.Check(*config_, request, now).allowed) ++(*admitted)[static_cast<size_t>(t)];
        }
      });
    }
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
  };

  // One descriptor with four limits: exactly 50 admitted; the looser limits took exactly 50.
  std::vector<int> admitted;
  run(
      500,
      [](int) {
        return Req("c", {Desc({{"key", "k"}})});
      },
      &admitted);
  int total = 0;
  for (int a : admitted) total += a;
  EXPECT_EQ(total, 50);
  const Response peek = Check(Req("c", {Peek({{"key", "k"}})}));
  EXPECT_EQ(Remaining(peek, 0, 0), 0);
  EXPECT_EQ(Remaining(peek, 0, 1), 950);
  EXPECT_EQ(Remaining(peek, 0, 2), 950);
  EXPECT_EQ(Remaining(peek, 0, 3), 950);

  // Two descriptors: a tenant (60) shared by 4 users (20 each, 2 threads per user).
  run(
      200,
      [](int t) {
        return Req("c", {Desc({{"tenant", "t"}}), Desc({{"user", UserName(t % 4)}})});
      },
      &admitted);
  total = 0;
  for (int a : admitted) total += a;
  EXPECT_EQ(total, 60);
  EXPECT_EQ(Remaining(Check(Req("c", {Peek({{"tenant", "t"}})}))), 0);
  for (int u = 0; u < 4; ++u) {
    const int by_user = admitted[static_cast<size_t>(u)] + admitted[static_cast<size_t>(u) + 4];
    EXPECT_LE(by_user, 20) << u;
    // The user's counter holds exactly what was admitted for it: denied requests took nothing.
    EXPECT_EQ(Remaining(Check(Req("c", {Peek({{"user", UserName(u)}})}))), 20 - by_user) << u;
  }
}

// Limiter state (in memory and in Redis) is keyed by the state key too, so its bytes must not
// change: each entry's key and value (a shared wildcard's pattern in place of the value), each
// prefixed with its length and ':'. Several descriptors, an override and keys longer than the
// batch's inline room all keep their own.
TEST_F(EngineTest, StateKeysAreLengthPrefixedEntries) {
  Load(kExampleC);
  std::string long_path(300, 'x');
  long_path.insert(0, "/downloads/");
  Descriptor override = Desc({{"api_key", "k1"}, {"path", "/o"}});
  override.limit = LimitOverride{.requests_per_unit = 5, .window_us = kSecondUs, .unit = "second"};
  Consumption consumed;
  const std::vector<Response> responses = engine_.CheckAll(
      *config_,
      std::vector<Request>{Req("files", {Desc({{"bucket", "reports-2025"}}),
                                         Desc({{"path", "/downloads/x.zip"}}), override}),
                           Req("files", {Desc({{"path", long_path}}), Desc({{"api_key", "k1"}})})},
      clock_.NowMicros(), &consumed);
  ASSERT_THAT(responses, SizeIs(2));
  ASSERT_TRUE(responses[0].allowed);
  std::vector<std::string> keys;
  for (const Consumption::Item& item : consumed.items) keys.push_back(item.key);
  EXPECT_THAT(keys, ::testing::ElementsAre("6:bucket9:reports-*", "4:path16:/downloads/x.zip",
                                           "7:api_key2:k14:path2:/o", "4:path311:" + long_path,
                                           "7:api_key2:k1"));
}

// Limiter state (in memory and in Redis) is keyed by this id, so its value must not change: the
// XXH3 hash of the node path, a zero byte, the plan and LimitId, both for an input hashed in one
// call and for one too long for that (streamed).
TEST(RuleLimitIdTest, IsTheHashOfPathZeroPlanAndDefinition) {
  const Limit limit{
      .algorithm = Algorithm::kTokenBucket, .requests = 10, .window_us = 1000000, .burst = 20};
  const uint64_t definition = LimitId(limit);
  for (const std::string& path : {std::string("api/key"), std::string(300, 'p')}) {
    std::string bytes = path;
    bytes += '\0';
    bytes += "pro";
    bytes.append(reinterpret_cast<const char*>(&definition), sizeof definition);
    EXPECT_EQ(RuleLimitId(path, "pro", limit), XXH3_64bits(bytes.data(), bytes.size()))
        << path.size() << " bytes of path";
  }
  EXPECT_NE(RuleLimitId("api/key", "pro", limit), RuleLimitId("api/key", "", limit));
}

// ---------------------------------------------------------------------------------------------
// Quota mode and global shadow mode (issue 19 #4, #5), with the cases of envoyproxy/ratelimit's
// test/service/ratelimit_test.go: there the cache's answers are given, here they come from real
// decisions (a limit spent first where the case has it over).

constexpr std::string_view kQuotaRules = R"yaml(domain: q
descriptors:
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
)yaml";

class QuotaModeTest : public EngineTest {
 protected:
  void SetUp() override { Load(kQuotaRules); }
  // Settings (`quota_mode`, `shadow_mode`) and the rules, loaded together.
  void LoadWith(std::string_view settings) {
    LoadPaths({dir_.Write("settings.yaml", settings), dir_.Write("q.yaml", kQuotaRules)});
  }
  // Spends what is left of `key`=`value`'s limit.
  void Spend(const std::string& key, const std::string& value) {
    for (int i = 0; i < 10 && Check1("q", {{key, value}}).descriptors[0].code == Code::kOk; ++i) {
    }
    ASSERT_EQ(Check1("q", {{key, value}}).descriptors[0].code, Code::kOverLimit);
  }
  static std::vector<Code> Codes(const Response& r) {
    std::vector<Code> out;
    for (const auto& d : r.descriptors) out.push_back(d.code);
    return out;
  }
  // What is left of a descriptor's limit, looked at without consuming.
  int64_t Left(const std::string& key, const std::string& value) {
    Descriptor peek = Desc({{key, value}});
    peek.hits_addend = 0;
    return Remaining(Check(Req("q", {peek})));
  }
  TempDir dir_;
};

TEST_F(QuotaModeTest, ARegularDescriptorOverItsLimitDenies) {  // TestServicePerDescriptorQuotaMode
  Spend("regular", "r");
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOk));
  EXPECT_EQ(Left("quota", "a"), 3);  // all-or-nothing: the quota took nothing
}

TEST_F(QuotaModeTest,
       TheOnlyQuotaOverItsLimitDeniesAndTheOthersGiveBack) {  // ...MixedPerDescriptorModes
  Spend("quota", "a");
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOk, Code::kOverLimit));
  EXPECT_EQ(Left("regular", "r"), 5);  // consumed, then given back
}

// With count_denied (upstream's counting), a denied request counts: nothing is given back.
TEST_F(QuotaModeTest, CountDeniedKeepsWhatARequestWithItsQuotasSpentTook) {
  std::string rules(kQuotaRules);
  rules.replace(0, std::string_view("domain: q\n").size(), "domain: q\ncount_denied: true\n");
  Load(rules);
  Spend("quota", "a");
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Left("regular", "r"), 4);
}

TEST_F(QuotaModeTest, UnderEveryLimitIsOk) {  // ...MixedPerDescriptorModesUnderLimit
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOk, Code::kOk));
  EXPECT_EQ(Left("regular", "r"), 4);
  EXPECT_EQ(Left("quota", "a"), 2);
}

TEST_F(QuotaModeTest,
       AllQuotasOverDeniesSomeOverAdmits) {  // ...QuotaModeOnly{All,Some}OverTheLimit
  Spend("quota", "a");
  Response r = Check(Req("q", {Desc({{"quota", "a"}}), Desc({{"quota2", "b"}})}));
  EXPECT_TRUE(r.allowed);  // one quota left: the request goes through
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOk));  // its status stays OVER
  EXPECT_EQ(Left("quota2", "b"), 4);
  Spend("quota2", "b");
  r = Check(Req("q", {Desc({{"quota", "a"}}), Desc({{"quota2", "b"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOverLimit));
}

TEST_F(QuotaModeTest, AnUnlimitedDescriptorIsNotAQuotaThatPassed) {
  Spend("quota", "a");
  const Response r = Check(Req("q", {Desc({{"quota", "a"}}), Desc({{"free", "x"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_FALSE(r.descriptors[1].quota);
}

TEST_F(QuotaModeTest, GlobalQuotaModeMakesEveryDescriptorAQuota) {  // TestServiceGlobalQuotaMode
  LoadWith("quota_mode: true\n");
  Spend("regular", "r");
  Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_TRUE(r.allowed);  // regular is a quota now, and the other has room
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOk));
  // A descriptor no rule matches counts as a quota that passed.
  r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"nothing", "matches"}})}));
  EXPECT_TRUE(r.allowed);
  Spend("quota", "a");
  r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOverLimit));
}

TEST_F(QuotaModeTest, GlobalShadowModeAdmitsAndKeepsEachStatus) {  // TestServiceGlobalShadowMode
  LoadWith("shadow_mode: true\n");
  Spend("regular", "r");  // (each over-limit answer of Spend was admitted too)
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"nothing", "matches"}})}));
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOk));
  EXPECT_FALSE(r.descriptors[0].limits[0].decision.allowed);
  EXPECT_FALSE(r.descriptors[0].limits[0].shadow);
  // As enforcement would have it, the request that would be denied consumed nothing.
  const Response again = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_TRUE(again.allowed);
  EXPECT_EQ(Left("quota", "a"), 3);
}

TEST_F(QuotaModeTest, GlobalShadowModeOverQuotaModeIsOk) {  // TestServiceQuotaModeWithShadowMode
  LoadWith("shadow_mode: true\n");
  Spend("quota", "a");
  Spend("quota2", "b");
  const Response r = Check(Req("q", {Desc({{"quota", "a"}}), Desc({{"quota2", "b"}})}));
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOverLimit));
}

// Issue 19 (9): near_limit as upstream computes it: admitted with what is used of the limit
// above floor(limit × ratio), the product in single precision (limit 10 at 0.7: 7, where
// double precision would give 6), denials never near.
TEST_F(QuotaModeTest, NearLimitIsPastTheRatioInSinglePrecision) {
  TempDir dir;
  LoadPaths({dir.Write("settings.yaml", "near_limit_ratio: 0.7\n"),
             dir.Write("n.yaml",
                       "domain: n\ndescriptors:\n  - key: k\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 10}\n")});
  std::vector<bool> near;
  for (int i = 0; i < 11; ++i)
    near.push_back(Check1("n", {{"k", "v"}}).descriptors[0].limits[0].near_limit);
  EXPECT_THAT(near, ElementsAre(false, false, false, false, false, false, false,  // used 1..7
                                true, true, true,                                 // used 8..10
                                false));                                          // denied
  Load(
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: "
      "5}\n");
  near.clear();  // the default ratio, 0.8: past 4 of 5
  for (int i = 0; i < 5; ++i)
    near.push_back(Check1("d", {{"k", "v"}}).descriptors[0].limits[0].near_limit);
  EXPECT_THAT(near, ElementsAre(false, false, false, false, true));
}

}  // namespace
}  // namespace sluice::engine
