// redis.tls in the settings file: its keys, file names relative to the settings file, and the
// rule that TLS is the URLs' scheme (rediss://), with the errors at their places. (Whether the
// files can be used is stack's check, run by serve and check-config: src/cli's tests.)

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

TEST(RedisTlsSettingsTest, TheBlockAndItsFilesBesideTheSettings) {
  TempDir dir;
  const LoadResult result = LoadConfig({dir.Write("etc/sluice.yaml", R"yaml(backend: redis
redis:
  url: rediss://:pw@redis.internal:6380
  tls:
    ca_file: tls/ca.pem
    cert_file: /etc/ssl/sluice.pem
    key_file: tls/sluice.key
    server_name: redis.example
    skip_hostname_verification: true
)yaml")});
  ASSERT_THAT(result.errors, IsEmpty());
  const Settings& s = result.config->settings;
  ASSERT_TRUE(s.redis_tls.has_value());
  EXPECT_EQ(s.redis_tls->ca_file, dir.Path("etc/tls/ca.pem"));
  EXPECT_EQ(s.redis_tls->cert_file, "/etc/ssl/sluice.pem");
  EXPECT_EQ(s.redis_tls->key_file, dir.Path("etc/tls/sluice.key"));
  EXPECT_EQ(s.redis_tls->server_name, "redis.example");
  EXPECT_TRUE(s.redis_tls->skip_hostname_verification);
  EXPECT_EQ(s.redis_tls->ca_file_at.line, 5);
  EXPECT_EQ(s.redis_tls->ca_file_at.column, 14);
  EXPECT_EQ(s.redis_tls->key_file_at.line, 7);
}

TEST(RedisTlsSettingsTest, RedissAloneIsTlsWithTheDefaults) {
  TempDir dir;
  const LoadResult result = LoadConfig(
      {dir.Write("etc/sluice.yaml", "backend: redis\nredis: {url: rediss://redis:6380}\n")});
  ASSERT_THAT(result.errors, IsEmpty());
  EXPECT_FALSE(result.config->settings.redis_tls.has_value());
  const LoadResult empty = LoadConfig({dir.Write(
      "etc/sluice.yaml", "backend: redis\nredis: {url: rediss://redis:6380, tls: {}}\n")});
  ASSERT_THAT(empty.errors, IsEmpty());
  ASSERT_TRUE(empty.config->settings.redis_tls.has_value());
  EXPECT_EQ(empty.config->settings.redis_tls->ca_file, "");
  EXPECT_FALSE(empty.config->settings.redis_tls->skip_hostname_verification);
}

TEST(RedisTlsSettingsTest, TlsIsTheUrlsScheme) {
  TempDir dir;
  EXPECT_THAT(SettingsErrors(dir, "redis:\n  url: redis://h:1\n  tls: {ca_file: ca.pem}\n"),
              ElementsAre("sluice.yaml:2:8: 'redis://h:1' is plain TCP, and redis.tls is set: "
                          "TLS needs rediss://"));
  EXPECT_THAT(
      SettingsErrors(dir, "redis:\n  cluster: true\n  nodes: [rediss://a:1, redis://b:1]\n"),
      ElementsAre("sluice.yaml:3:25: 'redis://b:1': the nodes are all rediss:// (TLS) or all "
                  "redis://"));
  EXPECT_THAT(SettingsErrors(dir, "redis: {url: rediss://h:1, tls: {ca_flie: ca.pem}}\n"),
              ElementsAre("sluice.yaml:1:34: unknown key 'ca_flie' in redis.tls (did you mean "
                          "'ca_file'?)"));
  EXPECT_THAT(SettingsErrors(dir, "redis: {url: rediss://h:1, tls: {cert_file: c.pem}}\n"),
              ElementsAre("sluice.yaml:1:33: redis.tls: cert_file needs key_file (mutual TLS)"));
  EXPECT_THAT(
      SettingsErrors(dir, "redis: {url: rediss://h:1, tls: {skip_hostname_verification: 2}}\n"),
      ::testing::SizeIs(1));
}

}  // namespace
}  // namespace sluice::rules
