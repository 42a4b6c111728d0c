// The engine (engine.h) on envoyproxy/ratelimit's examples A-D (engine_testing.h; as in
// tests/rules/examples/), loaded from YAML: which limit applies to each request, blocked and
// allowed entries, wildcards, unlimited, shadow mode, a shared threshold, replaces, hits_addend and
// an override. Time is a ManualClock; t0 = 1700000000 s, 20 s into a minute.

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"

namespace sluice::engine {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;
using Code = DescriptorResult::Code;
using test::Desc;
using test::EngineTest;
using test::kDayUs;
using test::kExampleA;
using test::kExampleB;
using test::kExampleC;
using test::kExampleD;
using test::kHourUs;
using test::kMinuteUs;
using test::kSecondUs;
using test::Peek;
using test::Req;

// ---------------------------------------------------------------------------------------------
// Example A: per-IP limit with block and allow entries.

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

}  // namespace
}  // namespace sluice::engine
