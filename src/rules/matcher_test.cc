// Matching request descriptors against a domain's descriptor tree (matcher.h), as
// envoyproxy/ratelimit's GetLimit does (its src/config/config_impl.go): exact
// value > first matching wildcard in file order > key-only; greedy, no backtracking; a rule applies
// only at the depth of the descriptor's last entry.

#include "rules/matcher.h"

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "tests/support/temp_dir.h"
#include "tests/support/upstream_examples.h"

namespace sluice::rules {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

// ---------------------------------------------------------------------------------------------
// WildcardMatch: '*' matches any run of characters, including none, anywhere and several times
// (envoyproxy/ratelimit#1085 generalised the trailing '*').

TEST(WildcardMatchTest, TrailingStarIsAPrefixMatch) {
  EXPECT_TRUE(WildcardMatch("foo*", "foo"));
  EXPECT_TRUE(WildcardMatch("foo*", "foobar"));
  EXPECT_TRUE(WildcardMatch("foo*", "foo*"));
  EXPECT_FALSE(WildcardMatch("foo*", "fo"));
  EXPECT_FALSE(WildcardMatch("foo*", "xfoo"));
  EXPECT_FALSE(WildcardMatch("foo*", ""));
  EXPECT_TRUE(WildcardMatch("/downloads/*", "/downloads/x.zip"));
  EXPECT_TRUE(WildcardMatch("/downloads/*", "/downloads/free/a.zip"));
}

TEST(WildcardMatchTest, InfixStar) {
  EXPECT_TRUE(WildcardMatch("/api/*/action", "/api/v1/action"));
  EXPECT_TRUE(WildcardMatch("/api/*/action", "/api//action"));        // zero characters
  EXPECT_TRUE(WildcardMatch("/api/*/action", "/api/v1/x/y/action"));  // '*' spans '/'
  EXPECT_FALSE(WildcardMatch("/api/*/action", "/api/v1/actions"));
  EXPECT_FALSE(WildcardMatch("/api/*/action", "/api/action"));
  EXPECT_FALSE(WildcardMatch("/api/*/action", "/api/v1/action/"));
  EXPECT_TRUE(WildcardMatch("*.iso", "big.iso"));
  EXPECT_FALSE(WildcardMatch("*.iso", "big.iso.part"));
}

TEST(WildcardMatchTest, SeveralStarsMatchLeftToRight) {
  EXPECT_TRUE(WildcardMatch("foo*bar*baz", "foobarbaz"));
  EXPECT_TRUE(WildcardMatch("foo*bar*baz", "foo-bar-baz"));
  EXPECT_TRUE(WildcardMatch("foo*bar*baz", "foobarbarbazbaz"));  // needs a later 'bar'/'baz'
  EXPECT_TRUE(WildcardMatch("foo*bar*baz", "foobazbarbaz"));
  EXPECT_FALSE(WildcardMatch("foo*bar*baz", "foobazbar"));
  EXPECT_FALSE(WildcardMatch("foo*bar*baz", "foobarba"));
  EXPECT_TRUE(WildcardMatch("a**b", "ab"));
  EXPECT_TRUE(WildcardMatch("*a*", "bab"));
  EXPECT_TRUE(WildcardMatch("*a", "aaa"));
  EXPECT_FALSE(WildcardMatch("a*a", "a"));
  EXPECT_TRUE(WildcardMatch("a*a", "aa"));
}

TEST(WildcardMatchTest, EmptyPatternAndText) {
  EXPECT_TRUE(WildcardMatch("", ""));
  EXPECT_FALSE(WildcardMatch("", "a"));
  EXPECT_TRUE(WildcardMatch("*", ""));
  EXPECT_TRUE(WildcardMatch("*", "anything at all"));
  EXPECT_TRUE(WildcardMatch("**", ""));
  EXPECT_FALSE(WildcardMatch("a*", ""));
}

TEST(WildcardMatchTest, WithoutStarIsEquality) {
  EXPECT_TRUE(WildcardMatch("abc", "abc"));
  EXPECT_FALSE(WildcardMatch("abc", "abcd"));
  EXPECT_FALSE(WildcardMatch("abcd", "abc"));
  EXPECT_FALSE(WildcardMatch("abc", "ABC"));  // case-sensitive
}

// ---------------------------------------------------------------------------------------------
// MatchDescriptor.

class MatcherTest : public ::testing::Test {
 protected:
  void Load(std::string_view yaml) {
    LoadResult result = LoadConfigText("m.yaml", yaml);
    std::string errors;
    for (const auto& e : result.errors) errors += e.ToString() + "\n";
    ASSERT_TRUE(result.errors.empty()) << errors;
    config_ = result.config;
    ASSERT_EQ(config_->domains.size(), 1u);
    domain_ = config_->domains[0].get();
  }

