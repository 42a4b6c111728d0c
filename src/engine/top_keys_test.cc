// Tests for engine::TopKeys: per domain and limit, the keys denied most and the busiest, over
// the last 1, 5 or 15 minutes (times given; t0 = 1700000000 s, 20 s into its minute), and the
// engine recording into it when one is set.

#include "engine/top_keys.h"

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using test::EngineTest;
using test::kMinuteUs;
using test::kT0;
using By = TopKeys::By;

// An applied limit named `name` that admitted, or denied.
AppliedLimit Applied(std::string name, bool allowed, bool shadow = false) {
  AppliedLimit a;
  a.name = std::move(name);
  a.limit = Limit{.algorithm = Algorithm::kFixedWindow, .requests = 5, .window_us = kMinuteUs};
  a.shadow = shadow;
  a.decision.allowed = allowed;
  return a;
}

// "<length>:<part>" pairs, as AppendStateKey writes them.
std::string StateKey(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string key;
  for (const auto& [k, v] : entries) {
    key += std::to_string(k.size()) + ":" + k + std::to_string(v.size()) + ":" + v;
  }
  return key;
}

// "limit key count" per row, for readable expectations.
std::vector<std::string> Rows(const std::vector<TopKeys::Row>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.limit + " " + r.key + " " + std::to_string(r.count));
  return out;
}

TEST(StateKeyTextTest, PairsBecomeKeyEqualsValueJoinedByCommas) {
  EXPECT_EQ(StateKeyText(StateKey({{"user", "alice"}})), "user=alice");
  EXPECT_EQ(StateKeyText(StateKey({{"api_key", "a:b=c"}, {"path", "/x,y"}})),
            "api_key=a:b=c,path=/x,y");
  EXPECT_EQ(StateKeyText(StateKey({{"k", ""}})), "k=");
  // Not a state key: the bytes as they are.
  EXPECT_EQ(StateKeyText("9:short"), "9:short");
  EXPECT_EQ(StateKeyText("user"), "user");
}

TEST(TopKeysTest, DeniedKeysRankByDenialsAndBusyKeysByDecisions) {
  TopKeys top({.capacity = 100, .sample = 1});
  const std::string alice = StateKey({{"user", "alice"}}), bob = StateKey({{"user", "bob"}});
  for (int i = 0; i < 10; ++i) top.Record("api", 7, Applied("per-user", true), bob, 1, kT0);
  for (int i = 0; i < 4; ++i) top.Record("api", 7, Applied("per-user", i < 1), alice, 1, kT0);
  // A shadow limit never denies: its "would deny" is not a denial.
  top.Record("api", 8, Applied("shadowed", false, true), bob, 1, kT0);
  EXPECT_EQ(Rows(top.Top("api", By::kDenied, 1, 10, kT0)),
            (std::vector<std::string>{"per-user user=alice 3"}));
  EXPECT_EQ(Rows(top.Top("api", By::kRequests, 1, 10, kT0)),
            (std::vector<std::string>{"per-user user=bob 10", "per-user user=alice 4",
                                      "shadowed user=bob 1"}));
  EXPECT_TRUE(top.Top("other", By::kRequests, 15, 10, kT0).empty());
}

TEST(TopKeysTest, AWindowCountsThisMinuteAndTheMinutesBeforeIt) {
  TopKeys top({.capacity = 100, .sample = 1});
  const std::string early = StateKey({{"ip", "1"}}), late = StateKey({{"ip", "2"}});
  top.Record("d", 1, Applied("l", false), early, 1, kT0);
  top.Record("d", 1, Applied("l", false), early, 1, kT0 + kMinuteUs);
  top.Record("d", 1, Applied("l", false), late, 1, kT0 + 4 * kMinuteUs);
  const int64_t now = kT0 + 4 * kMinuteUs;
  EXPECT_EQ(Rows(top.Top("d", By::kDenied, 1, 10, now)), (std::vector<std::string>{"l ip=2 1"}));
  EXPECT_EQ(Rows(top.Top("d", By::kDenied, 4, 10, now)),
            (std::vector<std::string>{"l ip=1 1", "l ip=2 1"}));
  EXPECT_EQ(Rows(top.Top("d", By::kDenied, 5, 10, now)),
            (std::vector<std::string>{"l ip=1 2", "l ip=2 1"}));
  // 15 minutes on, the first two minutes have left the longest window; their slots, reused by
  // later minutes, start empty.
  const int64_t later = kT0 + 16 * kMinuteUs;
  EXPECT_EQ(Rows(top.Top("d", By::kDenied, 15, 10, later)), (std::vector<std::string>{"l ip=2 1"}));
  top.Record("d", 1, Applied("l", true), late, 1, later);
  EXPECT_EQ(Rows(top.Top("d", By::kRequests, 1, 10, later)),
            (std::vector<std::string>{"l ip=2 1"}));
  EXPECT_EQ(Rows(top.Top("d", By::kDenied, 15, 10, later)), (std::vector<std::string>{"l ip=2 1"}));
}

