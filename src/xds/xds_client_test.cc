// XdsClient against a real gRPC management server (xds_testing.h) and a real ConfigManager: each
// version is applied and ACKed, a bad one NACKed with the loader's errors while the old rules
// stay, a restarted server is rejoined with the last version ACKed, mutual TLS, and the backoff.
// These run on real time (a gRPC stream), every wait bounded.

#include "xds/xds_client.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "rules/config_manager.h"
#include "tests/support/tls_certs.h"
#include "xds/xds_testing.h"

namespace sluice::xds {
namespace {

namespace v3 = ratelimit::config::ratelimit::v3;
using testing::TestAdsServer;

v3::RateLimitConfig Config(const std::string& domain, uint32_t requests,
                           v3::RateLimitUnit unit = v3::MINUTE) {
  v3::RateLimitConfig c;
  c.set_name(domain);
  c.set_domain(domain);
  v3::RateLimitDescriptor* d = c.add_descriptors();
  d->set_key("generic_key");
  d->set_value("route");
  d->mutable_rate_limit()->set_unit(unit);
  d->mutable_rate_limit()->set_requests_per_unit(requests);
  return c;
}

rules::XdsSettings Settings(int port) {
  rules::XdsSettings s;
  s.server_url = "127.0.0.1:" + std::to_string(port);
  s.node_id = "test-node";
  s.node_metadata = {{"cluster", "edge"}, {"zone", "a"}};
  s.connect_retry_interval_us = 50000;
  s.backoff_initial_us = 50000;
  s.backoff_max_us = 200000;
  return s;
}

// The rules of a ConfigManager that takes them over xDS only, and a client feeding it.
struct Rig {
  explicit Rig(rules::XdsSettings settings)
      : manager({}, "", Options()), client(std::move(settings), &manager) {
    EXPECT_TRUE(manager.Reload().errors.empty());
  }
  static rules::LoadOptions Options() {
    rules::LoadOptions o;
    o.remote_rules = true;
    o.settings.emplace();
    return o;
  }
  // The requests-per-window of `domain`'s one limit; 0 when the domain is not loaded.
  uint64_t Requests(const std::string& domain) const {
    const rules::Domain* d = manager.Current()->FindDomain(domain);
    if (d == nullptr || d->root.children.empty() || d->root.children[0]->limits.empty()) return 0;
    return d->root.children[0]->limits[0].limit.requests;
  }
  rules::ConfigManager manager;
  XdsClient client;
};

bool Eventually(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time until = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

TEST(XdsClientTest, AppliesEachVersionAndAcksIt) {
  auto server = TestAdsServer::Start({});
  ASSERT_NE(server, nullptr);
  server->Publish("v1", {Config("first", 10)});
  Rig rig(Settings(server->port()));
  EXPECT_TRUE(rig.manager.awaiting_remote());
  rig.client.Start();
  // Subscribe, then the ACK of v1.
  ASSERT_TRUE(server->WaitForRequests(2, absl::Seconds(10)));
  auto requests = server->requests();
  const auto& subscribe = requests[0];
  EXPECT_EQ(subscribe.type_url(), kRateLimitConfigType);
  EXPECT_EQ(subscribe.version_info(), "");
  EXPECT_EQ(subscribe.node().id(), "test-node");
  EXPECT_EQ(subscribe.node().metadata().fields().at("cluster").string_value(), "edge");
  EXPECT_EQ(subscribe.node().metadata().fields().at("zone").string_value(), "a");
  EXPECT_EQ(requests[1].version_info(), "v1");
  EXPECT_EQ(requests[1].response_nonce(), "1-v1");
  EXPECT_FALSE(requests[1].has_error_detail());
  EXPECT_EQ(rig.Requests("first"), 10u);
  EXPECT_FALSE(rig.manager.awaiting_remote());

  // A new version replaces the whole rule set (state of the world).
  server->Publish("v2", {Config("second", 20)});
  ASSERT_TRUE(server->WaitForRequests(3, absl::Seconds(10)));
  EXPECT_EQ(server->requests()[2].version_info(), "v2");
  EXPECT_EQ(rig.Requests("second"), 20u);
  EXPECT_EQ(rig.manager.Current()->FindDomain("first"), nullptr);
  const XdsClient::Stats stats = rig.client.stats();
  EXPECT_TRUE(stats.connected);
  EXPECT_EQ(stats.version, "v2");
  EXPECT_EQ(stats.applied, 2u);
  EXPECT_EQ(stats.rejected, 0u);
}

TEST(XdsClientTest, NacksABadVersionAndKeepsTheRulesInForce) {
  auto server = TestAdsServer::Start({});
  ASSERT_NE(server, nullptr);
  server->Publish("v1", {Config("first", 10)});
  Rig rig(Settings(server->port()));
  rig.client.Start();
  ASSERT_TRUE(server->WaitForRequests(2, absl::Seconds(10)));
  const std::string version = rig.manager.Current()->version;

  server->Publish("v2", {Config("first", 5, v3::UNKNOWN)});
  ASSERT_TRUE(server->WaitForRequests(3, absl::Seconds(10)));
  const auto nack = server->requests()[2];
  EXPECT_EQ(nack.version_info(), "v1");      // the last version applied
  EXPECT_EQ(nack.response_nonce(), "2-v2");  // the rejected response
  ASSERT_TRUE(nack.has_error_detail());
  EXPECT_EQ(nack.error_detail().code(), 3);  // INVALID_ARGUMENT
  EXPECT_NE(nack.error_detail().message().find("xds:first"), std::string::npos)
      << nack.error_detail().message();
  EXPECT_NE(nack.error_detail().message().find("UNKNOWN"), std::string::npos)
      << nack.error_detail().message();
  EXPECT_EQ(rig.manager.Current()->version, version);
  EXPECT_EQ(rig.Requests("first"), 10u);

  // Another type, or a resource of another type, is refused the same way.
  google::protobuf::Any other;
  other.PackFrom(envoy::service::discovery::v3::DiscoveryRequest());
  server->Publish("v3", {}, {other});
  ASSERT_TRUE(server->WaitForRequests(4, absl::Seconds(10)));
  EXPECT_TRUE(server->requests()[3].has_error_detail());
  EXPECT_EQ(server->requests()[3].version_info(), "v1");

  // And the next good version is applied.
  server->Publish("v4", {Config("first", 40)});
  ASSERT_TRUE(server->WaitForRequests(5, absl::Seconds(10)));
  EXPECT_FALSE(server->requests()[4].has_error_detail());
  EXPECT_EQ(rig.Requests("first"), 40u);
  EXPECT_EQ(rig.client.stats().rejected, 2u);
  EXPECT_EQ(rig.client.stats().applied, 2u);
}

TEST(XdsClientTest, RejoinsARestartedServerFromTheLastVersionAcked) {
  auto server = TestAdsServer::Start({});
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  server->Publish("v1", {Config("first", 10)});
  Rig rig(Settings(port));
  rig.client.Start();
  ASSERT_TRUE(server->WaitForRequests(2, absl::Seconds(10)));
  server.reset();  // gone: the stream ends
  ASSERT_TRUE(Eventually([&] { return !rig.client.stats().connected; }));
  EXPECT_EQ(rig.Requests("first"), 10u);  // the rules stay while it is away

  server = TestAdsServer::Start({.address = "127.0.0.1:" + std::to_string(port)});
  ASSERT_NE(server, nullptr);
  server->Publish("v1", {Config("first", 10)});
  ASSERT_TRUE(server->WaitForRequests(1, absl::Seconds(10)));
  const auto resume = server->requests()[0];
  EXPECT_EQ(resume.version_info(), "v1");
  EXPECT_EQ(resume.response_nonce(), "1-v1");
  EXPECT_EQ(resume.node().id(), "test-node");
  server->Publish("v2", {Config("first", 20)});
  ASSERT_TRUE(server->WaitForRequests(2, absl::Seconds(10)));
  EXPECT_EQ(rig.Requests("first"), 20u);
  EXPECT_EQ(rig.client.stats().streams, 2u);
}

TEST(XdsClientTest, WaitsForAServerThatIsNotThereYet) {
  auto probe = TestAdsServer::Start({});
  ASSERT_NE(probe, nullptr);
  const int port = probe->port();
  probe.reset();
  Rig rig(Settings(port));
  rig.client.Start();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(rig.client.stats().connected);
  EXPECT_TRUE(rig.manager.awaiting_remote());
  auto server = TestAdsServer::Start({.address = "127.0.0.1:" + std::to_string(port)});
  ASSERT_NE(server, nullptr);
  server->Publish("v1", {Config("first", 10)});
  ASSERT_TRUE(server->WaitForRequests(2, absl::Seconds(10)));
  EXPECT_EQ(rig.Requests("first"), 10u);
  EXPECT_FALSE(rig.manager.awaiting_remote());
}

TEST(XdsClientTest, MutualTls) {
  sluice::testing::TlsCerts certs;
  auto server = TestAdsServer::Start({.cert_file = certs.Cert("server"),
                                      .key_file = certs.Key("server"),
                                      .client_ca_file = certs.ca()});
  ASSERT_NE(server, nullptr);
  server->Publish("v1", {Config("first", 10)});

  rules::XdsSettings settings = Settings(server->port());
  settings.tls = true;
  settings.ca_file = certs.ca();
  settings.cert_file = certs.Cert("client");
  settings.key_file = certs.Key("client");
  settings.server_name = "localhost";
  Rig rig(settings);
  rig.client.Start();
  ASSERT_TRUE(server->WaitForRequests(2, absl::Seconds(10)));
  EXPECT_EQ(rig.Requests("first"), 10u);
  rig.client.Stop();

  // Without a client certificate the server refuses it: nothing arrives, nothing is applied.
  settings.cert_file.clear();
  settings.key_file.clear();
  Rig refused(settings);
  refused.client.Start();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(server->requests().size(), 2u);
  EXPECT_TRUE(refused.manager.awaiting_remote());
}

TEST(XdsClientTest, StopsPromptlyWhileConnecting) {
  auto probe = TestAdsServer::Start({});
  ASSERT_NE(probe, nullptr);
  const int port = probe->port();
  probe.reset();
  rules::XdsSettings settings = Settings(port);
  settings.connect_retry_interval_us = 10000000;
  Rig rig(settings);
  rig.client.Start();
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time before = absl::Now();
  rig.client.Stop();
  EXPECT_LT(absl::Now() - before, absl::Seconds(1));
}

TEST(XdsClientBackoffTest, UpstreamsFormula) {
  rules::XdsSettings s;  // upstream's defaults: 10 s, 60 s, factor 0.5, jitter
  for (int attempt = 0; attempt < 5; ++attempt) {
    EXPECT_EQ(BackoffMicros(s, attempt, 0.0), 10000000);
    EXPECT_EQ(BackoffMicros(s, attempt, 0.99), 10000000);  // 0.5^n < 1: always the minimum
  }
  s.backoff_factor = 2;
  s.backoff_jitter = false;
  EXPECT_EQ(BackoffMicros(s, 0, 0.5), 10000000);
  EXPECT_EQ(BackoffMicros(s, 1, 0.5), 20000000);
  EXPECT_EQ(BackoffMicros(s, 2, 0.5), 40000000);
  EXPECT_EQ(BackoffMicros(s, 3, 0.5), 60000000);  // capped
  s.backoff_jitter = true;
  EXPECT_EQ(BackoffMicros(s, 2, 0.0), 10000000);  // jitter draws between the minimum and that
  EXPECT_EQ(BackoffMicros(s, 2, 0.5), 25000000);
  s.backoff_initial_us = 60000000;
  EXPECT_EQ(BackoffMicros(s, 0, 0.5), 60000000);  // min >= max: max
}

}  // namespace
}  // namespace sluice::xds