  // The path of the rule that sets the descriptor's limits, or "none".
  std::string Match(std::vector<Entry> entries) {
    const RuleNode* node = MatchDescriptor(*domain_, entries);
    return node == nullptr ? "none" : node->path;
  }

  // The requests of the matched rule's first limit (a readable way to tell rules apart), or -1.
  int64_t MatchedRequests(std::vector<Entry> entries) {
    const RuleNode* node = MatchDescriptor(*domain_, entries);
    if (node == nullptr || node->limits.empty()) return -1;
    return static_cast<int64_t>(node->limits[0].limit.requests);
  }

  std::shared_ptr<const Config> config_;
  const Domain* domain_ = nullptr;
};

constexpr std::string_view kPaths = R"yaml(domain: m
descriptors:
  - key: path
    value: /api/*/action
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v1/users
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: /api/*/action/*
    rate_limit: {unit: second, requests_per_unit: 5}
)yaml";

TEST_F(MatcherTest, ExactBeatsWildcardBeatsKeyOnly) {
  Load(kPaths);
  EXPECT_EQ(MatchedRequests({{"path", "/api/v1/users"}}), 3);  // exact, although /api/* matches
  EXPECT_EQ(MatchedRequests({{"path", "/api/v2/users"}}), 2);  // wildcard
  EXPECT_EQ(MatchedRequests({{"path", "/other"}}), 4);         // key-only
  EXPECT_EQ(MatchedRequests({{"path", ""}}), 4);               // empty value: key-only
  EXPECT_EQ(Match({{"other", "/api/v1/users"}}), "none");      // unknown key
}

TEST_F(MatcherTest, FirstListedWildcardWins) {
  Load(kPaths);
  // Both /api/*/action and /api/* match: the one listed first wins.
  EXPECT_EQ(MatchedRequests({{"path", "/api/v1/action"}}), 1);
  // /api/*/action/* is listed after /api/*, which also matches: it is never chosen.
  EXPECT_EQ(MatchedRequests({{"path", "/api/v1/action/x"}}), 2);
}

TEST_F(MatcherTest, WildcardOrderIsFileOrder) {
  Load(R"yaml(domain: m
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/*/action
    rate_limit: {unit: second, requests_per_unit: 1}
)yaml");
  EXPECT_EQ(MatchedRequests({{"path", "/api/v1/action"}}), 2);
}

TEST_F(MatcherTest, WildcardMatchesOnlyItsOwnKey) {
  Load(R"yaml(domain: m
descriptors:
  - key: a
    value: x*
    rate_limit: {unit: second, requests_per_unit: 1}
)yaml");
  EXPECT_EQ(MatchedRequests({{"a", "xyz"}}), 1);
  EXPECT_EQ(Match({{"b", "xyz"}}), "none");
  EXPECT_EQ(Match({{"a", "yx"}}), "none");
  EXPECT_EQ(Match({{"ax", "yz"}}), "none");  // not the composite "a_x..." string of another key
}

constexpr std::string_view kTree = R"yaml(domain: m
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 6}
    descriptors:
      - key: method
        value: POST
        rate_limit: {unit: second, requests_per_unit: 7}
      - key: method
        descriptors:
          - key: user
            rate_limit: {unit: second, requests_per_unit: 8}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 9}
  - key: remote_address
    value: 10.1.1.1
)yaml";

TEST_F(MatcherTest, NoBacktracking) {
  Load(kTree);
  EXPECT_EQ(MatchedRequests({{"tenant", "acme"}, {"method", "GET"}}), 5);
  // tenant_acme matches level 1 but has no POST child: the key-only tenant branch (which has one)
  // is not tried.
  EXPECT_EQ(Match({{"tenant", "acme"}, {"method", "POST"}}), "none");
  EXPECT_EQ(MatchedRequests({{"tenant", "other"}, {"method", "POST"}}), 7);
}

TEST_F(MatcherTest, ShorterRequestGetsOnlyTheNodesOwnLimit) {
  Load(kTree);
  EXPECT_EQ(MatchedRequests({{"tenant", "foo"}}), 6);  // the key-only tenant's own limit
  EXPECT_EQ(Match({{"tenant", "acme"}}), "none");      // tenant_acme has no limit of its own
  EXPECT_EQ(Match({{"tenant", "foo"}, {"method", "GET"}}), "none");  // key-only method: no limit
}

