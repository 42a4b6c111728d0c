// A domain split over several files (settings `merge_domains: true`, envoyproxy/ratelimit's
// MERGE_DOMAIN_CONFIG): upstream's own cases (test/config/config_test.go TestDomainMerge,
// TestDuplicateDomain, TestDuplicateKeyDomainMerge) plus what sluice adds: both positions of a
// duplicate, and domain-wide keys that must not disagree between the files.

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/loader.h"
#include "rules/matcher.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

using testing::TempDir;

// upstream's test/config/merge_domain_key1.yaml and merge_domain_key2.yaml.
constexpr char kKey1[] = R"yaml(domain: test-domain
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 10
)yaml";
constexpr char kKey2[] = R"yaml(domain: test-domain
descriptors:
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 20
)yaml";

std::vector<std::string> Lines(const LoadResult& result) {
  std::vector<std::string> lines;
  for (const ConfigError& e : result.errors) lines.push_back(e.ToString());
  EXPECT_EQ(result.config == nullptr, !lines.empty()) << "config must be null iff there are errors";
  return lines;
}

LoadOptions Merging() {
  LoadOptions options;
  options.settings.emplace();
  options.settings->file = "<test>";
  options.settings->merge_domains = true;
  return options;
}

uint64_t RequestsOf(const Domain& domain, const std::string& key, const std::string& value) {
  const std::vector<Entry> entries = {{key, value}};
  const RuleNode* node = MatchDescriptor(domain, entries);
  if (node == nullptr || node->limits.empty()) return 0;
  return static_cast<uint64_t>(node->limits.front().limit.requests);
}

TEST(LoaderMergeTest, TwoFilesOfOneDomainMergeAndBothLimitsResolve) {
  TempDir dir;
  dir.Write("config/merge_domain_key1.yaml", kKey1);
  dir.Write("config/merge_domain_key2.yaml", kKey2);
  const LoadResult result = LoadConfig({dir.Path("config")}, Merging());
  ASSERT_THAT(Lines(result), IsEmpty());
  ASSERT_EQ(result.config->domains.size(), 1u);
  const Domain* domain = result.config->FindDomain("test-domain");
  ASSERT_NE(domain, nullptr);
  EXPECT_EQ(RequestsOf(*domain, "key1", "value1"), 10u);
  EXPECT_EQ(RequestsOf(*domain, "key2", "value2"), 20u);
  EXPECT_EQ(domain->limit_count, 2u);
  EXPECT_EQ(result.config->limit_count, 2u);
}

TEST(LoaderMergeTest, TheSettingsFileTurnsMergingOn) {
  TempDir dir;
  dir.Write("sluice.yaml", "merge_domains: true\n");
  dir.Write("a.yaml", kKey1);
  dir.Write("b.yaml", kKey2);
  const LoadResult result = LoadConfig({dir.Path("")});
  ASSERT_THAT(Lines(result), IsEmpty());
  EXPECT_TRUE(result.config->settings.merge_domains);
  EXPECT_EQ(RequestsOf(*result.config->FindDomain("test-domain"), "key2", "value2"), 20u);
}

TEST(LoaderMergeTest, WithoutMergingASecondFileOfADomainIsADuplicateDomain) {
  TempDir dir;
  const std::string a = dir.Write("a.yaml", kKey1);
  const std::string b = dir.Write("b.yaml", kKey2);
  EXPECT_THAT(
      Lines(LoadConfig({a, b})),
      ElementsAre(b + ":1:1: duplicate domain 'test-domain' in config file (also in " + a + ")"));
}

TEST(LoaderMergeTest, TheSameFileNamedTwiceIsReadOnceUnderAnySpelling) {
  // Not a second file of its domain: a settings file's rules directory named again beside it,
  // or one path written two ways, is one file.
  TempDir dir;
  const std::string a = dir.Write("rules/merge_domain_key1.yaml", kKey1);
  const std::string other_spelling = dir.Path("rules/./../rules/merge_domain_key1.yaml");
  for (const LoadOptions& options : {LoadOptions{}, Merging()}) {
    const LoadResult result = LoadConfig({a, other_spelling, dir.Path("rules")}, options);
    ASSERT_THAT(result.errors, IsEmpty());
    ASSERT_THAT(result.config->domains, SizeIs(1));
    EXPECT_EQ(result.config->limit_count, 1u);
  }
}

TEST(LoaderMergeTest, ADuplicateTopLevelDescriptorIsAnErrorEvenWhenItsChildrenDiffer) {
  // No deep merge, as upstream: a top-level key (without value here) in two files is a duplicate.
  TempDir dir;
  const std::string a = dir.Write("a.yaml", R"yaml(domain: d
descriptors:
  - key: user
    descriptors:
      - key: path
        value: /a
        rate_limit: {unit: second, requests_per_unit: 1}
)yaml");
  const std::string b = dir.Write("b.yaml", R"yaml(# another team's file
domain: d
descriptors:
  - key: other
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    descriptors:
      - key: path
        value: /b
        rate_limit: {unit: second, requests_per_unit: 1}
)yaml");
  EXPECT_THAT(
      Lines(LoadConfig({a, b}, Merging())),
      ElementsAre(b + ":6:5: duplicate descriptor composite key 'd.user' (also at " + a + ":3:5)"));
}

