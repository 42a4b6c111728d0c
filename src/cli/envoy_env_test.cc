// envoyproxy/ratelimit's environment variables as sluice settings (envoy_env.h): what each maps
// to, which are refused, and that every variable upstream reads is named in the docs table.
// The running server is tested in tests/envoy_env_e2e.sh.

#include "cli/envoy_env.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Env = std::map<std::string, std::string>;
using Level = EnvoyEnvMessage::Level;

// A deployment as upstream's docker-compose example has it, with Redis on TCP.
Env Deployment() {
  return {{"RUNTIME_ROOT", "/data/current"}, {"RUNTIME_SUBDIRECTORY", "ratelimit"},
          {"REDIS_SOCKET_TYPE", "tcp"},      {"REDIS_URL", "redis:6379"},
          {"USE_STATSD", "false"},           {"LOG_LEVEL", "debug"}};
}

Env With(Env env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}

// The messages about `variable` at `level`, as text.
std::vector<std::string> Said(const EnvoyEnv& result, const std::string& variable, Level level) {
  std::vector<std::string> out;
  for (const EnvoyEnvMessage& m : result.messages) {
    if (m.variable == variable && m.level == level) out.push_back(m.text);
  }
  return out;
}

std::string All(const EnvoyEnv& result) {
  std::string s;
  for (const EnvoyEnvMessage& m : result.messages) s += m.ToString() + "\n";
  return s;
}

TEST(EnvoyEnvTest, ADeploymentMapsToSettings) {
  Env env = Deployment();
  env["PORT"] = "18080";
  env["GRPC_HOST"] = "127.0.0.1";
  env["GRPC_PORT"] = "18081";
  env["DEBUG_HOST"] = "127.0.0.1";
  env["DEBUG_PORT"] = "16070";
  env["CACHE_KEY_PREFIX"] = "rl_";
  env["REDIS_TIMEOUT"] = "1m30s";
  env["MERGE_DOMAIN_CONFIG"] = "true";
  env["SHADOW_MODE"] = "1";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.rules_path, "/data/current/ratelimit/config");
  EXPECT_TRUE(result.load.any_extension);
  EXPECT_TRUE(result.load.dotfiles);  // upstream's RUNTIME_IGNOREDOTFILES=false
  EXPECT_EQ(result.log_level, "debug");
  ASSERT_TRUE(result.load.settings.has_value());
  const rules::Settings& s = *result.load.settings;
  EXPECT_EQ(s.listen, "0.0.0.0:18080");
  EXPECT_EQ(s.grpc_listen, "127.0.0.1:18081");
  EXPECT_EQ(s.admin_listen, "127.0.0.1:16070");
  EXPECT_EQ(s.backend, "redis");
  EXPECT_EQ(s.redis_url, "redis://redis:6379");
  EXPECT_FALSE(s.redis_cluster);
  EXPECT_EQ(s.redis_key_prefix, "rl_");
  EXPECT_EQ(s.redis_timeout_us, 90 * 1000000);
  EXPECT_TRUE(s.merge_domains);
  EXPECT_TRUE(s.shadow_mode);
  EXPECT_TRUE(s.count_denied);  // upstream counts every request, denied or not
  EXPECT_THAT(Said(result, "DEBUG_HOST", Level::kWarning), IsEmpty());
}

TEST(EnvoyEnvTest, UpstreamDefaultsNeedATcpRedisAndASubdirectory) {
  const EnvoyEnv result = ReadEnvoyEnv({});
  EXPECT_FALSE(result.ok());
  EXPECT_THAT(Said(result, "REDIS_SOCKET_TYPE", Level::kError),
              ElementsAre(HasSubstr("'unix' (the default) is not supported")));
  EXPECT_THAT(Said(result, "RUNTIME_SUBDIRECTORY", Level::kError),
              ElementsAre(HasSubstr("not set")));
  EXPECT_EQ(result.rules_path, "/srv/runtime_data/current/config");
  const rules::Settings& s = *result.load.settings;
  EXPECT_EQ(s.listen, "0.0.0.0:8080");
  EXPECT_EQ(s.grpc_listen, "0.0.0.0:8081");
  EXPECT_EQ(result.log_level, "warn");
  EXPECT_FALSE(s.merge_domains);
  EXPECT_FALSE(s.shadow_mode);
  EXPECT_EQ(s.redis_key_prefix, rules::Settings().redis_key_prefix);
  EXPECT_EQ(s.redis_timeout_us, rules::Settings().redis_timeout_us);
}

TEST(EnvoyEnvTest, TheAdminApiStaysOnLoopbackWithoutAToken) {
  const EnvoyEnv result = ReadEnvoyEnv(Deployment());  // DEBUG_HOST 0.0.0.0 by default
  EXPECT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.load.settings->admin_listen, "127.0.0.1:6070");
  EXPECT_THAT(Said(result, "DEBUG_HOST", Level::kWarning),
              ElementsAre(HasSubstr("0.0.0.0 (the default): sluice's admin API")));
}

