// config_source.xds in the settings file: every key, upstream's defaults, file names next to the
// settings, and the errors at their places.

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/loader.h"
#include "rules/loader_testing.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

using test::SettingsErrors;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::TempDir;

TEST(XdsSettingsTest, TheBlock) {
  TempDir dir;
  const LoadResult result = LoadConfig({dir.Write("etc/sluice.yaml", R"yaml(config_source:
  xds:
    server_url: envoy-gateway:18001
    node_id: envoy-ratelimit
    node_metadata: {cluster: edge, zone: a}
    headers: {x-token: abc}
    tls: {ca_file: certs/ca.crt, cert_file: certs/tls.crt, key_file: certs/tls.key,
          server_name: envoy-gateway}
    connect_retry_interval: 500ms
    backoff: {initial_interval: 1s, max_interval: 30s, factor: 2, jitter: false}
    max_message_bytes: 16777216
    force_start: true
)yaml")});
  ASSERT_THAT(result.errors, IsEmpty());
  ASSERT_TRUE(result.config->settings.xds.has_value());
  const XdsSettings& x = *result.config->settings.xds;
  EXPECT_EQ(x.server_url, "envoy-gateway:18001");
  EXPECT_EQ(x.node_id, "envoy-ratelimit");
  EXPECT_EQ(x.node_metadata,
            (std::map<std::string, std::string>{{"cluster", "edge"}, {"zone", "a"}}));
  EXPECT_EQ(x.headers, (std::map<std::string, std::string>{{"x-token", "abc"}}));
  EXPECT_TRUE(x.tls);
  EXPECT_EQ(x.ca_file, dir.Path("etc/certs/ca.crt"));
  EXPECT_EQ(x.cert_file, dir.Path("etc/certs/tls.crt"));
  EXPECT_EQ(x.key_file, dir.Path("etc/certs/tls.key"));
  EXPECT_EQ(x.server_name, "envoy-gateway");
  EXPECT_EQ(x.connect_retry_interval_us, 500000);
  EXPECT_EQ(x.backoff_initial_us, 1000000);
  EXPECT_EQ(x.backoff_max_us, 30000000);
  EXPECT_EQ(x.backoff_factor, 2);
  EXPECT_FALSE(x.backoff_jitter);
  EXPECT_EQ(x.max_message_bytes, 16777216u);
  EXPECT_TRUE(x.force_start);
}

TEST(XdsSettingsTest, UpstreamsDefaultsAndTlsAsASwitch) {
  TempDir dir;
  const LoadResult result = LoadConfig({dir.Write("etc/sluice.yaml", R"yaml(config_source:
  xds: {server_url: "127.0.0.1:18000", tls: true}
)yaml")});
  ASSERT_THAT(result.errors, IsEmpty());
  const XdsSettings& x = *result.config->settings.xds;
  EXPECT_EQ(x.node_id, "default");
  EXPECT_TRUE(x.tls);
  EXPECT_EQ(x.ca_file, "");  // the system's CAs
  EXPECT_EQ(x.connect_retry_interval_us, 3000000);
  EXPECT_EQ(x.backoff_initial_us, 10000000);
  EXPECT_EQ(x.backoff_max_us, 60000000);
  EXPECT_EQ(x.backoff_factor, 0.5);
  EXPECT_TRUE(x.backoff_jitter);
  EXPECT_FALSE(x.force_start);
}

TEST(XdsSettingsTest, Errors) {
  TempDir dir;
  EXPECT_THAT(SettingsErrors(dir, "config_source:\n  xds: {node_id: n}\n"),
              ElementsAre("sluice.yaml:2:8: config_source.xds needs server_url: the management "
                          "server's host:port"));
  EXPECT_THAT(SettingsErrors(dir,
                             "config_source:\n  xds:\n    server_url: a:1\n    tls: "
                             "{cert_file: c.pem}\n"),
              ElementsAre("sluice.yaml:4:10: config_source.xds.tls: cert_file needs key_file "
                          "(mutual TLS)"));
  EXPECT_THAT(SettingsErrors(dir, "config_source:\n  xds: {server_url: a:1, nod_id: n}\n"),
              ::testing::Contains(::testing::HasSubstr("nod_id")));
  EXPECT_THAT(SettingsErrors(dir, "config_source:\n  file: {}\n"),
              ::testing::Contains(::testing::HasSubstr("file")));
  EXPECT_THAT(SettingsErrors(dir,
                             "config_source:\n  xds:\n    server_url: a:1\n    backoff: "
                             "{factor: lots}\n"),
              ElementsAre(::testing::HasSubstr("factor must be a number")));
}

}  // namespace
}  // namespace sluice::rules
