// The engine (engine.h) with count_denied: true, which reproduces envoyproxy/ratelimit's
// counting (every hit, denied or not), set per domain or in the settings file; and without it,
// sluice's default (a denied request counts nothing). Time is a ManualClock; t0 = 1700000000 s.

#include <string_view>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"

namespace sluice::engine {
namespace {

using Code = DescriptorResult::Code;
using test::Desc;
using test::EngineTest;
using test::Req;
using testing::TempDir;

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

}  // namespace
}  // namespace sluice::engine