TEST(EnvoyEnvTest, RedisAuthAndClusterBecomeRedisUrls) {
  EnvoyEnv result = ReadEnvoyEnv(With(Deployment(), "REDIS_AUTH", "secret"));
  EXPECT_EQ(result.load.settings->redis_url, "redis://secret@redis:6379");
  result = ReadEnvoyEnv(With(Deployment(), "REDIS_AUTH", "app:p@ss:word"));
  EXPECT_EQ(result.load.settings->redis_url, "redis://app:p@ss:word@redis:6379");
  Env cluster = With(Deployment(), "REDIS_TYPE", "CLUSTER");
  cluster["REDIS_URL"] = "10.0.0.1:7000,10.0.0.2:7000";
  cluster["REDIS_AUTH"] = "pw";
  result = ReadEnvoyEnv(cluster);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_TRUE(result.load.settings->redis_cluster);
  EXPECT_THAT(result.load.settings->redis_nodes,
              ElementsAre("redis://pw@10.0.0.1:7000", "redis://pw@10.0.0.2:7000"));
}

// REDIS_TYPE=sentinel: REDIS_URL is "MASTER_NAME,host:port,...", the master's name first.
TEST(EnvoyEnvTest, SentinelUrlNamesTheMasterAndTheSentinels) {
  Env env = With(Deployment(), "REDIS_TYPE", "SENTINEL");  // any case, as upstream
  env["REDIS_URL"] = "mymaster,10.0.0.1:26379,sentinel-2:26380";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  const rules::Settings& s = *result.load.settings;
  ASSERT_TRUE(s.redis_sentinel.has_value());
  EXPECT_EQ(s.redis_sentinel->master, "mymaster");
  EXPECT_THAT(s.redis_sentinel->addresses, ElementsAre("10.0.0.1:26379", "sentinel-2:26380"));
  EXPECT_EQ(s.redis_sentinel->username, "");
  EXPECT_EQ(s.redis_sentinel->password, "");
  EXPECT_EQ(s.redis_sentinel->tls, false);
  EXPECT_FALSE(s.redis_cluster);
  EXPECT_EQ(s.redis_url, "redis://mymaster");  // the master's login: none
}

TEST(EnvoyEnvTest, SentinelUrlNeedsAMasterAndASentinel) {
  Env env = With(Deployment(), "REDIS_TYPE", "sentinel");
  env["REDIS_URL"] = "10.0.0.1:26379";
  EXPECT_THAT(Said(ReadEnvoyEnv(env), "REDIS_URL", Level::kError),
              ElementsAre(HasSubstr("MASTER_NAME,host:port")));
  env["REDIS_URL"] = "mymaster,10.0.0.1";
  EXPECT_THAT(Said(ReadEnvoyEnv(env), "REDIS_URL", Level::kError),
              ElementsAre("'10.0.0.1' is not host:port"));
}

// REDIS_SENTINEL_AUTH: the sentinels' login, "pass" or "user:pass"; not the master's.
TEST(EnvoyEnvTest, SentinelAuthIsTheSentinelsLogin) {
  Env env = With(Deployment(), "REDIS_TYPE", "sentinel");
  env["REDIS_URL"] = "mymaster,10.0.0.1:26379";
  env["REDIS_SENTINEL_AUTH"] = "s3cret";
  EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.load.settings->redis_sentinel->username, "");
  EXPECT_EQ(result.load.settings->redis_sentinel->password, "s3cret");
  EXPECT_EQ(result.load.settings->redis_url, "redis://mymaster");
  env["REDIS_SENTINEL_AUTH"] = "watcher:pa:ss";  // cut at the first colon
  result = ReadEnvoyEnv(env);
  EXPECT_EQ(result.load.settings->redis_sentinel->username, "watcher");
  EXPECT_EQ(result.load.settings->redis_sentinel->password, "pa:ss");
  EXPECT_TRUE(Said(result, "REDIS_SENTINEL_AUTH", Level::kInfo).empty()) << All(result);
  // Without REDIS_TYPE=sentinel it does nothing, and says so.
  result = ReadEnvoyEnv(With(Deployment(), "REDIS_SENTINEL_AUTH", "s3cret"));
  EXPECT_TRUE(result.ok()) << All(result);
  EXPECT_FALSE(result.load.settings->redis_sentinel.has_value());
  EXPECT_THAT(Said(result, "REDIS_SENTINEL_AUTH", Level::kInfo),
              ElementsAre(HasSubstr("only with REDIS_TYPE=sentinel")));
}

// REDIS_AUTH with Sentinel: the master's login, in both of its forms.
TEST(EnvoyEnvTest, SentinelRedisAuthIsTheMastersLogin) {
  Env env = With(Deployment(), "REDIS_TYPE", "sentinel");
  env["REDIS_URL"] = "mymaster,10.0.0.1:26379";
  env["REDIS_AUTH"] = "masterpw";
  EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.load.settings->redis_url, "redis://masterpw@mymaster");
  EXPECT_EQ(result.load.settings->redis_sentinel->password, "");
  env["REDIS_AUTH"] = "app:masterpw";
  result = ReadEnvoyEnv(env);
  EXPECT_EQ(result.load.settings->redis_url, "redis://app:masterpw@mymaster");
}

