// Concurrency limits in the loader: a descriptor's `rate_limit: {algorithm: concurrency, ...}`
// or an entry of its `limits:` with `algorithm: concurrency` goes to RuleNode::concurrency (not
// RuleNode::limits), with max_hold 60 s unless it says; the errors (FILE:LINE:COL: ...) of a
// concurrency limit given a rate's keys, without requests, with max_hold <= 0, in a plan or an
// override; and max_hold on a limit that is not concurrency.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "rules/loader_testing.h"
#include "rules/overrides.h"

namespace sluice::rules {
namespace {

using test::Child;
using test::Errors;
using test::MustLoad;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kConcurrencySecondUs = 1'000'000;

// A domain "d" with one descriptor `a` whose rate_limit is `rate_limit` (a flow map).
std::string ConcurrencyRateLimit(std::string_view rate_limit) {
  return "domain: d\ndescriptors:\n  - key: a\n    rate_limit: " + std::string(rate_limit) + "\n";
}

// The same with `limits: [entry]` (a flow map).
std::string ConcurrencyLimitsEntry(std::string_view entry) {
  return "domain: d\ndescriptors:\n  - key: a\n    limits:\n      - " + std::string(entry) + "\n";
}

TEST(LoaderConcurrencyTest, RateLimitAndLimitsEntryGoToConcurrency) {
  const auto config = MustLoad(R"yaml(domain: d
descriptors:
  - key: report
    rate_limit: {algorithm: concurrency, requests: 3, max_hold: 2s, name: reports}
  - key: job
    limits:
      - {requests: 10, unit: minute}
      - {algorithm: concurrency, requests: 1, name: one_job}
      - {algorithm: concurrency, requests: 4, max_hold: 90s}
)yaml");
  ASSERT_NE(config, nullptr);
  const Domain* d = config->FindDomain("d");
  ASSERT_NE(d, nullptr);
  const RuleNode* report = Child(d->root, 0);
  const RuleNode* job = Child(d->root, 1);
  ASSERT_NE(report, nullptr);
  ASSERT_NE(job, nullptr);
  EXPECT_TRUE(report->has_rate_limit);
  EXPECT_FALSE(report->unlimited);
  EXPECT_THAT(report->limits, IsEmpty());
  ASSERT_EQ(report->concurrency.size(), 1u);
  EXPECT_EQ(report->concurrency[0].requests, 3u);
  EXPECT_EQ(report->concurrency[0].max_hold_us, 2 * kConcurrencySecondUs);
  EXPECT_EQ(report->concurrency[0].name, "reports");
  EXPECT_EQ(report->concurrency[0].position.line, 4);
  EXPECT_NE(report->concurrency[0].state_id, 0u);
  ASSERT_EQ(job->limits.size(), 1u);
  EXPECT_EQ(job->limits[0].limit.requests, 10u);
  ASSERT_EQ(job->concurrency.size(), 2u);
  EXPECT_EQ(job->concurrency[0].requests, 1u);
  EXPECT_EQ(job->concurrency[0].name, "one_job");
  EXPECT_EQ(job->concurrency[1].requests, 4u);
  EXPECT_EQ(job->concurrency[1].max_hold_us, 90 * kConcurrencySecondUs);
  EXPECT_EQ(job->concurrency[1].name, "");
  // Each its own state: distinct ids, and none a rate limit's.
  EXPECT_NE(job->concurrency[0].state_id, job->concurrency[1].state_id);
  EXPECT_NE(job->concurrency[0].state_id, job->limits[0].state_id);
  EXPECT_NE(job->concurrency[0].state_id, report->concurrency[0].state_id);
}

TEST(LoaderConcurrencyTest, MaxHoldDefaultsToAMinute) {
  EXPECT_EQ(kDefaultMaxHoldUs, 60 * kConcurrencySecondUs);
  for (const std::string& text :
       {ConcurrencyRateLimit("{algorithm: concurrency, requests: 5}"),
        ConcurrencyLimitsEntry("{algorithm: concurrency, requests: 5}")}) {
    const auto config = MustLoad(text);
    ASSERT_NE(config, nullptr) << text;
    const RuleNode* a = Child(config->FindDomain("d")->root, 0);
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(a->concurrency.size(), 1u) << text;
    EXPECT_EQ(a->concurrency[0].requests, 5u);
    EXPECT_EQ(a->concurrency[0].max_hold_us, kDefaultMaxHoldUs) << text;
    EXPECT_THAT(a->limits, IsEmpty());
  }
}

TEST(LoaderConcurrencyTest, ARateKeyOnAConcurrencyLimitIsAnError) {
  // The error is at the key's value: line 4, after "    rate_limit: ", the prefix and "KEY: ".
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"unit", "second"},
      {"window", "1s"},
      {"burst", "2"},
      {"penalty", "{after: 1, block: 1s}"},
      {"time_zone", "UTC"},
      {"consistency", "exact"},
      {"requests_per_unit", "5"},
      {"shadow_mode", "true"},
  };
  for (const auto& [key, value] : cases) {
    const std::string prefix = "{algorithm: concurrency, requests: 2, ";
    const std::string text =
        ConcurrencyRateLimit(prefix + std::string(key) + ": " + std::string(value) + "}");
    const int column = 17 + static_cast<int>(prefix.size() + key.size()) + 2;
    EXPECT_THAT(Errors(text),
                ElementsAre(fmt::format("t.yaml:4:{}: rate_limit: a concurrency limit takes "
                                        "requests and max_hold, not {}",
                                        column, key)))
        << text;
  }
}

