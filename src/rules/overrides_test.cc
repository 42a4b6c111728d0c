// Runtime overrides (overrides.h): ParseOverride reads one from its JSON (entries sorted, limits
// as a descriptor's, `until` or `for`), with errors that name the field; RenderOverride writes
// what ParseOverride(stored) reads back; OverrideSet::Find picks, among those in force whose
// entries a descriptor carries, the one with the most entries, then the latest set.

#include "rules/overrides.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader_testing.h"
#include "sluice/limit.h"

namespace sluice::rules {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr std::string_view kOverrideRulesYaml = R"yaml(domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
)yaml";

constexpr int64_t kOverrideSecondUs = test::kSecondUs;
constexpr int64_t kOverrideDayUs = 86400 * kOverrideSecondUs;
// 2023-11-14T22:13:20.25Z: a fraction of a second, which written times must keep.
constexpr int64_t kOverrideNowUs = int64_t{1700000000} * kOverrideSecondUs + 250000;
// 2023-11-15T00:00:00Z.
constexpr int64_t kOverrideMidnightUs = int64_t{1700006400} * kOverrideSecondUs;

// `{"domain": "api", "entries": [{"key": "api_key", "value": "acme"}], "limits": [...]` plus
// `extra` (", ..." fields) and the closing brace.
std::string OverrideJsonWith(std::string_view extra) {
  std::string text = R"({"domain": "api", "entries": [{"key": "api_key", "value": "acme"}], )"
                     R"("limits": [{"requests": 5, "unit": "minute"}])";
  text += extra;
  text += "}";
  return text;
}

class OverrideParseTest : public ::testing::Test {
 protected:
  absl::StatusOr<Override> Parse(std::string_view text, bool stored = false,
                                 int64_t now_us = kOverrideNowUs) {
    return ParseOverride(text, *config_, now_us, stored);
  }
  // The error message of parsing `text` (failing the test when it parses).
  std::string ErrorOf(std::string_view text, bool stored = false) {
    const absl::StatusOr<Override> o = Parse(text, stored);
    EXPECT_FALSE(o.ok()) << "parsed: " << text;
    if (o.ok()) return "";
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(o.status().message());
  }

  std::shared_ptr<const Config> config_ = test::MustLoad(kOverrideRulesYaml);
};

TEST_F(OverrideParseTest, ReadsAFullOverride) {
  const absl::StatusOr<Override> o = Parse(R"({
    "domain": "api",
    "entries": [{"key": "plan", "value": "gold"}, {"key": "api_key", "value": "acme"}],
    "limits": [{"requests": 1000, "unit": "minute"},
               {"requests": 5, "window": "30s", "algorithm": "token_bucket", "burst": 8,
                "name": "burst"}],
    "for": "7d",
    "reason": "launch week",
    "set_by": "mallory", "set_at": "2020-01-01T00:00:00Z"})");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->domain, "api");
  EXPECT_THAT(o->entries, ElementsAre(Entry{"api_key", "acme"}, Entry{"plan", "gold"}));
  ASSERT_EQ(o->limits.size(), 2u);
  EXPECT_EQ(o->limits[0].limit.algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(o->limits[0].limit.requests, 1000u);
  EXPECT_EQ(o->limits[0].limit.window_us, 60 * kOverrideSecondUs);
  EXPECT_EQ(o->limits[0].unit, "minute");
  EXPECT_EQ(o->limits[1].limit.algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(o->limits[1].limit.requests, 5u);
  EXPECT_EQ(o->limits[1].limit.window_us, 30 * kOverrideSecondUs);
  EXPECT_EQ(o->limits[1].limit.burst, 8u);
  EXPECT_EQ(o->limits[1].name, "burst");
  EXPECT_EQ(o->limits[1].unit, "");
  EXPECT_NE(o->limits[0].state_id, 0u);
  EXPECT_NE(o->limits[0].state_id, o->limits[1].state_id);
  EXPECT_THAT(o->limits_json, HasSubstr("1000"));
  EXPECT_EQ(o->until_us, kOverrideNowUs + 7 * kOverrideDayUs);
  EXPECT_EQ(o->reason, "launch week");
  // Not stored: who and when are sluice's to write, not the request's.
  EXPECT_EQ(o->set_by, "");
  EXPECT_EQ(o->set_at_us, 0);
}

TEST_F(OverrideParseTest, UntilIsAnRfc3339Time) {
  const absl::StatusOr<Override> utc =
      Parse(OverrideJsonWith(R"(, "until": "2023-11-15T00:00:00Z")"));
  ASSERT_TRUE(utc.ok()) << utc.status();
  EXPECT_EQ(utc->until_us, kOverrideMidnightUs);
  const absl::StatusOr<Override> offset =
      Parse(OverrideJsonWith(R"(, "until": "2023-11-15T01:00:00+01:00")"));
  ASSERT_TRUE(offset.ok()) << offset.status();
  EXPECT_EQ(offset->until_us, kOverrideMidnightUs);
  const absl::StatusOr<Override> none = Parse(OverrideJsonWith(""));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->until_us, 0);
  EXPECT_FALSE(none->Expired(kOverrideNowUs + 1000 * kOverrideDayUs));
  EXPECT_THAT(ErrorOf(OverrideJsonWith(R"(, "until": "tomorrow")")), HasSubstr("until"));
}