// REDIS_TLS with Sentinel: upstream dials the master and the sentinels over TLS alike.
TEST(EnvoyEnvTest, SentinelWithRedisTlsUsesTlsEverywhere) {
  Env env = With(Deployment(), "REDIS_TYPE", "sentinel");
  env["REDIS_URL"] = "mymaster,10.0.0.1:26379";
  env["REDIS_TLS"] = "true";
  env["REDIS_TLS_CACERT"] = "/etc/redis-tls/ca.pem";
  env["REDIS_AUTH"] = "pw";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  const rules::Settings& s = *result.load.settings;
  EXPECT_EQ(s.redis_url, "rediss://pw@mymaster");
  EXPECT_EQ(s.redis_sentinel->tls, true);
  ASSERT_TRUE(s.redis_tls.has_value());
  EXPECT_EQ(s.redis_tls->ca_file, "/etc/redis-tls/ca.pem");
}

TEST(EnvoyEnvTest, BadRedisAddressesAreErrors) {
  EXPECT_THAT(
      Said(ReadEnvoyEnv(With(Deployment(), "REDIS_URL", "redis")), "REDIS_URL", Level::kError),
      ElementsAre("'redis' is not host:port"));
  EXPECT_THAT(
      Said(ReadEnvoyEnv(With(Deployment(), "REDIS_URL", "a:1,b:2")), "REDIS_URL", Level::kError),
      ElementsAre("several addresses need REDIS_TYPE=cluster"));
}