TEST(LoaderConcurrencyTest, ARateKeyOnAConcurrencyEntryIsAnError) {
  EXPECT_THAT(
      Errors(ConcurrencyLimitsEntry("{algorithm: concurrency, requests: 2, window: 1s}")),
      ElementsAre("t.yaml:5:55: limits entry: a concurrency limit takes requests and max_hold, "
                  "not window"));
  EXPECT_THAT(
      Errors(ConcurrencyLimitsEntry("{algorithm: concurrency, requests: 2, unit: hour, burst: 3}")),
      ElementsAre(HasSubstr("limits entry: a concurrency limit takes requests and max_hold, not "
                            "unit"),
                  HasSubstr("limits entry: a concurrency limit takes requests and max_hold, not "
                            "burst")));
}

TEST(LoaderConcurrencyTest, AConcurrencyLimitNeedsRequests) {
  EXPECT_THAT(Errors(ConcurrencyRateLimit("{algorithm: concurrency, max_hold: 5s}")),
              ElementsAre("t.yaml:4:17: rate_limit: a concurrency limit needs requests (the most "
                          "held at once)"));
  EXPECT_THAT(Errors(ConcurrencyLimitsEntry("{algorithm: concurrency}")),
              ElementsAre("t.yaml:5:9: limits entry: a concurrency limit needs requests (the most "
                          "held at once)"));
  // requests_per_unit does not stand for it.
  EXPECT_THAT(Errors(ConcurrencyRateLimit("{algorithm: concurrency, requests_per_unit: 3}")),
              ElementsAre(HasSubstr("4:17: rate_limit: a concurrency limit needs requests"),
                          HasSubstr("4:61: rate_limit: a concurrency limit takes requests and "
                                    "max_hold, not requests_per_unit")));
}

// max_hold is a duration longer than 0 (the duration parser refuses 0 and below itself).
TEST(LoaderConcurrencyTest, MaxHoldMustBeLongerThanZero) {
  const std::string hint = " (write e.g. 250ms, 1s, 30s, 5m, 1h, 1d, 1w)";
  EXPECT_THAT(Errors(ConcurrencyRateLimit("{algorithm: concurrency, requests: 2, max_hold: 0s}")),
              ElementsAre("t.yaml:4:65: max_hold: bad duration \"0s\": must be positive" + hint));
  EXPECT_THAT(
      Errors(ConcurrencyLimitsEntry("{algorithm: concurrency, requests: 2, max_hold: 0ms}")),
      ElementsAre("t.yaml:5:57: max_hold: bad duration \"0ms\": must be positive" + hint));
  EXPECT_THAT(Errors(ConcurrencyLimitsEntry("{algorithm: concurrency, requests: 2, max_hold: 0}")),
              ElementsAre("t.yaml:5:57: max_hold: bad duration \"0\": expected a unit (us, ms, s, "
                          "m, h, d, w) after the number" +
                          hint));
  EXPECT_THAT(Errors(ConcurrencyRateLimit("{algorithm: concurrency, requests: 2, max_hold: -3s}")),
              ElementsAre("t.yaml:4:65: max_hold: bad duration \"-3s\": expected a number" + hint));
  EXPECT_THAT(
      Errors(ConcurrencyRateLimit("{algorithm: concurrency, requests: 2, max_hold: forever}")),
      ElementsAre("t.yaml:4:65: max_hold: bad duration \"forever\": expected a number" + hint));
  EXPECT_THAT(Errors(ConcurrencyRateLimit("{algorithm: concurrency, requests: 2, max_hold: [1s]}")),
              ElementsAre("t.yaml:4:65: max_hold must be a duration such as 30s"));
}

TEST(LoaderConcurrencyTest, MaxHoldOnALimitThatIsNotConcurrencyIsAnError) {
  EXPECT_THAT(Errors(ConcurrencyRateLimit("{requests: 2, unit: second, max_hold: 5s}")),
              ElementsAre("t.yaml:4:55: rate_limit: max_hold applies to algorithm concurrency"));
  EXPECT_THAT(Errors(ConcurrencyLimitsEntry("{algorithm: token_bucket, requests: 2, window: 1s, "
                                            "burst: 4, max_hold: 5s}")),
              ElementsAre("t.yaml:5:80: limits entry: max_hold applies to algorithm concurrency"));
}

TEST(LoaderConcurrencyTest, AConcurrencyLimitInAPlanIsAnError) {
  EXPECT_THAT(Errors(R"yaml(domain: plans
plans:
  free:
    limits:
      - {requests: 10, window: 1s}
      - {algorithm: concurrency, requests: 2}
default_plan: free
descriptors:
  - key: api_key
    plan_from: plan
)yaml"),
              ElementsAre("t.yaml:6:21: plan 'free': a concurrency limit belongs to a "
                          "descriptor's own rate_limit or limits"));
}

TEST(LoaderConcurrencyTest, AConcurrencyLimitInAnOverrideIsAnError) {
  const auto config = MustLoad(ConcurrencyRateLimit("{requests: 5, unit: second}"));
  ASSERT_NE(config, nullptr);
  const absl::StatusOr<Override> o =
      ParseOverride(R"({"domain": "d", "entries": [{"key": "a", "value": "x"}],)"
                    R"( "limits": [{"algorithm": "concurrency", "requests": 2}]})",
                    *config, 1'700'000'000 * kConcurrencySecondUs, false);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(std::string(o.status().message()),
              HasSubstr("a concurrency limit belongs to a descriptor's own rate_limit or limits"));
}

}  // namespace
}  // namespace sluice::rules