TEST_F(OverrideParseTest, UnknownDomainIsAnErrorUnlessStored) {
  const std::string text = R"({"domain": "nope", "entries": [{"key": "api_key", "value": "a"}],
      "limits": [{"requests": 5, "unit": "minute"}]})";
  EXPECT_THAT(ErrorOf(text), HasSubstr("unknown domain 'nope'"));
  const absl::StatusOr<Override> stored = Parse(text, /*stored=*/true);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->domain, "nope");
  ASSERT_EQ(stored->limits.size(), 1u);
  EXPECT_EQ(stored->limits[0].limit.requests, 5u);
}

TEST_F(OverrideParseTest, ErrorsNameTheField) {
  EXPECT_THAT(ErrorOf(R"({"domain": "api", "limits": [{"requests": 5, "unit": "minute"}]})"),
              HasSubstr("entries"));
  EXPECT_THAT(ErrorOf(R"({"domain": "api", "entries": [],
      "limits": [{"requests": 5, "unit": "minute"}]})"),
              HasSubstr("entries"));
  EXPECT_THAT(ErrorOf(R"({"domain": "api", "entries": [{"key": "api_key", "value": "a"}],
      "limits": []})"),
              HasSubstr("limits"));
  EXPECT_THAT(ErrorOf(R"({"domain": "api", "entries": [{"key": "api_key", "value": "a"}]})"),
              HasSubstr("limits"));
  EXPECT_THAT(ErrorOf(R"({"entries": [{"key": "api_key", "value": "a"}],
      "limits": [{"requests": 5, "unit": "minute"}]})"),
              HasSubstr("domain"));
  EXPECT_THAT(ErrorOf(R"({"domain": "api", "entries": [{"key": "api_key", "value": "a"}],
      "limits": [{"requests": 5, "unit": "fortnight"}]})"),
              HasSubstr("fortnight"));
  EXPECT_THAT(ErrorOf(OverrideJsonWith(R"(, "for": "0s")")), HasSubstr("for"));
}

// When decisions go to Redis, an override's limit must be one Redis decides exactly, as the
// rules' must (backend/exact_range.h): a token bucket of a million a day is refused there (a
// stored one too: the book skips it), named by its place; the memory store takes it; a fixed
// window of any size is fine on Redis.
TEST_F(OverrideParseTest, OnRedisALimitRedisCannotDecideExactlyIsRefused) {
  LoadOptions redis;
  redis.redis = true;
  const LoadResult on_redis = LoadConfigText("t.yaml", kOverrideRulesYaml, redis);
  ASSERT_NE(on_redis.config, nullptr) << test::Joined(on_redis.errors);
  EXPECT_TRUE(on_redis.config->decided_on_redis);
  EXPECT_FALSE(config_->decided_on_redis);
  const std::string too_large =
      R"({"domain": "api", "entries": [{"key": "api_key", "value": "acme"}],
          "limits": [{"requests": 5, "unit": "minute"},
                     {"requests": 1000000, "unit": "day", "algorithm": "token_bucket"}]})";
  for (const bool stored : {false, true}) {
    const absl::StatusOr<Override> refused =
        ParseOverride(too_large, *on_redis.config, kOverrideNowUs, stored);
    ASSERT_FALSE(refused.ok()) << "stored " << stored;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("too large to decide exactly on Redis"));
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("override:3:"));  // its line
  }
  EXPECT_TRUE(Parse(too_large).ok()) << Parse(too_large).status();  // the memory store's config
  const std::string huge_window =
      R"({"domain": "api", "entries": [{"key": "api_key", "value": "acme"}],
          "limits": [{"requests": 4294967295, "unit": "year"}]})";
  const absl::StatusOr<Override> fixed =
      ParseOverride(huge_window, *on_redis.config, kOverrideNowUs, /*stored=*/false);
  EXPECT_TRUE(fixed.ok()) << fixed.status();
}