// Each of these would change decisions (or break the deployment) if ignored: serve refuses.
TEST(EnvoyEnvTest, DecisionChangingVariablesAreErrors) {
  const std::map<std::string, std::string> refused = {
      {"BACKEND_TYPE", "memcache"},
      {"REDIS_PERSECOND", "true"},
      {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"},
      {"REDIS_TYPE", "twemproxy"},
      {"REDIS_SOCKET_TYPE", "unix"},
      {"REDIS_TLS", "yes"},                               // not a Go boolean
      {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "maybe"},  // (read with REDIS_TLS=true below)
      {"QUOTA_MODE", "yes"},                              // not a Go boolean
      {"NEAR_LIMIT_RATIO", "1.5"},
      {"LIMIT_RESPONSE_HEADERS_ENABLED", "on"},  // not a Go boolean
      {"CONFIG_TYPE", "GRPC_XDS_DELTA"},
      {"GRPC_UDS", "/run/rl.sock"},
      {"GRPC_SERVER_USE_TLS", "yes"},  // not a Go boolean
      {"SHADOW_MODE", "yes"},          // not a Go boolean
      {"PORT", "http"},
      {"REDIS_TIMEOUT", "10"},  // Go durations need a unit
      {"LOG_LEVEL", "verbose"},
  };
  for (const auto& [name, value] : refused) {
    Env env = With(Deployment(), name, value);
    if (name.starts_with("REDIS_TLS_")) env["REDIS_TLS"] = "true";
    const EnvoyEnv result = ReadEnvoyEnv(env);
    EXPECT_FALSE(result.ok()) << name << "=" << value;
    EXPECT_THAT(Said(result, name, Level::kError), ::testing::SizeIs(1)) << name << "\n"
                                                                         << All(result);
  }
}

// CONFIG_TYPE=GRPC_XDS_SOTW: the rules over xDS (config_source.xds), each variable as upstream
// reads it, with upstream's defaults; the runtime directory is not read.
TEST(EnvoyEnvTest, XdsSotwMapsEveryXdsVariable) {
  Env env = Deployment();
  env["CONFIG_TYPE"] = "GRPC_XDS_SOTW";
  EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  ASSERT_TRUE(result.load.settings->xds.has_value());
  EXPECT_TRUE(result.load.remote_rules);
  EXPECT_EQ(result.rules_path, "");
  const rules::XdsSettings defaults = *result.load.settings->xds;
  EXPECT_EQ(defaults.server_url, "localhost:18000");
  EXPECT_EQ(defaults.node_id, "default");
  EXPECT_FALSE(defaults.tls);
  EXPECT_FALSE(defaults.force_start);
  EXPECT_EQ(defaults.connect_retry_interval_us, 3000000);
  EXPECT_EQ(defaults.backoff_initial_us, 10000000);
  EXPECT_EQ(defaults.backoff_max_us, 60000000);
  EXPECT_EQ(defaults.backoff_factor, 0.5);
  EXPECT_TRUE(defaults.backoff_jitter);
  EXPECT_THAT(Said(result, "RUNTIME_SUBDIRECTORY", Level::kInfo), ::testing::SizeIs(1))
      << All(result);

  env["CONFIG_GRPC_XDS_SERVER_URL"] = "envoy-gateway:18001";
  env["CONFIG_GRPC_XDS_NODE_ID"] = "envoy-ratelimit";
  env["CONFIG_GRPC_XDS_NODE_METADATA"] = "cluster=edge,zone=a=b,skipped";
  env["CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"] = "x-token:abc,x-team:rl";
  env["CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"] = "500ms";
  env["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"] = "1s";
  env["XDS_CLIENT_BACKOFF_MAX_INTERVAL"] = "1m30s";
  env["XDS_CLIENT_BACKOFF_RANDOM_FACTOR"] = "2";
  env["XDS_CLIENT_BACKOFF_JITTER"] = "false";
  env["XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"] = "16777216";
  env["CONFIG_GRPC_XDS_SERVER_USE_TLS"] = "true";
  env["CONFIG_GRPC_XDS_SERVER_TLS_CACERT"] = "/certs/ca.crt";
  env["CONFIG_GRPC_XDS_CLIENT_TLS_CERT"] = "/certs/tls.crt";
  env["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"] = "/certs/tls.key";
  env["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = "envoy-gateway";
  env["FORCE_START_WITHOUT_INITIAL_CONFIG"] = "true";
  result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  const rules::XdsSettings& x = *result.load.settings->xds;
  EXPECT_EQ(x.server_url, "envoy-gateway:18001");
  EXPECT_EQ(x.node_id, "envoy-ratelimit");
  EXPECT_EQ(x.node_metadata,
            (std::map<std::string, std::string>{{"cluster", "edge"}, {"zone", "a=b"}}));
  EXPECT_EQ(x.headers, (std::map<std::string, std::string>{{"x-team", "rl"}, {"x-token", "abc"}}));
  EXPECT_EQ(x.connect_retry_interval_us, 500000);
  EXPECT_EQ(x.backoff_initial_us, 1000000);
  EXPECT_EQ(x.backoff_max_us, 90000000);
  EXPECT_EQ(x.backoff_factor, 2);
  EXPECT_FALSE(x.backoff_jitter);
  EXPECT_EQ(x.max_message_bytes, 16777216u);
  EXPECT_TRUE(x.tls);
  EXPECT_EQ(x.ca_file, "/certs/ca.crt");
  EXPECT_EQ(x.cert_file, "/certs/tls.crt");
  EXPECT_EQ(x.key_file, "/certs/tls.key");
  EXPECT_EQ(x.server_name, "envoy-gateway");
  EXPECT_TRUE(x.force_start);

  env["CONFIG_GRPC_XDS_CLIENT_TLS_KEY"] = "";         // a certificate without its key
  env["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"] = "10";  // no unit
  result = ReadEnvoyEnv(env);
  EXPECT_FALSE(result.ok());
  EXPECT_THAT(Said(result, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Level::kError), ::testing::SizeIs(1));
  EXPECT_THAT(Said(result, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Level::kError),
              ::testing::SizeIs(1));
}

// The xDS variables without CONFIG_TYPE=GRPC_XDS_SOTW do nothing, and say so.
TEST(EnvoyEnvTest, XdsVariablesWithFileConfigAreInfo) {
  Env env = Deployment();
  env["CONFIG_GRPC_XDS_SERVER_URL"] = "envoy-gateway:18001";
  env["FORCE_START_WITHOUT_INITIAL_CONFIG"] = "true";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_FALSE(result.load.settings->xds.has_value());
  EXPECT_THAT(Said(result, "CONFIG_GRPC_XDS_SERVER_URL", Level::kInfo), ::testing::SizeIs(1));
  EXPECT_THAT(Said(result, "FORCE_START_WITHOUT_INITIAL_CONFIG", Level::kInfo),
              ::testing::SizeIs(1));
}

// GRPC_SERVER_USE_TLS=true: TLS on the gRPC port with the server's certificate and key, the
// files as given; no client certificate asked for without GRPC_CLIENT_TLS_CACERT (upstream's
// tls.NoClientCert).
TEST(EnvoyEnvTest, GrpcServerUseTlsServesTheCertificateAndKey) {
  Env env = Deployment();
  env["GRPC_SERVER_USE_TLS"] = "true";
  env["GRPC_SERVER_TLS_CERT"] = "/tls/server.pem";
  env["GRPC_SERVER_TLS_KEY"] = "/tls/server.key";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  const rules::Settings& s = *result.load.settings;
  ASSERT_TRUE(s.grpc_tls.has_value());
  EXPECT_EQ(s.grpc_tls->cert_file, "/tls/server.pem");
  EXPECT_EQ(s.grpc_tls->key_file, "/tls/server.key");
  EXPECT_EQ(s.grpc_tls->client_ca_file, "");
  EXPECT_FALSE(s.http_tls.has_value());
  EXPECT_FALSE(s.admin_tls.has_value());
}

// GRPC_CLIENT_TLS_CACERT: mutual TLS, a client certificate signed by its CAs required
// (upstream's tls.RequireAndVerifyClientCert).
TEST(EnvoyEnvTest, GrpcClientTlsCacertRequiresClientCertificates) {
  Env env = Deployment();
  env["GRPC_SERVER_USE_TLS"] = "true";
  env["GRPC_SERVER_TLS_CERT"] = "server.pem";
  env["GRPC_SERVER_TLS_KEY"] = "server.key";
  env["GRPC_CLIENT_TLS_CACERT"] = "clients-ca.pem";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  const rules::Settings& s = *result.load.settings;
  ASSERT_TRUE(s.grpc_tls.has_value());
  EXPECT_EQ(s.grpc_tls->cert_file, "server.pem");
  EXPECT_EQ(s.grpc_tls->key_file, "server.key");
  EXPECT_EQ(s.grpc_tls->client_ca_file, "clients-ca.pem");
}

// Upstream would listen with TLS and no certificate: every handshake would fail.
TEST(EnvoyEnvTest, GrpcServerUseTlsNeedsTheCertificateAndTheKey) {
  const EnvoyEnv no_key = ReadEnvoyEnv(With(With(Deployment(), "GRPC_SERVER_USE_TLS", "true"),
                                            "GRPC_SERVER_TLS_CERT", "server.pem"));
  EXPECT_FALSE(no_key.ok());
  EXPECT_THAT(Said(no_key, "GRPC_SERVER_TLS_KEY", Level::kError), ::testing::SizeIs(1))
      << All(no_key);
  const EnvoyEnv no_cert = ReadEnvoyEnv(
      With(With(Deployment(), "GRPC_SERVER_USE_TLS", "true"), "GRPC_SERVER_TLS_KEY", "server.key"));
  EXPECT_FALSE(no_cert.ok());
  EXPECT_THAT(Said(no_cert, "GRPC_SERVER_TLS_CERT", Level::kError), ::testing::SizeIs(1))
      << All(no_cert);
}

// Without GRPC_SERVER_USE_TLS the files are not read, as upstream: plaintext, and each says so.
TEST(EnvoyEnvTest, GrpcTlsFilesWithoutUseTlsHaveNoEffect) {
  Env env = Deployment();
  env["GRPC_SERVER_TLS_CERT"] = "server.pem";
  env["GRPC_SERVER_TLS_KEY"] = "server.key";
  env["GRPC_CLIENT_TLS_CACERT"] = "clients-ca.pem";
  env["GRPC_CLIENT_TLS_SAN"] = "envoy.example";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_FALSE(result.load.settings->grpc_tls.has_value());
  for (const char* name : {"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT",
                           "GRPC_CLIENT_TLS_SAN"}) {
    EXPECT_THAT(Said(result, name, Level::kInfo),
                ElementsAre("no effect: only with GRPC_SERVER_USE_TLS=true"))
        << name << "\n"
        << All(result);
  }
}

// Upstream checks that the client's certificate names GRPC_CLIENT_TLS_SAN; sluice does not, so
// it would let in clients upstream refuses: an error. Without a client CA it does nothing.
TEST(EnvoyEnvTest, GrpcClientTlsSanIsAnErrorWithAClientCa) {
  Env env = Deployment();
  env["GRPC_SERVER_USE_TLS"] = "true";
  env["GRPC_SERVER_TLS_CERT"] = "server.pem";
  env["GRPC_SERVER_TLS_KEY"] = "server.key";
  env["GRPC_CLIENT_TLS_SAN"] = "envoy.example";
  const EnvoyEnv without_ca = ReadEnvoyEnv(env);
  EXPECT_TRUE(without_ca.ok()) << All(without_ca);
  EXPECT_THAT(Said(without_ca, "GRPC_CLIENT_TLS_SAN", Level::kInfo),
              ElementsAre("no effect: only with GRPC_CLIENT_TLS_CACERT"));
  env["GRPC_CLIENT_TLS_CACERT"] = "clients-ca.pem";
  const EnvoyEnv with_ca = ReadEnvoyEnv(env);
  EXPECT_FALSE(with_ca.ok());
  EXPECT_THAT(Said(with_ca, "GRPC_CLIENT_TLS_SAN", Level::kError), ::testing::SizeIs(1))
      << All(with_ca);
}

// REDIS_TLS=true: rediss:// URLs, the system's CAs and each host's name checked, as upstream
// (a tls.Config with no RootCAs).
TEST(EnvoyEnvTest, RedisTlsMakesTheUrlsRediss) {
  const EnvoyEnv result = ReadEnvoyEnv(With(Deployment(), "REDIS_TLS", "true"));
  ASSERT_TRUE(result.ok()) << All(result);
  const rules::Settings& s = *result.load.settings;
  EXPECT_EQ(s.redis_url, "rediss://redis:6379");
  ASSERT_TRUE(s.redis_tls.has_value());
  EXPECT_EQ(s.redis_tls->ca_file, "");
  EXPECT_EQ(s.redis_tls->cert_file, "");
  EXPECT_FALSE(s.redis_tls->skip_hostname_verification);
  // A cluster's seeds too, with REDIS_AUTH.
  Env cluster = With(Deployment(), "REDIS_TLS", "1");
  cluster["REDIS_TYPE"] = "cluster";
  cluster["REDIS_URL"] = "10.0.0.1:7000,10.0.0.2:7000";
  cluster["REDIS_AUTH"] = "pw";
  EXPECT_THAT(ReadEnvoyEnv(cluster).load.settings->redis_nodes,
              ElementsAre("rediss://pw@10.0.0.1:7000", "rediss://pw@10.0.0.2:7000"));
  // Off (the default): plain redis://, no TLS settings.
  EXPECT_FALSE(ReadEnvoyEnv(Deployment()).load.settings->redis_tls.has_value());
  EXPECT_EQ(ReadEnvoyEnv(With(Deployment(), "REDIS_TLS", "false")).load.settings->redis_url,
            "redis://redis:6379");
}

// REDIS_TLS_CACERT: the CAs trusted (sluice: those alone; said as info, upstream adds them to
// the system's).
TEST(EnvoyEnvTest, RedisTlsCacertIsTheCaFile) {
  Env env = With(Deployment(), "REDIS_TLS", "true");
  env["REDIS_TLS_CACERT"] = "/etc/redis-tls/ca.pem";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.load.settings->redis_tls->ca_file, "/etc/redis-tls/ca.pem");
  EXPECT_THAT(Said(result, "REDIS_TLS_CACERT", Level::kInfo),
              ElementsAre(HasSubstr("trusts the CAs of /etc/redis-tls/ca.pem alone")));
}

// REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY: mutual TLS, both or neither (upstream quietly
// sends no certificate with one alone; sluice refuses to start).
TEST(EnvoyEnvTest, RedisTlsClientCertAndKeyAreMutualTls) {
  Env env = With(Deployment(), "REDIS_TLS", "true");
  env["REDIS_TLS_CLIENT_CERT"] = "client.pem";
  env["REDIS_TLS_CLIENT_KEY"] = "client.key";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.load.settings->redis_tls->cert_file, "client.pem");  // as given (upstream too)
  EXPECT_EQ(result.load.settings->redis_tls->key_file, "client.key");
  const EnvoyEnv no_key = ReadEnvoyEnv(With(env, "REDIS_TLS_CLIENT_KEY", ""));
  EXPECT_FALSE(no_key.ok());
  EXPECT_THAT(Said(no_key, "REDIS_TLS_CLIENT_CERT", Level::kError),
              ElementsAre(HasSubstr("needs REDIS_TLS_CLIENT_KEY")));
  const EnvoyEnv no_cert = ReadEnvoyEnv(With(env, "REDIS_TLS_CLIENT_CERT", ""));
  EXPECT_FALSE(no_cert.ok());
  EXPECT_THAT(Said(no_cert, "REDIS_TLS_CLIENT_KEY", Level::kError),
              ElementsAre(HasSubstr("needs REDIS_TLS_CLIENT_CERT")));
}

// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: the chain is still verified, the name is not.
TEST(EnvoyEnvTest, RedisTlsSkipHostnameVerification) {
  Env env = With(Deployment(), "REDIS_TLS", "true");
  env["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"] = "true";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_TRUE(result.load.settings->redis_tls->skip_hostname_verification);
}

// Without REDIS_TLS=true the TLS variables do nothing, upstream as here: info.
TEST(EnvoyEnvTest, RedisTlsVariablesWithoutRedisTlsAreInfo) {
  Env env = Deployment();
  env["REDIS_TLS_CACERT"] = "/ca.pem";
  env["REDIS_TLS_CLIENT_CERT"] = "/c.pem";
  env["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"] = "true";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_FALSE(result.load.settings->redis_tls.has_value());
  for (const char* name :
       {"REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"}) {
    EXPECT_THAT(Said(result, name, Level::kInfo), ElementsAre(HasSubstr("only with REDIS_TLS")))
        << name;
  }
}

// The global modes map to the settings of the same meaning.
TEST(EnvoyEnvTest, ModesMapToSettings) {
  Env env = Deployment();
  env["QUOTA_MODE"] = "true";
  env["SHADOW_MODE"] = "1";
  env["RESPONSE_DYNAMIC_METADATA"] = "T";
  env["NEAR_LIMIT_RATIO"] = "0.7";
  env["LIMIT_RESPONSE_HEADERS_ENABLED"] = "true";
  env["LIMIT_REMAINING_HEADER"] = "X-Left";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  ASSERT_TRUE(result.load.settings.has_value());
  const rules::Settings& s = *result.load.settings;
  EXPECT_TRUE(s.quota_mode);
  EXPECT_TRUE(s.shadow_mode);
  EXPECT_TRUE(s.rls_dynamic_metadata);
  EXPECT_EQ(s.near_limit_ratio, 0.7f);
  EXPECT_TRUE(s.rls_upstream_headers);
  EXPECT_EQ(s.rls_limit_header, "RateLimit-Limit");
  EXPECT_EQ(s.rls_remaining_header, "X-Left");
}