TEST_F(MatcherTest, TooDeepRequestGetsNoLimit) {
  Load(kTree);
  // The POST rule is a leaf: one more entry and nothing applies (not the POST limit).
  EXPECT_EQ(Match({{"tenant", "foo"}, {"method", "POST"}, {"user", "bob"}}), "none");
  EXPECT_EQ(Match({{"remote_address", "10.0.0.1"}, {"path", "/x"}}), "none");
  // A node with children but no child for the next entry: no limit (not the node's own).
  EXPECT_EQ(Match({{"tenant", "foo"}, {"region", "eu"}}), "none");
}

TEST_F(MatcherTest, NestedDescriptorsThreeDeep) {
  Load(kTree);
  EXPECT_EQ(Match({{"tenant", "foo"}, {"method", "GET"}, {"user", "bob"}}), "m.tenant.method.user");
  EXPECT_EQ(MatchedRequests({{"tenant", "foo"}, {"method", "DELETE"}, {"user", "bob"}}), 8);
  // The entries must come in the tree's order.
  EXPECT_EQ(Match({{"method", "GET"}, {"tenant", "foo"}}), "none");
}

TEST_F(MatcherTest, AllowListEntryAndEmptyDescriptor) {
  Load(kTree);
  EXPECT_EQ(Match({{"remote_address", "10.1.1.1"}}), "none");  // exact entry without a limit
  EXPECT_EQ(MatchedRequests({{"remote_address", "10.1.1.2"}}), 9);
  EXPECT_EQ(Match({}), "none");
}

TEST_F(MatcherTest, PathReceivesTheNodeOfEachLevel) {
  Load(kTree);
  std::vector<const RuleNode*> path;
  const std::vector<Entry> entries = {{"tenant", "foo"}, {"method", "GET"}, {"user", "bob"}};
  const RuleNode* node = MatchDescriptor(*domain_, entries, &path);
  ASSERT_NE(node, nullptr);
  std::vector<std::string> names;
  for (const RuleNode* n : path) names.push_back(n->path);
  EXPECT_THAT(names, ElementsAre("m.tenant", "m.tenant.method", "m.tenant.method.user"));
  EXPECT_EQ(path.back(), node);

  // A failed match reports the levels it did match; the path is cleared first.
  const std::vector<Entry> acme = {{"tenant", "acme"}, {"method", "POST"}};
  EXPECT_EQ(MatchDescriptor(*domain_, acme, &path), nullptr);
  names.clear();
  for (const RuleNode* n : path) names.push_back(n->path);
  EXPECT_THAT(names, ElementsAre("m.tenant_acme"));
  EXPECT_EQ(MatchDescriptor(*domain_, std::vector<Entry>{}, &path), nullptr);
  EXPECT_THAT(path, IsEmpty());
}

TEST_F(MatcherTest, PathIntoCallersRoomMatchesTheVectorForm) {
  Load(kTree);
  const std::vector<Entry> entries = {{"tenant", "foo"}, {"method", "GET"}, {"user", "bob"}};
  std::vector<const RuleNode*> expected;
  const RuleNode* node = MatchDescriptor(*domain_, entries, &expected);
  ASSERT_NE(node, nullptr);

  std::array<const RuleNode*, 3> room{};
  size_t depth = 0;
  EXPECT_EQ(MatchDescriptor(*domain_, entries, room, &depth), node);
  EXPECT_EQ(depth, 3u);
  EXPECT_THAT(room, ElementsAreArray(expected));

  // A failed match reports the levels it did match; with less room, what fits.
  const std::vector<Entry> acme = {{"tenant", "acme"}, {"method", "POST"}};
  EXPECT_EQ(MatchDescriptor(*domain_, acme, room, &depth), nullptr);
  EXPECT_EQ(depth, 1u);
  EXPECT_EQ(room[0]->path, "m.tenant_acme");
  std::array<const RuleNode*, 1> one{};
  EXPECT_EQ(MatchDescriptor(*domain_, entries, one, &depth), node);
  EXPECT_EQ(depth, 3u);
  EXPECT_EQ(one[0], expected[0]);
}

TEST_F(MatcherTest, MatchLevelReportsHowItMatched) {
  Load(kPaths);
  MatchKind kind;
  const RuleNode* node = MatchLevel(domain_->root, {"path", "/api/v1/users"}, &kind);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(kind, MatchKind::kExact);
  node = MatchLevel(domain_->root, {"path", "/api/x"}, &kind);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(kind, MatchKind::kWildcard);
  EXPECT_EQ(node->value, "/api/*");
  node = MatchLevel(domain_->root, {"path", "/x"}, &kind);
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(kind, MatchKind::kKeyOnly);
  EXPECT_FALSE(node->has_value);
  EXPECT_EQ(MatchLevel(domain_->root, {"nope", "/x"}, &kind), nullptr);
}

