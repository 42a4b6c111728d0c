// http.tls, admin.tls and grpc.tls in the settings file: their keys, file names relative to the
// settings file, and the errors at their places. (Whether the files can be used is checked by
// serve and check-config: src/cli's tests.)

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

TEST(ListenerTlsSettingsTest, EachListenerHasItsOwnBlockBesideTheSettings) {
  TempDir dir;
  const LoadResult result = LoadConfig({dir.Write("etc/sluice.yaml", R"yaml(listen: 0.0.0.0:8443
http:
  tls:
    cert_file: tls/data.pem
    key_file: tls/data.key
admin:
  listen: 127.0.0.1:9091
  tls: {cert_file: /etc/ssl/admin.pem, key_file: /etc/ssl/admin.key, client_ca_file: ops-ca.pem}
grpc:
  tls:
    cert_file: tls/grpc.pem
    key_file: tls/grpc.key
    client_ca_file: tls/envoy-ca.pem
)yaml")});
  ASSERT_THAT(result.errors, IsEmpty());
  const Settings& s = result.config->settings;
  ASSERT_TRUE(s.http_tls.has_value());
  EXPECT_EQ(s.http_tls->cert_file, dir.Path("etc/tls/data.pem"));
  EXPECT_EQ(s.http_tls->key_file, dir.Path("etc/tls/data.key"));
  EXPECT_EQ(s.http_tls->client_ca_file, "");
  EXPECT_EQ(s.http_tls->cert_file_at.line, 4);
  EXPECT_EQ(s.http_tls->cert_file_at.column, 16);
  ASSERT_TRUE(s.admin_tls.has_value());
  EXPECT_EQ(s.admin_tls->cert_file, "/etc/ssl/admin.pem");
  EXPECT_EQ(s.admin_tls->client_ca_file, dir.Path("etc/ops-ca.pem"));
  ASSERT_TRUE(s.grpc_tls.has_value());
  EXPECT_EQ(s.grpc_tls->key_file, dir.Path("etc/tls/grpc.key"));
  EXPECT_EQ(s.grpc_tls->client_ca_file, dir.Path("etc/tls/envoy-ca.pem"));
  EXPECT_EQ(s.grpc_tls->client_ca_file_at.line, 13);
}

TEST(ListenerTlsSettingsTest, NoBlockIsPlaintext) {
  TempDir dir;
  const LoadResult result =
      LoadConfig({dir.Write("etc/sluice.yaml", "http: {idle_timeout: 5s}\ngrpc: {threads: 2}\n")});
  ASSERT_THAT(result.errors, IsEmpty());
  EXPECT_FALSE(result.config->settings.http_tls.has_value());
  EXPECT_FALSE(result.config->settings.admin_tls.has_value());
  EXPECT_FALSE(result.config->settings.grpc_tls.has_value());
}

TEST(ListenerTlsSettingsTest, ACertificateNeedsItsKeyAndUnknownKeysAreNamed) {
  TempDir dir;
  EXPECT_THAT(SettingsErrors(dir, "grpc: {tls: {cert_file: c.pem}}\n"),
              ElementsAre("sluice.yaml:1:13: grpc.tls: a listener's TLS needs cert_file and "
                          "key_file (the server's certificate and its key)"));
  EXPECT_THAT(SettingsErrors(dir, "admin:\n  tls: {client_ca_file: ca.pem}\n"),
              ElementsAre("sluice.yaml:2:8: admin.tls: a listener's TLS needs cert_file and "
                          "key_file (the server's certificate and its key)"));
  EXPECT_THAT(SettingsErrors(
                  dir, "http: {tls: {cert_file: c.pem, key_file: k.pem, cliet_ca_file: ca.pem}}\n"),
              ElementsAre("sluice.yaml:1:49: unknown key 'cliet_ca_file' in http.tls (did you mean "
                          "'client_ca_file'?)"));
}

}  // namespace
}  // namespace sluice::rules
