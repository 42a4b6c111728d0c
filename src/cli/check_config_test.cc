// `sluice check-config` refuses what serve refuses at start beyond the files' own checks: here,
// TLS files for Redis (redis.tls) that cannot be used, named with their place in the settings
// file; usable ones pass, and a settings file that does not decide on Redis is not checked.

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

}  // namespace
}  // namespace sluice::cli
