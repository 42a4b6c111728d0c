// The RateLimitConfig -> rules mapping, through the loader that files take: a rule set shaped like
// those Envoy Gateway's translator makes (routes as generic keys, masked remote addresses, MONTH
// and YEAR units, shadow mode, names and replaces, metadata), and the faults a response can have.

#include "xds/rate_limit_config.h"

#include <gtest/gtest.h>

#include "rules/loader.h"

namespace sluice::xds {
namespace {

namespace v3 = ratelimit::config::ratelimit::v3;
namespace discovery = envoy::service::discovery::v3;

v3::RateLimitDescriptor* Child(google::protobuf::RepeatedPtrField<v3::RateLimitDescriptor>* list,
                               const std::string& key, const std::string& value) {
  v3::RateLimitDescriptor* d = list->Add();
  d->set_key(key);
  d->set_value(value);
  return d;
}

void Limit(v3::RateLimitDescriptor* d, v3::RateLimitUnit unit, uint32_t requests) {
  d->mutable_rate_limit()->set_unit(unit);
  d->mutable_rate_limit()->set_requests_per_unit(requests);
}

// Envoy Gateway's shape: domain = the listener, a descriptor per route, a rule's matches below.
v3::RateLimitConfig GatewayConfig() {
  v3::RateLimitConfig c;
  c.set_name("first-listener");
  c.set_domain("first-listener");
  v3::RateLimitDescriptor* route = Child(c.mutable_descriptors(), "first-route", "first-route");
  v3::RateLimitDescriptor* masked =
      Child(route->mutable_descriptors(), "masked_remote_address", "192.168.0.0/16");
  Limit(masked, v3::SECOND, 5);
  v3::RateLimitDescriptor* month = Child(route->mutable_descriptors(), "rule-0-match-0", "m");
  Limit(month, v3::MONTH, 5);
  v3::RateLimitDescriptor* second = Child(c.mutable_descriptors(), "second-route", "second-route");
  v3::RateLimitDescriptor* year = Child(second->mutable_descriptors(), "rule-0-match-0", "y");
  Limit(year, v3::YEAR, 1);
  v3::RateLimitDescriptor* week = Child(second->mutable_descriptors(), "rule-1-match-0", "w");
  Limit(week, v3::WEEK, 7);
  week->set_shadow_mode(true);
  week->set_detailed_metric(true);
  week->mutable_rate_limit()->set_name("weekly");
  week->mutable_rate_limit()->add_replaces()->set_name("yearly");
  (*week->mutable_metadata()->mutable_fields())["tier"].set_string_value("gold");
  return c;
}

discovery::DiscoveryResponse Response(const std::vector<v3::RateLimitConfig>& configs) {
  discovery::DiscoveryResponse r;
  r.set_version_info("v1");
  r.set_type_url(kRateLimitConfigType);
  for (const auto& c : configs) r.add_resources()->PackFrom(c);
  return r;
}

rules::LoadResult Load(const discovery::DiscoveryResponse& response) {
  auto domains = RemoteDomainsOf(response);
  EXPECT_TRUE(domains.ok()) << domains.status();
  rules::LoadOptions options;
  options.remote_rules = true;
  options.settings.emplace();
  return rules::LoadConfig({}, options, domains.ok() ? domains->get() : nullptr);
}

const rules::RuleNode* Find(const rules::RuleNode& parent, const std::string& key,
                            const std::string& value) {
  for (const auto& child : parent.children) {
    if (child->key == key && child->value == value) return child.get();
  }
  return nullptr;
}

TEST(RateLimitConfigTest, GatewayRuleSetLoadsAsItsYamlWould) {
  const rules::LoadResult result = Load(Response({GatewayConfig()}));
  ASSERT_TRUE(result.errors.empty()) << result.errors[0].ToString();
  const rules::Domain* domain = result.config->FindDomain("first-listener");
  ASSERT_NE(domain, nullptr);
  EXPECT_EQ(domain->file, "xds:first-listener");
  EXPECT_EQ(domain->limit_count, 4u);
  const rules::RuleNode* route = Find(domain->root, "first-route", "first-route");
  ASSERT_NE(route, nullptr);
  EXPECT_FALSE(route->has_rate_limit);
  const rules::RuleNode* masked = Find(*route, "masked_remote_address", "192.168.0.0/16");
  ASSERT_NE(masked, nullptr);
  ASSERT_EQ(masked->limits.size(), 1u);
  EXPECT_EQ(masked->limits[0].limit.requests, 5u);
  EXPECT_EQ(masked->limits[0].limit.window_us, 1000000);
  const rules::RuleNode* month = Find(*route, "rule-0-match-0", "m");
  ASSERT_NE(month, nullptr);
  EXPECT_EQ(month->limits[0].limit.window_us, int64_t{30} * 86400 * 1000000);
  const rules::RuleNode* second = Find(domain->root, "second-route", "second-route");
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(Find(*second, "rule-0-match-0", "y")->limits[0].limit.window_us,
            int64_t{365} * 86400 * 1000000);
  const rules::RuleNode* week = Find(*second, "rule-1-match-0", "w");
  ASSERT_NE(week, nullptr);
  EXPECT_EQ(week->limits[0].limit.requests, 7u);
  EXPECT_EQ(week->limits[0].limit.window_us, int64_t{7} * 86400 * 1000000);
  EXPECT_TRUE(week->shadow_mode);
  EXPECT_TRUE(week->detailed_metric);
  EXPECT_EQ(week->rate_limit_name, "weekly");
  EXPECT_EQ(week->replaces, std::vector<std::string>{"yearly"});
  EXPECT_EQ(week->metadata_json, R"({"tier":"gold"})");
}

TEST(RateLimitConfigTest, MetadataKeepsItsTypes) {
  v3::RateLimitConfig c;
  c.set_domain("d");
  v3::RateLimitDescriptor* d = Child(c.mutable_descriptors(), "k", "v");
  Limit(d, v3::MINUTE, 1);
  auto* fields = d->mutable_metadata()->mutable_fields();
  (*fields)["code"].set_string_value("123");  // a string that looks like a number stays one
  (*fields)["weight"].set_number_value(2.5);
  (*fields)["on"].set_bool_value(true);
  (*fields)["list"].mutable_list_value()->add_values()->set_number_value(1);
  (*(*fields)["nested"].mutable_struct_value()->mutable_fields())["x"].set_string_value("y");
  const rules::LoadResult result = Load(Response({c}));
  ASSERT_TRUE(result.errors.empty()) << result.errors[0].ToString();
  const std::string& json = Find(result.config->FindDomain("d")->root, "k", "v")->metadata_json;
  for (const char* part : {R"("code":"123")", R"("weight":2.5)", R"("on":true)", R"("list":[1])",
                           R"("nested":{"x":"y"})"}) {
    EXPECT_NE(json.find(part), std::string::npos) << part << " in " << json;
  }
}

TEST(RateLimitConfigTest, UnlimitedNeedsNoUnit) {
  v3::RateLimitConfig c;
  c.set_domain("d");
  v3::RateLimitDescriptor* d = Child(c.mutable_descriptors(), "k", "v");
  d->mutable_rate_limit()->set_unlimited(true);
  const rules::LoadResult result = Load(Response({c}));
  ASSERT_TRUE(result.errors.empty()) << result.errors[0].ToString();
  EXPECT_TRUE(Find(result.config->FindDomain("d")->root, "k", "v")->unlimited);
}

TEST(RateLimitConfigTest, TheLoadersErrorsNameTheResource) {
  v3::RateLimitConfig c;
  c.set_name("bad-listener");
  c.set_domain("bad");
  Limit(Child(c.mutable_descriptors(), "k", "v"), v3::UNKNOWN, 5);
  rules::LoadResult result = Load(Response({c}));
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].position.file, "xds:bad-listener");
  EXPECT_NE(result.errors[0].message.find("UNKNOWN"), std::string::npos)
      << result.errors[0].message;

