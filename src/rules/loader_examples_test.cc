// The loader (loader.h) on envoyproxy/ratelimit's own files: examples A-D (as in
// tests/rules/examples/) load unchanged into the rule tree, alone and from one directory, and so
// does every key, unit and bound that upstream's format (its README and
// src/config/config_impl.go) has. Matching is tested in matcher_test.cc, decisions in
// engine/engine_*_test.cc, the binary in tests/rules_golden.sh.

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "rules/loader_testing.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

using test::Child;
using test::Joined;
using test::kExampleA;
using test::kExampleB;
using test::kExampleC;
using test::kExampleD;
using test::kSecondUs;
using test::MustLoad;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::TempDir;

TEST(LoaderExamplesTest, TheKitsExamplesAreTheFixturesOfTheGoldenTests) {
  // tests/rules/examples/ (rules_golden.sh) holds the same documents, after a comment line.
  const std::pair<std::string_view, const char*> examples[] = {
      {kExampleA, "edge"}, {kExampleB, "api"}, {kExampleC, "files"}, {kExampleD, "checkout"}};
  for (const auto& [text, name] : examples) {
    std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/tests/rules/examples/" + name + ".yaml");
    std::string comment;
    ASSERT_TRUE(std::getline(in, comment)) << name;
    EXPECT_TRUE(comment.starts_with("# Example ")) << name;
    const std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(rest, text) << name;
  }
}

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

}  // namespace
}  // namespace sluice::rules
