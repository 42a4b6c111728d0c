// redis.sentinel in the settings file: its keys, the master's login in redis.url (whose host is
// the master's name), TLS for the sentinels, and the errors at their places.

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

TEST(RedisSentinelSettingsTest, TheBlock) {
  TempDir dir;
  const LoadResult result = LoadConfig({dir.Write("etc/sluice.yaml", R"yaml(backend: redis
redis:
  url: rediss://app:masterpw@mymaster/2
  sentinel:
    master: mymaster
    addresses: [10.0.0.1:26379, "sentinel-2", "[::1]:26380"]
    username: watcher
    password: sentinelpw
)yaml")});
  ASSERT_THAT(result.errors, IsEmpty());
  const Settings& s = result.config->settings;
  ASSERT_TRUE(s.redis_sentinel.has_value());
  EXPECT_EQ(s.redis_sentinel->master, "mymaster");
  EXPECT_THAT(s.redis_sentinel->addresses,
              ElementsAre("10.0.0.1:26379", "sentinel-2", "[::1]:26380"));
  EXPECT_EQ(s.redis_sentinel->username, "watcher");
  EXPECT_EQ(s.redis_sentinel->password, "sentinelpw");
  EXPECT_FALSE(s.redis_sentinel->tls.has_value());  // as the master
  EXPECT_EQ(s.redis_url, "rediss://app:masterpw@mymaster/2");
  EXPECT_FALSE(s.redis_cluster);
}

TEST(RedisSentinelSettingsTest, NoUrlIsNoLogin) {
  TempDir dir;
  const LoadResult result = LoadConfig({dir.Write(
      "etc/sluice.yaml",
      "backend: redis\nredis:\n  sentinel: {master: m, addresses: ['h:1'], tls: true}\n  tls: "
      "{}\n")});
  ASSERT_THAT(result.errors, IsEmpty());
  EXPECT_EQ(result.config->settings.redis_url, "");
  EXPECT_EQ(result.config->settings.redis_sentinel->tls, true);
  EXPECT_TRUE(result.config->settings.redis_tls.has_value());
}

TEST(RedisSentinelSettingsTest, Errors) {
  TempDir dir;
  EXPECT_THAT(SettingsErrors(dir, "redis:\n  sentinel: {addresses: ['h:1']}\n"),
              ElementsAre("sluice.yaml:2:13: redis.sentinel needs master: the name the sentinels "
                          "monitor the master by"));
  EXPECT_THAT(SettingsErrors(dir, "redis:\n  sentinel: {master: m}\n"),
              ElementsAre("sluice.yaml:2:13: redis.sentinel needs addresses: the sentinels' "
                          "host:port"));
  EXPECT_THAT(
      SettingsErrors(dir, "redis:\n  sentinel: {master: m, addresses: ['h:1', 'h:0', 'a:b:1']}\n"),
      ElementsAre("sluice.yaml:2:44: bad sentinel address 'h:0' (host:port)",
                  "sluice.yaml:2:51: bad sentinel address 'a:b:1' (host:port)"));
  EXPECT_THAT(
      SettingsErrors(dir, "redis:\n  sentinel: {master: m, addresses: ['h:1'], pasword: x}\n"),
      ElementsAre("sluice.yaml:2:45: unknown key 'pasword' in redis.sentinel (did you "
                  "mean 'password'?)"));
  EXPECT_THAT(
      SettingsErrors(dir, "redis:\n  sentinel: {master: m, addresses: ['h:1'], username: u}\n"),
      ElementsAre("sluice.yaml:2:55: redis.sentinel: username needs password"));
  EXPECT_THAT(SettingsErrors(dir,
                             "redis:\n  url: redis://:pw@other\n  sentinel: {master: m, "
                             "addresses: ['h:1']}\n"),
              ElementsAre("sluice.yaml:2:8: with redis.sentinel, url is the master's login "
                          "(redis[s]://[user:pass@]m[/db]): its host must be the master's name, "
                          "not 'other'"));
  EXPECT_THAT(SettingsErrors(dir,
                             "redis:\n  cluster: true\n  nodes: ['redis://a:1']\n  sentinel: "
                             "{master: m, addresses: ['h:1']}\n"),
              ElementsAre("sluice.yaml:4:13: redis.sentinel names one master: not with cluster "
                          "or nodes (Sentinel and Cluster are two ways to run Redis)"));
  // redis.tls needs TLS somewhere: a rediss:// master or sentinels with tls: true.
  EXPECT_THAT(
      SettingsErrors(dir, "redis:\n  sentinel: {master: m, addresses: ['h:1']}\n  tls: {}\n"),
      ElementsAre("sluice.yaml:3:8: redis.tls is set, and neither the master (no "
                  "rediss:// url) nor the sentinels (sentinel.tls) use TLS"));
  EXPECT_THAT(
      SettingsErrors(dir,
                     "redis:\n  url: redis://m\n  sentinel: {master: m, addresses: ['h:1'], "
                     "tls: true}\n  tls: {}\n"),
      IsEmpty());
}

}  // namespace
}  // namespace sluice::rules