TEST(EnvoyEnvTest, TheSameVariablesAtTheirDefaultsAreFine) {
  Env env = Deployment();
  for (const char* name :
       {"REDIS_PERSECOND", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "REDIS_TLS", "QUOTA_MODE",
        "RESPONSE_DYNAMIC_METADATA", "LIMIT_RESPONSE_HEADERS_ENABLED", "GRPC_SERVER_USE_TLS"}) {
    env[name] = "false";
  }
  env["NEAR_LIMIT_RATIO"] = "0.8";
  env["BACKEND_TYPE"] = "redis";
  env["REDIS_TYPE"] = "SINGLE";
  env["CONFIG_TYPE"] = "FILE";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  EXPECT_TRUE(result.ok()) << All(result);
}

TEST(EnvoyEnvTest, UnsupportedVariablesThatChangeNoDecisionAreWarnings) {
  Env env = Deployment();
  env["USE_STATSD"] = "true";
  env["STATSD_HOST"] = "statsd";
  env["LOG_FORMAT"] = "json";
  env["DOG_STATSD_MOGRIFIER_HITS_PATTERN"] = "x";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  EXPECT_TRUE(result.ok()) << All(result);
  for (const char* name :
       {"USE_STATSD", "STATSD_HOST", "LOG_FORMAT", "DOG_STATSD_MOGRIFIER_HITS_PATTERN"}) {
    EXPECT_THAT(Said(result, name, Level::kWarning), ::testing::SizeIs(1)) << name;
  }
  // USE_STATSD is on by default upstream: unset, it is not worth a warning every start.
  EXPECT_THAT(
      Said(ReadEnvoyEnv(With(Deployment(), "USE_STATSD", "")), "USE_STATSD", Level::kWarning),
      IsEmpty());
}

