// From HTTP requests to descriptors by the domains' `http:` sections (http_routes.h): route
// choice by path and method, every action kind, a missing header skipping its descriptor, the
// key length bound, and the client address behind trusted proxies.

#include "http/http_routes.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/loader.h"
#include "rules/parsers.h"

namespace sluice::http {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr std::string_view kConfig = R"yaml(domain: web
http:
  deny_status: 403
  trusted_proxies: [127.0.0.1, 10.0.0.0/8, "fd00::/8"]
  routes:
    - match: {path: /login, methods: [POST]}
      rate_limits:
        - actions:
            - remote_address: {}
            - generic_key: {descriptor_value: login}
    - match: {prefix: /api}
      rate_limits:
        - actions:
            - request_headers: {header_name: X-Api-Key, descriptor_key: api_key}
        - actions:
            - method: {}
            - path: {descriptor_key: p}
    - match: {path: /keyed}
      rate_limits:
        - actions:
            - request_headers: {header_name: X-Api-Key, descriptor_key: api_key}
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
)yaml";

class HttpRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rules::LoadResult loaded = rules::LoadConfigText("web.yaml", kConfig);
    ASSERT_THAT(loaded.errors, IsEmpty())
        << (loaded.errors.empty() ? "" : loaded.errors[0].ToString());
    config_ = loaded.config;
  }

  absl::StatusOr<RouteChecks> Build(std::string_view method, std::string_view path,
                                    std::string_view peer = "192.0.2.1") {
    return BuildRouteChecks(*config_,
                            {.method = method, .path = path, .peer = peer, .headers = &request_});
  }

  // "k=v,k=v" of descriptor `i` of the only request.
  static std::string Text(const RouteChecks& checks, size_t i) {
    std::string out;
    for (const auto& e : checks.requests.at(0).descriptors.at(i).entries) {
      out += (out.empty() ? "" : ",") + e.key + "=" + e.value;
    }
    return out;
  }

  std::shared_ptr<const rules::Config> config_;
  HttpRequest request_;
};

TEST_F(HttpRoutesTest, ExactPathAndMethodRoute) {
  auto checks = Build("POST", "/login");
  ASSERT_TRUE(checks.ok());
  ASSERT_THAT(checks->requests, SizeIs(1));
  EXPECT_EQ(checks->requests[0].domain, "web");
  EXPECT_EQ(checks->sections[0]->deny_status, 403);
  ASSERT_THAT(checks->requests[0].descriptors, SizeIs(1));
  EXPECT_EQ(Text(*checks, 0), "remote_address=192.0.2.1,generic_key=login");

  // Wrong method, or a longer path than the exact one: no route, nothing to check.
  EXPECT_THAT(Build("GET", "/login")->requests, IsEmpty());
  EXPECT_THAT(Build("POST", "/login/x")->requests, IsEmpty());
  EXPECT_THAT(Build("GET", "/other")->requests, IsEmpty());
}

TEST_F(HttpRoutesTest, PrefixRouteWithHeaderMethodAndPath) {
  request_.set("X-Api-Key", "key-1");
  auto checks = Build("GET", "/api/v2/items");
  ASSERT_TRUE(checks.ok());
  ASSERT_THAT(checks->requests[0].descriptors, SizeIs(2));
  EXPECT_EQ(Text(*checks, 0), "api_key=key-1");
  EXPECT_EQ(Text(*checks, 1), "method=GET,p=/api/v2/items");
}

TEST_F(HttpRoutesTest, MissingHeaderSkipsOnlyItsDescriptor) {
  auto checks = Build("DELETE", "/api");
  ASSERT_TRUE(checks.ok());
  ASSERT_THAT(checks->requests[0].descriptors, SizeIs(1));
  EXPECT_EQ(Text(*checks, 0), "method=DELETE,p=/api");
}

TEST_F(HttpRoutesTest, RouteWhoseEveryDescriptorIsSkippedChecksNothing) {
  auto checks = Build("GET", "/keyed");
  ASSERT_TRUE(checks.ok());
  EXPECT_THAT(checks->requests, IsEmpty());
  EXPECT_THAT(checks->sections, IsEmpty());
  request_.set("X-Api-Key", "k1");
  checks = Build("GET", "/keyed");
  ASSERT_TRUE(checks.ok());
  ASSERT_THAT(checks->requests, SizeIs(1));
  ASSERT_THAT(checks->sections, SizeIs(1));
  EXPECT_EQ(Text(*checks, 0), "api_key=k1");
}