TEST_F(OverrideParseTest, AKeyGivenTwiceIsAnError) {
  // An entry's key twice: no descriptor carries both.
  EXPECT_THAT(ErrorOf(R"({"domain": "api",
      "entries": [{"key": "api_key", "value": "a"}, {"key": "api_key", "value": "b"}],
      "limits": [{"requests": 5, "unit": "minute"}]})"),
              HasSubstr("entry key 'api_key' is given twice"));
  // A field of the JSON twice.
  EXPECT_THAT(ErrorOf(OverrideJsonWith(R"(, "reason": "a", "reason": "b")")),
              HasSubstr("duplicate key 'reason'"));
}

TEST_F(OverrideParseTest, UntilPassedIsAnErrorUnlessStored) {
  const std::string passed = OverrideJsonWith(R"(, "until": "2023-11-14T00:00:00Z")");
  const std::string message = ErrorOf(passed);
  EXPECT_THAT(message, HasSubstr("until"));
  EXPECT_THAT(message, HasSubstr("has passed"));
  const absl::StatusOr<Override> stored = Parse(passed, /*stored=*/true);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->until_us, int64_t{1699920000} * kOverrideSecondUs);
  EXPECT_TRUE(stored->Expired(kOverrideNowUs));
  // Not after now is passed too.
  const absl::StatusOr<Override> now =
      Parse(OverrideJsonWith(R"(, "until": "2023-11-15T00:00:00Z")"), false, kOverrideMidnightUs);
  EXPECT_FALSE(now.ok());
}

TEST_F(OverrideParseTest, UntilAndForTogetherIsAnError) {
  EXPECT_THAT(ErrorOf(OverrideJsonWith(R"(, "until": "2023-11-15T00:00:00Z", "for": "1h")")),
              HasSubstr("until or for"));
}

TEST_F(OverrideParseTest, NotJsonIsAnError) {
  EXPECT_THAT(ErrorOf(R"({"domain": "api", "entries": [)"), HasSubstr("not JSON"));
  EXPECT_THAT(ErrorOf(R"([1, 2])"), HasSubstr("map"));
}

TEST_F(OverrideParseTest, UnknownKeyIsNamed) {
  EXPECT_THAT(ErrorOf(R"({"domain": "api", "entries": [{"key": "api_key", "value": "a"}],
      "limit": [{"requests": 5, "unit": "minute"}]})"),
              HasSubstr("'limit'"));
  EXPECT_THAT(ErrorOf(OverrideJsonWith(R"(, "whom": "x")")), HasSubstr("'whom'"));
}

TEST_F(OverrideParseTest, RenderThenParseStoredRoundTrips) {
  absl::StatusOr<Override> o = Parse(R"({
    "domain": "api",
    "entries": [{"key": "plan", "value": "gold"}, {"key": "api_key", "value": "a\"cme"}],
    "limits": [{"requests": 1000, "unit": "minute"},
               {"requests": 5, "window": "30s", "algorithm": "token_bucket", "burst": 8}],
    "for": "7d",
    "reason": "launch \"week\"\nsecond line"})");
  ASSERT_TRUE(o.ok()) << o.status();
  o->set_by = "alice";
  o->set_at_us = kOverrideNowUs + 123456;
  const std::string text = RenderOverride(*o);
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;  // one line
  // Read back later: the stored one keeps its own times.
  const absl::StatusOr<Override> back =
      Parse(text, /*stored=*/true, kOverrideNowUs + 30 * kOverrideDayUs);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_EQ(back->domain, o->domain);
  EXPECT_EQ(back->entries, o->entries);
  ASSERT_EQ(back->limits.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back->limits[i].limit, o->limits[i].limit) << i;
    EXPECT_EQ(back->limits[i].unit, o->limits[i].unit) << i;
    EXPECT_EQ(back->limits[i].state_id, o->limits[i].state_id) << i;
  }
  EXPECT_EQ(back->limits_json, o->limits_json);
  EXPECT_EQ(back->until_us, o->until_us);
  EXPECT_EQ(back->reason, o->reason);
  EXPECT_EQ(back->set_by, "alice");
  EXPECT_EQ(back->set_at_us, kOverrideNowUs + 123456);
  EXPECT_EQ(RenderOverride(*back), text);
}