TEST(LoaderMergeTest, WildcardAndKeyOnlyDescriptorsOfDifferentFilesMergeWhenDistinct) {
  TempDir dir;
  const std::string a = dir.Write("a.yaml", R"yaml(domain: d
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 3}
)yaml");
  const std::string b = dir.Write("b.yaml", R"yaml(domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: path
    value: /api/v2
    rate_limit: {unit: second, requests_per_unit: 5}
)yaml");
  const LoadResult result = LoadConfig({a, b}, Merging());
  ASSERT_THAT(Lines(result), IsEmpty());
  const Domain& domain = *result.config->FindDomain("d");
  EXPECT_EQ(RequestsOf(domain, "path", "/api/v2"), 5u);  // exact beats wildcard
  EXPECT_EQ(RequestsOf(domain, "path", "/api/v1"), 3u);  // wildcard beats key-only
  EXPECT_EQ(RequestsOf(domain, "path", "/other"), 7u);
}

TEST(LoaderMergeTest, DisagreeingDomainSettingsAreAnErrorNamingBothFiles) {
  TempDir dir;
  const std::string a = dir.Write("a.yaml", std::string("failure_mode: closed\n") + kKey1);
  const std::string b = dir.Write("b.yaml", kKey2);
  const std::vector<std::string> lines = Lines(LoadConfig({a, b}, Merging()));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0],
              HasSubstr(b + ":1:1: domain 'test-domain' is merged from " + a + " and " + b +
                        ", which disagree on failure_mode (closed in " + a + ", open here)"));
}

TEST(LoaderMergeTest, EqualDomainSettingsMerge) {
  TempDir dir;
  const std::string a =
      dir.Write("a.yaml", std::string("failure_mode: closed\nshadow_mode: true\n") + kKey1);
  const std::string b =
      dir.Write("b.yaml", std::string("shadow_mode: true\nfailure_mode: closed\n") + kKey2);
  const LoadResult result = LoadConfig({a, b}, Merging());
  ASSERT_THAT(Lines(result), IsEmpty());
  const Domain& domain = *result.config->FindDomain("test-domain");
  EXPECT_EQ(domain.failure_mode, FailureMode::kClosed);
  EXPECT_TRUE(domain.shadow_mode);
}

TEST(LoaderMergeTest, CountDeniedInOneFileOnlyIsADisagreement) {
  TempDir dir;
  const std::string a = dir.Write("a.yaml", kKey1);
  const std::string b = dir.Write("b.yaml", std::string("count_denied: false\n") + kKey2);
  const std::vector<std::string> lines = Lines(LoadConfig({a, b}, Merging()));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("disagree on count_denied (unset in " + a + ", false here)"));
}

TEST(LoaderMergeTest, HttpOrPlansInTwoFilesOfAMergedDomainAreAnError) {
  TempDir dir;
  const std::string http = "http:\n  routes:\n    - match: {prefix: /}\n      rate_limits: []\n";
  const std::string a = dir.Write("a.yaml", http + kKey1);
  const std::string b = dir.Write("b.yaml", http + kKey2);
  const std::vector<std::string> lines = Lines(LoadConfig({a, b}, Merging()));
  ASSERT_EQ(lines.size(), 1u) << lines.front();
  EXPECT_THAT(lines[0], HasSubstr("and both have `http`; a merged domain takes it from one file"));
}

TEST(LoaderMergeTest, PlansAndHttpOfOneFileServeTheMergedDomain) {
  TempDir dir;
  dir.Write("clients.csv", "alice,gold\n");
  const std::string a = dir.Write("a.yaml", kKey1);
  const std::string b = dir.Write("b.yaml", R"yaml(domain: test-domain
plans:
  gold:
    limits: [{requests: 100, window: 1m}]
  free:
    limits: [{requests: 5, window: 1m}]
default_plan: free
clients: clients.csv
descriptors:
  - key: api_key
    plan_from: api_key
http:
  routes:
    - match: {prefix: /}
      rate_limits:
        - actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]
)yaml");
  const LoadResult result = LoadConfig({a, b}, Merging());
  ASSERT_THAT(Lines(result), IsEmpty());
  const Domain& domain = *result.config->FindDomain("test-domain");
  ASSERT_TRUE(domain.http.has_value());
  EXPECT_EQ(domain.http->routes.size(), 1u);
  ASSERT_NE(domain.clients, nullptr);
  const Plan* gold = domain.clients->Find("alice");
  ASSERT_NE(gold, nullptr);
  EXPECT_EQ(gold->name, "gold");
  EXPECT_EQ(domain.default_plan, "free");
  EXPECT_EQ(RequestsOf(domain, "key1", "value1"), 10u);
  EXPECT_EQ(domain.limit_count, 3u);
}

TEST(LoaderMergeTest, GivenSettingsRejectASettingsDocumentInTheTree) {
  TempDir dir;
  dir.Write("config/a.yaml", kKey1);
  const std::string settings = dir.Write("config/sluice.yaml", "count_denied: true\n");
  EXPECT_THAT(Lines(LoadConfig({dir.Path("config")}, Merging())),
              ElementsAre(settings + ":1:1: config file cannot have empty domain (the settings "
                                     "come from <test>, not from a file)"));
}

TEST(LoaderMergeTest, UpstreamLayoutReadsEveryFileAndDotfilesWhenAsked) {
  TempDir dir;
  dir.Write("config/a.conf", kKey1);
  dir.Write("config/.b", R"yaml(domain: other
descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]
)yaml");
  LoadOptions options;
  options.any_extension = true;
  LoadResult result = LoadConfig({dir.Path("config")}, options);
  ASSERT_THAT(Lines(result), IsEmpty());
  EXPECT_NE(result.config->FindDomain("test-domain"), nullptr);
  EXPECT_EQ(result.config->FindDomain("other"), nullptr);
  options.dotfiles = true;
  result = LoadConfig({dir.Path("config")}, options);
  ASSERT_THAT(Lines(result), IsEmpty());
  EXPECT_NE(result.config->FindDomain("other"), nullptr);
}

}  // namespace
}  // namespace sluice::rules