TEST_F(HttpRoutesTest, UnicodeAndLongValuesUpToTheMaximum) {
  request_.set("X-Api-Key", "ключ-🔑");
  auto checks = Build("GET", "/api");
  ASSERT_TRUE(checks.ok());
  EXPECT_EQ(Text(*checks, 0), "api_key=ключ-🔑");

  request_.set("X-Api-Key", std::string(config_->settings.max_key_bytes, 'k'));
  EXPECT_TRUE(Build("GET", "/api").ok());
  request_.set("X-Api-Key", std::string(config_->settings.max_key_bytes + 1, 'k'));
  checks = Build("GET", "/api");
  ASSERT_FALSE(checks.ok());
  EXPECT_THAT(std::string(checks.status().message()), ::testing::HasSubstr("api_key"));
}

TEST_F(HttpRoutesTest, ForwardedForIsBelievedOnlyFromTrustedPeers) {
  request_.set("X-Forwarded-For", "203.0.113.7, 10.1.2.3");
  // From a trusted proxy: 10.1.2.3 is trusted too, so the client is 203.0.113.7.
  EXPECT_EQ(Text(*Build("POST", "/login", "127.0.0.1"), 0),
            "remote_address=203.0.113.7,generic_key=login");
  // From anyone else the header is ignored.
  EXPECT_EQ(Text(*Build("POST", "/login", "198.51.100.9"), 0),
            "remote_address=198.51.100.9,generic_key=login");
}

std::vector<rules::Cidr> Trusted(std::vector<std::string_view> texts) {
  std::vector<rules::Cidr> out;
  for (auto t : texts) out.push_back(*rules::ParseCidr(t));
  return out;
}

TEST(ClientAddressTest, WalksForwardedForFromTheRight) {
  const auto trusted = Trusted({"10.0.0.0/8", "127.0.0.1", "fd00::/8"});
  // A client that forges a leftmost entry does not get to choose: the first untrusted hop wins.
  EXPECT_EQ(ClientAddress("127.0.0.1", {"1.1.1.1, 203.0.113.7, 10.0.0.5"}, trusted), "203.0.113.7");
  // Several header fields are one list, in order.
  EXPECT_EQ(ClientAddress("127.0.0.1", {"1.1.1.1", "203.0.113.7", "10.0.0.5"}, trusted),
            "203.0.113.7");
  // Every hop trusted: the farthest.
  EXPECT_EQ(ClientAddress("127.0.0.1", {"10.9.9.9,10.0.0.5"}, trusted), "10.9.9.9");
  // No header: the peer.
  EXPECT_EQ(ClientAddress("127.0.0.1", {}, trusted), "127.0.0.1");
  // IPv6 hops.
  EXPECT_EQ(ClientAddress("fd00::1", {"2001:db8::5, fd12::3"}, trusted), "2001:db8::5");
  // Garbage stops the walk at the last good hop (the proxy that passed the garbage on).
  EXPECT_EQ(ClientAddress("127.0.0.1", {"1.1.1.1, unknown, 10.0.0.5"}, trusted), "10.0.0.5");
  // An untrusted peer's header means nothing.
  EXPECT_EQ(ClientAddress("192.0.2.1", {"203.0.113.7"}, trusted), "192.0.2.1");
  // Nothing trusted at all.
  EXPECT_EQ(ClientAddress("127.0.0.1", {"203.0.113.7"}, {}), "127.0.0.1");
}

TEST(ClientAddressTest, AddressesWithAZeroByteAreNotAddresses) {
  using namespace std::string_view_literals;
  EXPECT_FALSE(rules::ParseCidr("10.0.0.1\0junk"sv).has_value());
  EXPECT_FALSE(rules::ParseCidr("10.0.0.0/8\0"sv).has_value());
  EXPECT_TRUE(rules::ParseCidr("10.0.0.1"sv).has_value());
}

TEST(ClientAddressTest, PrefixBoundariesAreExact) {
  const auto trusted = Trusted({"10.0.0.0/9"});  // 10.0.0.0 - 10.127.255.255
  EXPECT_EQ(ClientAddress("10.127.255.255", {"203.0.113.7"}, trusted), "203.0.113.7");
  EXPECT_EQ(ClientAddress("10.128.0.0", {"203.0.113.7"}, trusted), "10.128.0.0");
}

}  // namespace
}  // namespace sluice::http