// Envoy Gateway's tracing variables (internal/infrastructure/kubernetes/ratelimit: its sample
// rate in percent over 100, with one decimal; the collector as http://HOST:PORT).
TEST(EnvoyEnvTest, TracingIsConfiguredAsUpstreamAndEnvoyGatewayConfigureIt) {
  const rules::TracingSettings off = ReadEnvoyEnv(Deployment()).load.settings->tracing;
  EXPECT_FALSE(off.enabled);
  EXPECT_EQ(off.service_name, "RateLimit");  // upstream's default name
  EXPECT_EQ(off.protocol, "http");
  EXPECT_EQ(off.sampling_rate, 1.0);
  Env env = Deployment();
  env["TRACING_ENABLED"] = "true";
  env["TRACING_SERVICE_NAME"] = "envoy-ratelimit";
  env["TRACING_SERVICE_NAMESPACE"] = "envoy-gateway-system";
  env["TRACING_SERVICE_INSTANCE_ID"] = "envoy-ratelimit-5d9f8-abcde";
  env["TRACING_SAMPLING_RATE"] = "0.5";
  env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://otel-svc.observability.svc.cluster.local:4318";
  EnvoyEnv result = ReadEnvoyEnv(env);
  EXPECT_TRUE(result.ok()) << All(result);
  const rules::TracingSettings& t = result.load.settings->tracing;
  EXPECT_TRUE(t.enabled);
  EXPECT_EQ(t.service_name, "envoy-ratelimit");
  EXPECT_EQ(t.service_namespace, "envoy-gateway-system");
  EXPECT_EQ(t.service_instance_id, "envoy-ratelimit-5d9f8-abcde");
  EXPECT_EQ(t.sampling_rate, 0.5);
  EXPECT_EQ(t.endpoint, "http://otel-svc.observability.svc.cluster.local:4318");
  EXPECT_THAT(Said(result, "TRACING_ENABLED", Level::kInfo),
              ElementsAre(HasSubstr("http://otel-svc.observability.svc.cluster.local:4318")));
  EXPECT_THAT(Said(result, "OTEL_EXPORTER_OTLP_ENDPOINT", Level::kWarning), IsEmpty());
  // The exporter's other OpenTelemetry variables are not read: a warning each.
  EXPECT_THAT(Said(ReadEnvoyEnv(With(env, "OTEL_EXPORTER_OTLP_HEADERS", "api-key=x")),
                   "OTEL_EXPORTER_OTLP_HEADERS", Level::kWarning),
              ElementsAre(HasSubstr("OTEL_EXPORTER_OTLP_ENDPOINT alone")));
  // A rate past 1 samples everything (OpenTelemetry's ratio sampler); grpc is the other protocol.
  env["TRACING_SAMPLING_RATE"] = "3";
  env["TRACING_EXPORTER_PROTOCOL"] = "grpc";
  env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "otel:4317";
  result = ReadEnvoyEnv(env);
  EXPECT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.load.settings->tracing.sampling_rate, 1.0);
  EXPECT_EQ(result.load.settings->tracing.protocol, "grpc");
  // What cannot be used is an error naming the variable.
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"TRACING_EXPORTER_PROTOCOL", "udp"},
                                                        {"TRACING_SAMPLING_RATE", "half"},
                                                        {"OTEL_EXPORTER_OTLP_ENDPOINT", "otel"}}) {
    const EnvoyEnv bad = ReadEnvoyEnv(With(env, name, value));
    EXPECT_FALSE(bad.ok()) << name;
    EXPECT_THAT(Said(bad, name, Level::kError), ::testing::SizeIs(1)) << name;
  }
}

TEST(EnvoyEnvTest, IrrelevantVariablesAreInfo) {
  Env env = Deployment();
  env["REDIS_POOL_SIZE"] = "50";
  env["LOCAL_CACHE_SIZE_IN_BYTES"] = "1000000";
  env["MEMCACHE_HOST_PORT"] = "m:11211";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  EXPECT_TRUE(result.ok()) << All(result);
  for (const char* name : {"REDIS_POOL_SIZE", "LOCAL_CACHE_SIZE_IN_BYTES", "MEMCACHE_HOST_PORT"}) {
    EXPECT_THAT(Said(result, name, Level::kInfo), ElementsAre(HasSubstr("no effect"))) << name;
  }
}

// USE_PROMETHEUS=true: the metrics also where upstream's Prometheus sink listens.
TEST(EnvoyEnvTest, UsePrometheusServesTheMetricsAtPrometheusAddr) {
  Env env = With(Deployment(), "USE_PROMETHEUS", "true");
  EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.prometheus_listen, "0.0.0.0:9090");  // upstream's defaults
  EXPECT_EQ(result.prometheus_path, "/metrics");
  EXPECT_THAT(Said(result, "USE_PROMETHEUS", Level::kInfo),
              ElementsAre(HasSubstr("http://0.0.0.0:9090/metrics")));
  EXPECT_THAT(Said(result, "USE_PROMETHEUS", Level::kWarning), IsEmpty());
  // Envoy Gateway's PROMETHEUS_ADDR; a path of one's own.
  env["PROMETHEUS_ADDR"] = ":19001";
  env["PROMETHEUS_PATH"] = "/stats/prometheus";
  result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.prometheus_listen, "0.0.0.0:19001");
  EXPECT_EQ(result.prometheus_path, "/stats/prometheus");
  for (const char* name : {"PROMETHEUS_ADDR", "PROMETHEUS_PATH"}) {
    EXPECT_THAT(Said(result, name, Level::kWarning), IsEmpty()) << name;
    EXPECT_THAT(Said(result, name, Level::kInfo), IsEmpty()) << name;
  }
  EXPECT_EQ(ReadEnvoyEnv(With(env, "PROMETHEUS_ADDR", "127.0.0.1:19001")).prometheus_listen,
            "127.0.0.1:19001");
  EXPECT_EQ(ReadEnvoyEnv(With(env, "PROMETHEUS_ADDR", "[::1]:19001")).prometheus_listen,
            "[::1]:19001");
  // Still a warning: the names are sluice's, not those a mapper file would make.
  EXPECT_THAT(Said(ReadEnvoyEnv(With(env, "PROMETHEUS_MAPPER_YAML", "/etc/m.yaml")),
                   "PROMETHEUS_MAPPER_YAML", Level::kWarning),
              ::testing::SizeIs(1));
}