  v3::RateLimitConfig nameless;  // no domain: refused as a file without one is
  Limit(Child(nameless.mutable_descriptors(), "k", "v"), v3::SECOND, 1);
  result = Load(Response({nameless}));
  ASSERT_FALSE(result.errors.empty());
  EXPECT_EQ(result.errors[0].position.file, "xds:#0");
  EXPECT_NE(result.errors[0].message.find("empty domain"), std::string::npos)
      << result.errors[0].message;

  v3::RateLimitConfig twin = GatewayConfig();  // one domain twice: a duplicate, as for files
  twin.set_name("again");
  result = Load(Response({GatewayConfig(), twin}));
  ASSERT_FALSE(result.errors.empty());
  EXPECT_NE(result.errors[0].message.find("duplicate domain 'first-listener'"), std::string::npos)
      << result.errors[0].message;
}

TEST(RateLimitConfigTest, ResourcesOfAnotherTypeOrUndecodableAreRefused) {
  discovery::DiscoveryResponse response = Response({GatewayConfig()});
  response.add_resources()->PackFrom(discovery::DiscoveryRequest());
  auto domains = RemoteDomainsOf(response);
  ASSERT_FALSE(domains.ok());
  EXPECT_NE(domains.status().message().find("resource #1 is a "
                                            "type.googleapis.com/"
                                            "envoy.service.discovery.v3.DiscoveryRequest"),
            std::string::npos)
      << domains.status();

  response = Response({});
  google::protobuf::Any* bad = response.add_resources();
  bad->set_type_url(kRateLimitConfigType);
  bad->set_value("\xff\xff\xff");
  domains = RemoteDomainsOf(response);
  ASSERT_FALSE(domains.ok());
  EXPECT_NE(domains.status().message().find("does not decode"), std::string::npos);
}

TEST(RateLimitConfigTest, NoResourcesIsNoRules) {
  const rules::LoadResult result = Load(Response({}));
  ASSERT_TRUE(result.errors.empty());
  EXPECT_TRUE(result.config->domains.empty());
}

TEST(RateLimitConfigTest, TheVersionFollowsTheContent) {
  const rules::LoadResult a = Load(Response({GatewayConfig()}));
  v3::RateLimitConfig changed = GatewayConfig();
  changed.mutable_descriptors(0)
      ->mutable_descriptors(0)
      ->mutable_rate_limit()
      ->set_requests_per_unit(6);
  const rules::LoadResult b = Load(Response({changed}));
  const rules::LoadResult a_again = Load(Response({GatewayConfig()}));
  ASSERT_TRUE(a.config && b.config && a_again.config);
  EXPECT_NE(a.config->version, b.config->version);
  EXPECT_EQ(a.config->version, a_again.config->version);
}

}  // namespace
}  // namespace sluice::xds