TEST(TopKeysTest, SampledDecisionsEstimateEveryLimitsCountsAlike) {
  TopKeys top({.capacity = 100, .sample = 8});
  const std::string heavy = StateKey({{"user", "heavy"}}), light = StateKey({{"user", "light"}});
  int sampled = 0;
  for (int i = 0; i < 40000; ++i) {
    const std::string& key = i % 5 == 4 ? light : heavy;  // 32,000 heavy, 8,000 light
    if (!top.Sample()) continue;
    ++sampled;
    // Two limits a decision, always in this order: both are recorded alike.
    top.Record("d", 1, Applied("first", true), key, top.sample(), kT0);
    top.Record("d", 2, Applied("second", true), key, top.sample(), kT0);
  }
  EXPECT_NEAR(sampled, 5000, 500);
  const auto rows = top.Top("d", By::kRequests, 1, 10, kT0);
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& r : rows) {
    EXPECT_EQ(r.count % 8, 0u) << r.limit << " " << r.key;
    EXPECT_EQ(r.error, 0u);
    if (r.key == "user=heavy") {
      EXPECT_NEAR(static_cast<double>(r.count), 32000, 3200) << r.limit;
    } else {
      EXPECT_NEAR(static_cast<double>(r.count), 8000, 1600) << r.limit;
    }
  }
  EXPECT_EQ(rows[0].key, "user=heavy");
  EXPECT_EQ(rows[1].key, "user=heavy");
  EXPECT_EQ(rows[0].count, rows[1].count);
  EXPECT_EQ(rows[2].count, rows[3].count);
}

TEST(TopKeysTest, MemoryIsBoundedByCapacityAndDomains) {
  TopKeys top({.capacity = 4, .max_domains = 1, .sample = 1});
  for (int k = 0; k < 50; ++k) {
    const std::string key = StateKey({{"k", std::to_string(k)}});
    for (int i = 0; i <= k; ++i) top.Record("d", 1, Applied("l", false), key, 1, kT0);
  }
  // The heaviest keys are the last ones, each heavier than total / capacity: all kept.
  const auto rows = top.Top("d", By::kDenied, 1, 10, kT0);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].key, "k=49");
  for (const auto& r : rows) EXPECT_GE(r.count - r.error, 0u);
  top.Record("second", 1, Applied("l", false), "1:k1:v", 1, kT0);
  EXPECT_TRUE(top.Top("second", By::kRequests, 15, 10, kT0).empty());
  EXPECT_EQ(top.untracked(), 1u);
}

TEST_F(EngineTest, TheEngineRecordsEveryDecidedLimitIntoItsTopKeys) {
  Load(R"yaml(domain: api
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 2}
)yaml");
  TopKeys top({.capacity = 100, .sample = 1});
  engine_.set_top_keys(&top);
  for (int i = 0; i < 5; ++i) Check1("api", {{"user", "mallory"}});
  Check1("api", {{"user", "alice"}});
  const int64_t now = clock_.NowMicros();
  EXPECT_EQ(Rows(top.Top("api", By::kDenied, 1, 10, now)),
            (std::vector<std::string>{"per-user user=mallory 3"}));
  EXPECT_EQ(Rows(top.Top("api", By::kRequests, 1, 10, now)),
            (std::vector<std::string>{"per-user user=mallory 5", "per-user user=alice 1"}));
  engine_.set_top_keys(nullptr);
  Check1("api", {{"user", "alice"}});
  EXPECT_EQ(top.Top("api", By::kRequests, 1, 10, now)[1].count, 1u);
}

}  // namespace
}  // namespace sluice::engine
