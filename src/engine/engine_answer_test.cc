// What the engine (engine.h) answers for a whole request: the headline (the most restrictive limit
// over every descriptor), shadow mode per limit and per domain, and upstream's defaults (a
// rate_limit without requests_per_unit denies everything; a request's hits_addend of 0 counts as
// 1). Time is a ManualClock; t0 = 1700000000 s, 20 s into a minute.

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using Code = DescriptorResult::Code;
using test::Desc;
using test::EngineTest;
using test::kExampleB;
using test::kSecondUs;
using test::Req;

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

}  // namespace
}  // namespace sluice::engine
