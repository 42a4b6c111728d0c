// `sluice check-config` refuses what serve refuses at start beyond the files' own checks: here,
// TLS files for Redis (redis.tls) and for the listeners (http.tls, admin.tls, grpc.tls) that
// cannot be used, named with their place in the settings file; usable ones pass, and a settings
// file that does not decide on Redis is not checked for Redis.

#include <sstream>

#include "cli/rules_commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tls_certs.h"

namespace sluice::cli {
namespace {

using ::testing::HasSubstr;

// check-config on `yaml` as etc/sluice.yaml in `dir`, with a domain beside it: its status and
// output.
std::pair<int, std::string> CheckConfig(testing::TempDir& dir, const std::string& yaml) {
  dir.Write("etc/api.yaml",
            "domain: api\ndescriptors:\n  - key: user\n"
            "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  dir.Write("etc/sluice.yaml", yaml);
  std::ostringstream out;
  const int status = RunCheckConfig({dir.Path("etc")}, out);
  return {status, out.str()};
}

TEST(CheckConfigTest, RedisTlsFilesThatCannotBeUsedAreRefusedAtTheirPlace) {
  testing::TempDir dir;
  testing::TlsCerts certs;
  ASSERT_TRUE(certs.ok());
  const std::string head = "backend: redis\nredis:\n  url: rediss://127.0.0.1:1\n  tls:\n";
  auto [status, out] = CheckConfig(dir, head + "    ca_file: missing.pem\n");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(
      out, HasSubstr(dir.Path("etc/sluice.yaml") + ":5:14: redis.tls: TLS CA file " +
                     dir.Path("etc/missing.pem") + ": cannot read it: No such file or directory"));
  // Another certificate's key, at key_file's place.
  std::tie(status, out) = CheckConfig(dir, head + "    ca_file: " + certs.ca() +
                                               "\n    cert_file: " + certs.Cert("client") +
                                               "\n    key_file: " + certs.Key("server") + "\n");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, HasSubstr(dir.Path("etc/sluice.yaml") + ":7:15: redis.tls: TLS client key " +
                             certs.Key("server")));
  // Usable files pass (the server is not contacted).
  std::tie(status, out) = CheckConfig(dir, head + "    ca_file: " + certs.ca() +
                                               "\n    cert_file: " + certs.Cert("client") +
                                               "\n    key_file: " + certs.Key("client") + "\n");
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("ok: 1 domains"));
  // Not deciding on Redis: not serve's business at start, nor check-config's.
  std::tie(status, out) = CheckConfig(
      dir, "backend: memory\nredis:\n  url: rediss://127.0.0.1:1\n  tls: {ca_file: missing.pem}\n");
  EXPECT_EQ(status, 0) << out;
}

TEST(CheckConfigTest, ListenerTlsFilesThatCannotBeUsedAreRefusedAtTheirPlace) {
  testing::TempDir dir;
  testing::TlsCerts certs;
  ASSERT_TRUE(certs.ok()) << certs.make_log();
  // A missing certificate, relative to the settings file.
  auto [status, out] = CheckConfig(dir,
                                   "grpc:\n  tls:\n    cert_file: missing.pem\n"
                                   "    key_file: " +
                                       certs.Key("server") + "\n");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(
      out, HasSubstr(dir.Path("etc/sluice.yaml") + ":3:16: grpc.tls: TLS certificate " +
                     dir.Path("etc/missing.pem") + ": cannot read it: No such file or directory"));
  // Another certificate's key, at key_file's place.
  std::tie(status, out) = CheckConfig(dir, "http:\n  tls:\n    cert_file: " + certs.Cert("server") +
                                               "\n    key_file: " + certs.Key("client") + "\n");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, HasSubstr(dir.Path("etc/sluice.yaml") + ":4:15: http.tls: TLS key " +
                             certs.Key("client") + " is not the key of the certificate " +
                             certs.Cert("server")));
  // A client CA file that holds no certificate.
  std::tie(status, out) =
      CheckConfig(dir, "admin:\n  tls:\n    cert_file: " + certs.Cert("server") +
                           "\n    key_file: " + certs.Key("server") +
                           "\n    client_ca_file: " + certs.Key("client") + "\n");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, HasSubstr(dir.Path("etc/sluice.yaml") + ":5:21: admin.tls: TLS client CA file " +
                             certs.Key("client") + ": no CA certificate in it"));
  // Usable files pass, on every listener.
  const std::string block = "{cert_file: " + certs.Cert("server") +
                            ", key_file: " + certs.Key("server") +
                            ", client_ca_file: " + certs.ca() + "}";
  std::tie(status, out) = CheckConfig(
      dir, "http: {tls: " + block + "}\nadmin: {tls: " + block + "}\ngrpc: {tls: " + block + "}\n");
  EXPECT_EQ(status, 0) << out;
  // With the gRPC port off, its TLS is not serve's business at start, nor check-config's.
  std::tie(status, out) =
      CheckConfig(dir, "grpc: {listen: \"0\", tls: {cert_file: missing.pem, key_file: k.pem}}\n");
  EXPECT_EQ(status, 0) << out;
}

}  // namespace
}  // namespace sluice::cli