TEST_F(OverrideParseTest, StateIdsAreTheOverridesOwn) {
  const absl::StatusOr<Override> acme = Parse(OverrideJsonWith(""));
  const absl::StatusOr<Override> again = Parse(OverrideJsonWith(R"(, "reason": "again")"));
  const absl::StatusOr<Override> bob = Parse(R"({"domain": "api",
      "entries": [{"key": "api_key", "value": "bob"}],
      "limits": [{"requests": 5, "unit": "minute"}]})");
  ASSERT_TRUE(acme.ok() && again.ok() && bob.ok());
  ASSERT_EQ(acme->limits.size(), 1u);
  ASSERT_EQ(bob->limits.size(), 1u);
  EXPECT_EQ(acme->limits[0].limit, bob->limits[0].limit);
  EXPECT_NE(acme->limits[0].state_id, bob->limits[0].state_id);
  EXPECT_EQ(acme->limits[0].state_id, again->limits[0].state_id);  // stable
  // Never a rule's, even one with the same limit.
  const Domain* domain = config_->FindDomain("api");
  ASSERT_NE(domain, nullptr);
  ASSERT_EQ(domain->root.children.size(), 1u);
  for (const LimitRule& rule : domain->root.children[0]->limits) {
    EXPECT_NE(rule.state_id, acme->limits[0].state_id);
  }
}

TEST(OverrideTextTest, EntriesTextAndTimes) {
  std::vector<Entry> entries = {{"plan", "gold"}, {"api_key", "b"}, {"api_key", "a"}};
  SortEntries(entries);
  EXPECT_THAT(entries,
              ElementsAre(Entry{"api_key", "a"}, Entry{"api_key", "b"}, Entry{"plan", "gold"}));
  EXPECT_EQ(OverrideEntriesText(entries), "api_key=a,api_key=b,plan=gold");
  EXPECT_EQ(OverrideEntriesText({}), "");
  EXPECT_EQ(FormatUnixTime(kOverrideMidnightUs), "2023-11-15T00:00:00Z");
  EXPECT_EQ(FormatUnixTime(kOverrideNowUs), "2023-11-14T22:13:20.25Z");
}

// --- OverrideSet::Find -----------------------------------------------------------------------

Override OverrideSetMember(std::string domain, std::vector<Entry> entries, int64_t set_at_us,
                           int64_t until_us = 0) {
  Override o;
  o.domain = std::move(domain);
  SortEntries(entries);
  o.entries = std::move(entries);
  o.set_at_us = set_at_us;
  o.until_us = until_us;
  o.reason = OverrideEntriesText(o.entries);  // to tell them apart
  return o;
}

// The reason (its entries' text) of the override Find picks, or "none".
std::string FoundOverride(const OverrideSet& set, std::string_view domain,
                          const std::vector<Entry>& entries, int64_t now_us = kOverrideNowUs) {
  const Override* o = set.Find(domain, entries, now_us);
  return o == nullptr ? "none" : o->reason;
}

TEST(OverrideSetTest, OneEntryMatchesAnywhereInTheDescriptor) {
  const OverrideSet set({OverrideSetMember("api", {{"api_key", "acme"}}, 1)});
  EXPECT_EQ(FoundOverride(set, "api", {{"api_key", "acme"}}), "api_key=acme");
  EXPECT_EQ(FoundOverride(set, "api", {{"plan", "gold"}, {"api_key", "acme"}}), "api_key=acme");
  EXPECT_EQ(FoundOverride(set, "api", {{"plan", "gold"}, {"api_key", "acme"}, {"path", "/x"}}),
            "api_key=acme");
  EXPECT_EQ(FoundOverride(set, "api", {{"api_key", "bob"}}), "none");
  EXPECT_EQ(FoundOverride(set, "api", {{"user", "acme"}}), "none");
  EXPECT_EQ(FoundOverride(set, "api", {}), "none");
}