TEST_F(MatcherTest, ExampleBFromTheReference) {
  Load(testing::kExampleB);
  EXPECT_EQ(MatchedRequests({{"tenant", "foo"}, {"method", "POST"}}), 100);
  EXPECT_EQ(MatchedRequests({{"tenant", "foo"}, {"method", "GET"}}), 1000);
  EXPECT_EQ(MatchedRequests({{"tenant", "acme"}, {"method", "POST"}}), 5000);
  EXPECT_EQ(Match({{"tenant", "foo"}}), "none");
  EXPECT_EQ(Match({{"tenant", "foo"}, {"method", "POST"}, {"user", "bob"}}), "none");
  EXPECT_EQ(MatchedRequests({{"generic_key", "global"}}), 2000);
}

// Upstream (config_impl.go loadDescriptors) stores a descriptor whose `value` is the empty string
// under its key alone: `value: ""` is a key-only rule and matches every value.
TEST_F(MatcherTest, EmptyConfigValueIsKeyOnlyAsUpstream) {
  Load(R"yaml(domain: m
descriptors:
  - key: user
    value: ""
    rate_limit: {unit: second, requests_per_unit: 1}
)yaml");
  EXPECT_EQ(MatchedRequests({{"user", "alice"}}), 1);
  EXPECT_EQ(MatchedRequests({{"user", ""}}), 1);
}

// ---------------------------------------------------------------------------------------------
// ChoosePlan: the plan a plan_from rule applies, and why (configuration.md, "Plans").

constexpr std::string_view kMatcherPlans = R"yaml(domain: p
plans:
  free: {limits: [{requests: 2, window: 1m}]}
  pro:  {limits: [{requests: 5, window: 1m}]}
default_plan: free
descriptors:
  - key: plan
    descriptors:
      - key: api_key
        plan_from: plan
  - key: api_key
    plan_from: plan
)yaml";

// "PLAN by SOURCE" (named, clients, default), or "none by SOURCE".
std::string Chosen(const Domain& domain, const std::vector<Entry>& entries) {
  const RuleNode* node = MatchDescriptor(domain, entries);
  if (node == nullptr || node->plan_from.empty()) return "no plan_from rule";
  const PlanChoice choice = ChoosePlan(domain, *node, entries);
  const char* source = choice.source == PlanSource::kNamed     ? "named"
                       : choice.source == PlanSource::kClients ? "clients"
                                                               : "default";
  return (choice.plan == nullptr ? std::string("none") : choice.plan->name) + " by " + source;
}

TEST_F(MatcherTest, ChoosePlanTakesTheNamedPlanElseTheDefault) {
  Load(kMatcherPlans);
  EXPECT_EQ(Chosen(*domain_, {{"plan", "pro"}, {"api_key", "k"}}), "pro by named");
  EXPECT_EQ(Chosen(*domain_, {{"plan", "free"}, {"api_key", "k"}}), "free by named");
  EXPECT_EQ(Chosen(*domain_, {{"api_key", "k"}}), "free by default");
  // An unknown plan falls back to the default_plan; the choice still points at what was named.
  const std::vector<Entry> gold = {{"plan", "gold"}, {"api_key", "k"}};
  EXPECT_EQ(Chosen(*domain_, gold), "free by default");
  const PlanChoice choice = ChoosePlan(*domain_, *MatchDescriptor(*domain_, gold), gold);
  ASSERT_NE(choice.named, nullptr);
  EXPECT_EQ(choice.named->value, "gold");
}

TEST(ChoosePlanTest, ClientsFileByTheMatchedValueUnlessTheRequestNamesAPlan) {
  testing::TempDir dir;
  dir.Write("p.yaml", std::string(kMatcherPlans) + "clients: clients.csv\n");
  dir.Write("clients.csv", "key,plan\nk-pro,pro\n");
  const LoadResult result = LoadConfig({dir.Path("p.yaml")});
  ASSERT_TRUE(result.errors.empty()) << result.errors[0].ToString();
  const Domain& domain = *result.config->domains[0];
  EXPECT_EQ(Chosen(domain, {{"api_key", "k-pro"}}), "pro by clients");
  EXPECT_EQ(Chosen(domain, {{"api_key", "k-other"}}), "free by default");
  EXPECT_EQ(Chosen(domain, {{"plan", "free"}, {"api_key", "k-pro"}}), "free by named");
}

}  // namespace
}  // namespace sluice::rules