TEST(EnvoyEnvTest, PrometheusAddrWithoutUsePrometheusHasNoEffect) {
  Env env = With(Deployment(), "PROMETHEUS_ADDR", ":19001");
  env["PROMETHEUS_PATH"] = "/m";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  ASSERT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.prometheus_listen, "");
  for (const char* name : {"PROMETHEUS_ADDR", "PROMETHEUS_PATH"}) {
    EXPECT_THAT(Said(result, name, Level::kInfo), ElementsAre(HasSubstr("no effect"))) << name;
  }
}

TEST(EnvoyEnvTest, BadPrometheusAddrOrPathIsAnError) {
  const Env env = With(Deployment(), "USE_PROMETHEUS", "true");
  for (const char* addr : {"19001", ":x", ":70000", "host:", ":-1"}) {
    const EnvoyEnv result = ReadEnvoyEnv(With(env, "PROMETHEUS_ADDR", addr));
    EXPECT_FALSE(result.ok()) << addr;
    EXPECT_THAT(Said(result, "PROMETHEUS_ADDR", Level::kError), ::testing::SizeIs(1)) << addr;
  }
  const EnvoyEnv result = ReadEnvoyEnv(With(env, "PROMETHEUS_PATH", "metrics"));
  EXPECT_THAT(Said(result, "PROMETHEUS_PATH", Level::kError), ::testing::SizeIs(1));
}

// No variable of upstream's falls through to the catch-all: each has its own answer.
TEST(EnvoyEnvTest, EveryUpstreamVariableHasItsOwnDisposition) {
  for (const std::string& name : EnvoyEnvVariableNames()) {
    const EnvoyEnv result = ReadEnvoyEnv(With(Deployment(), name, "1"));
    for (const EnvoyEnvMessage& m : result.messages) {
      EXPECT_THAT(m.text, ::testing::Not(HasSubstr("not by sluice"))) << name;
    }
  }
}

TEST(EnvoyEnvTest, WatchRootOffAndIgnoredDotfiles) {
  Env env = Deployment();
  env["RUNTIME_WATCH_ROOT"] = "false";
  env["RUNTIME_SUBDIRECTORY"] = "";
  env["RUNTIME_APPDIRECTORY"] = "rules";
  env["RUNTIME_IGNOREDOTFILES"] = "true";
  const EnvoyEnv result = ReadEnvoyEnv(env);
  EXPECT_TRUE(result.ok()) << All(result);
  EXPECT_EQ(result.rules_path, "/data/current/rules");
  EXPECT_FALSE(result.load.dotfiles);
}

TEST(EnvoyEnvTest, LogLevelsAndIpv6Hosts) {
  EXPECT_EQ(ReadEnvoyEnv(With(Deployment(), "LOG_LEVEL", "WARNING")).log_level, "warn");
  EXPECT_EQ(ReadEnvoyEnv(With(Deployment(), "LOG_LEVEL", "error")).log_level, "err");
  EXPECT_EQ(ReadEnvoyEnv(With(Deployment(), "LOG_LEVEL", "panic")).log_level, "critical");
  EXPECT_EQ(ReadEnvoyEnv(With(Deployment(), "HOST", "::")).load.settings->listen, "[::]:8080");
  EXPECT_EQ(ReadEnvoyEnv(With(Deployment(), "DEBUG_HOST", "::1")).load.settings->admin_listen,
            "[::1]:6070");
}

TEST(EnvoyEnvTest, GoDurations) {
  const auto timeout_us = [](const std::string& text) {
    return ReadEnvoyEnv(With(Deployment(), "REDIS_TIMEOUT", text)).load.settings->redis_timeout_us;
  };
  EXPECT_EQ(timeout_us("250ms"), 250000);
  EXPECT_EQ(timeout_us("1.5s"), 1500000);
  EXPECT_EQ(timeout_us("1h"), int64_t{3600} * 1000000);
  EXPECT_EQ(timeout_us("100us"), 100);
  for (const char* bad : {"0", "-1s", "1x", "s", "1.2.3s", "500ns"}) {
    EXPECT_FALSE(ReadEnvoyEnv(With(Deployment(), "REDIS_TIMEOUT", bad)).ok()) << bad;
  }
}

TEST(EnvoyEnvTest, TheDocsTableNamesEveryVariable) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/docs/integration/envoy.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t section = doc.find("## Same deployment: upstream's environment variables");
  ASSERT_NE(section, std::string::npos);
  for (const std::string& name : EnvoyEnvVariableNames()) {
    EXPECT_NE(doc.find("`" + name + "`", section), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace sluice::cli
