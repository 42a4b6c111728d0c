// The engine (engine.h) with count_denied: true, which reproduces envoyproxy/ratelimit's
// counting (every hit, denied or not), set per domain or in the settings file; and without it,
// sluice's default (a denied request counts nothing). Time is a ManualClock; t0 = 1700000000 s.

#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"

namespace sluice::engine {
namespace {

using Code = DescriptorResult::Code;
using test::Desc;
using test::EngineTest;
using test::kMinuteUs;
using test::kSecondUs;
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

// An LLM token limit as Envoy AI Gateway drives it, on every algorithm: a check with
// hits_addend 0 at request time, then a report of the tokens used (here 5000 against 1000 a
// minute, after 900 that fit). The report is denied and recorded in full: the next checks are
// denied until the overdraft is paid back at the limit's rate (a fixed window: until it ends, as
// upstream's; the log: until its entries stop counting), then allowed again.
TEST_F(EngineTest, CountDeniedRecordsTokenReportsOnEveryAlgorithm) {
  Load(R"yaml(domain: ai
count_denied: true
descriptors:
  - key: token_bucket
    rate_limit: {algorithm: token_bucket, requests: 1000, window: 1m}
  - key: leaky_bucket
    rate_limit: {algorithm: leaky_bucket, requests: 1000, window: 1m, burst: 999}
  - key: fixed_window
    rate_limit: {algorithm: fixed_window, requests: 1000, window: 1m}
  - key: sliding_window
    rate_limit: {algorithm: sliding_window, requests: 1000, window: 1m}
  - key: sliding_log
    rate_limit: {algorithm: sliding_log, requests: 1000, window: 1m}
)yaml");
  const std::vector<std::string> keys = {"token_bucket", "leaky_bucket", "fixed_window",
                                         "sliding_window", "sliding_log"};
  // (The descriptor's hits_addend, as Envoy sends it: a request's 0 means the default, 1.)
  auto look = [&](const std::string& key) {
    return Check(Req("ai", {test::Peek({{key, "alice"}})}));
  };
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(look(key).allowed);
    EXPECT_TRUE(Check1("ai", {{key, "alice"}}, 900).allowed);
    EXPECT_EQ(Remaining(look(key)), 100);
    const Response report = Check1("ai", {{key, "alice"}}, 5000);
    EXPECT_FALSE(report.allowed);
    EXPECT_EQ(report.descriptors[0].code, Code::kOverLimit);
    const Response after = look(key);
    EXPECT_FALSE(after.allowed) << "the report was not recorded";
    EXPECT_EQ(after.descriptors[0].code, Code::kOverLimit);
  }
  // A minute later 4900 are still past the limit, but for the fixed window (upstream's counter
  // ends with its window) and the log (whose entries stopped counting).
  clock_.Advance(61 * kSecondUs);
  for (const std::string& key : keys) {
    EXPECT_EQ(look(key).allowed, key == "sliding_log" || key == "fixed_window") << key;
  }
  // Paid back after 5 minutes (4900 at 1000 a minute), 6 for the sliding window's estimate.
  clock_.Advance(6 * kMinuteUs);
  for (const std::string& key : keys) EXPECT_TRUE(look(key).allowed) << key;
}

}  // namespace
}  // namespace sluice::engine