TEST(OverrideSetTest, MostEntriesWinThenOnlyTheOneCarried) {
  // The one-entry one is the later: entries still count first.
  const OverrideSet set({OverrideSetMember("api", {{"plan", "gold"}, {"api_key", "acme"}}, 1),
                         OverrideSetMember("api", {{"api_key", "acme"}}, 2)});
  EXPECT_EQ(FoundOverride(set, "api", {{"plan", "gold"}, {"api_key", "acme"}}),
            "api_key=acme,plan=gold");
  EXPECT_EQ(FoundOverride(set, "api", {{"api_key", "acme"}, {"path", "/"}, {"plan", "gold"}}),
            "api_key=acme,plan=gold");
  EXPECT_EQ(FoundOverride(set, "api", {{"plan", "free"}, {"api_key", "acme"}}), "api_key=acme");
  EXPECT_EQ(FoundOverride(set, "api", {{"api_key", "acme"}}), "api_key=acme");
  EXPECT_EQ(FoundOverride(set, "api", {{"plan", "gold"}}), "none");
}

TEST(OverrideSetTest, ExpiredOnesAreSkipped) {
  const int64_t end = kOverrideNowUs + 10 * kOverrideSecondUs;
  const OverrideSet set({OverrideSetMember("api", {{"plan", "gold"}, {"api_key", "acme"}}, 1, end),
                         OverrideSetMember("api", {{"api_key", "acme"}}, 1)});
  const std::vector<Entry> both = {{"api_key", "acme"}, {"plan", "gold"}};
  EXPECT_EQ(FoundOverride(set, "api", both, end - 1), "api_key=acme,plan=gold");
  EXPECT_EQ(FoundOverride(set, "api", both, end), "api_key=acme");  // now == until: ended
  EXPECT_EQ(FoundOverride(set, "api", both, end + 1), "api_key=acme");
  const OverrideSet alone({OverrideSetMember("api", {{"api_key", "acme"}}, 1, end)});
  EXPECT_EQ(FoundOverride(alone, "api", {{"api_key", "acme"}}, end - 1), "api_key=acme");
  EXPECT_EQ(FoundOverride(alone, "api", {{"api_key", "acme"}}, end), "none");
}

TEST(OverrideSetTest, OtherDomainIsNotFound) {
  const OverrideSet set({OverrideSetMember("api", {{"api_key", "acme"}}, 1)});
  EXPECT_TRUE(set.HasDomain("api"));
  EXPECT_FALSE(set.HasDomain("web"));
  EXPECT_EQ(FoundOverride(set, "web", {{"api_key", "acme"}}), "none");
  const OverrideSet empty({});
  EXPECT_FALSE(empty.HasDomain("api"));
  EXPECT_EQ(FoundOverride(empty, "api", {{"api_key", "acme"}}), "none");
}

TEST(OverrideSetTest, LatestSetWinsAmongEquals) {
  const std::vector<Entry> both = {{"api_key", "acme"}, {"plan", "gold"}};
  const OverrideSet plan_later({OverrideSetMember("api", {{"api_key", "acme"}}, 100),
                                OverrideSetMember("api", {{"plan", "gold"}}, 200)});
  EXPECT_EQ(FoundOverride(plan_later, "api", both), "plan=gold");
  const OverrideSet key_later({OverrideSetMember("api", {{"api_key", "acme"}}, 200),
                               OverrideSetMember("api", {{"plan", "gold"}}, 100)});
  EXPECT_EQ(FoundOverride(key_later, "api", both), "api_key=acme");
  // The order they are listed in does not matter.
  const OverrideSet listed_last({OverrideSetMember("api", {{"plan", "gold"}}, 100),
                                 OverrideSetMember("api", {{"api_key", "acme"}}, 200)});
  EXPECT_EQ(FoundOverride(listed_last, "api", both), "api_key=acme");
  EXPECT_EQ(FoundOverride(listed_last, "api", {{"plan", "gold"}, {"api_key", "acme"}}),
            "api_key=acme");
}

}  // namespace
}  // namespace sluice::rules
