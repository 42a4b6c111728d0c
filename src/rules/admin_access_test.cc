// The admin API's access as serve decides it at start and check-config checks it
// (admin_access.h): the token file read relative to the settings file, the errors with the
// setting's position, and an address given by a flag in place of the settings' own.

#include "rules/admin_access.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/loader.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::TempDir;

// The settings of `yaml`, written as sluice.yaml in `dir` and loaded as serve loads them.
Settings Load(TempDir& dir, const std::string& yaml) {
  const LoadResult result = LoadConfig({dir.Write("etc/sluice.yaml", yaml)});
  EXPECT_THAT(result.errors, IsEmpty());
  return result.config ? result.config->settings : Settings{};
}

std::vector<std::string> Lines(const std::vector<ConfigError>& errors) {
  std::vector<std::string> lines;
  for (const ConfigError& e : errors) lines.push_back(e.ToString());
  return lines;
}

// The tokens of AdminTokens as "name=token" (or "?" for its error).
std::vector<std::string> Tokens(const Settings& s, std::string_view listen) {
  const auto tokens = AdminTokens(s, listen);
  if (!tokens.ok()) return {"?"};
  std::vector<std::string> out;
  for (const AdminToken& t : *tokens) out.push_back(t.name + "=" + t.token);
  return out;
}

TEST(AdminAccessTest, TheTokensAreTheLinesOfAFileBesideTheSettingsNamedOrNot) {
  TempDir dir;
  dir.Write("etc/admin-token", "  s3cret \n\n# the support team's\nalice  t0ken-a\t\nbob b\n");
  const Settings s = Load(dir, "admin: {listen: 0.0.0.0:9091, token_file: admin-token}\n");
  EXPECT_EQ(s.admin_token_file, dir.Path("etc/admin-token"));
  EXPECT_THAT(CheckAdminAccess(s), IsEmpty());
  EXPECT_THAT(Tokens(s, s.admin_listen), ElementsAre("admin=s3cret", "alice=t0ken-a", "bob=b"));
}

TEST(AdminAccessTest, ATokenLineOfMoreThanTwoWordsIsRefusedWithItsLine) {
  TempDir dir;
  dir.Write("etc/admin-token", "alice a\nbob has spaces\n");
  const Settings s = Load(dir, "admin: {listen: 127.0.0.1:9091, token_file: admin-token}\n");
  EXPECT_EQ(std::string(AdminTokens(s, s.admin_listen).status().message()),
            dir.Path("etc/sluice.yaml") + ":1:45: " + dir.Path("etc/admin-token") +
                ":2: a token line is TOKEN or NAME TOKEN, not more words");
}

TEST(AdminAccessTest, NoTokenOnLoopbackIsAnEmptyToken) {
  TempDir dir;
  const Settings s = Load(dir, "admin: {listen: 127.0.0.1:9091}\n");
  EXPECT_THAT(CheckAdminAccess(s), IsEmpty());
  EXPECT_THAT(Tokens(s, s.admin_listen), IsEmpty());
  EXPECT_THAT(Tokens(s, "[::1]:9091"), IsEmpty());
  EXPECT_THAT(Tokens(s, "localhost:9091"), IsEmpty());
}

TEST(AdminAccessTest, BeyondLoopbackWithoutATokenIsRefusedAtTheListenSetting) {
  TempDir dir;
  const Settings s = Load(dir, "# the admin API\nadmin: {listen: 0.0.0.0:9091}\n");
  const std::string at = dir.Path("etc/sluice.yaml") + ":2:17: ";
  const std::string why =
      "refusing to serve the admin API on 0.0.0.0:9091 without a token: set admin.token_file "
      "in the settings file, or bind it to 127.0.0.1";
  EXPECT_THAT(Lines(CheckAdminAccess(s)), ElementsAre(at + why));
  EXPECT_EQ(AdminTokens(s, s.admin_listen).status().message(), at + why);
  // The --admin flag in place of the settings' address: that address decides, and the error
  // names no place in the file.
  EXPECT_THAT(Tokens(s, "127.0.0.1:9091"), IsEmpty());
}

TEST(AdminAccessTest, AFlagsAddressBeyondLoopbackWithoutATokenIsRefusedWithNoPosition) {
  TempDir dir;
  const Settings s = Load(dir, "listen: 127.0.0.1:8080\n");
  EXPECT_EQ(AdminTokens(s, "10.0.0.1:9091").status().message(),
            "refusing to serve the admin API on 10.0.0.1:9091 without a token: set "
            "admin.token_file in the settings file, or bind it to 127.0.0.1");
}

TEST(AdminAccessTest, AnUnreadableOrEmptyTokenFileIsRefusedAtTheTokenFileSetting) {
  TempDir dir;
  dir.Write("etc/empty-token", " \n# none\n");
  for (const std::string name : {"missing-token", "empty-token"}) {
    const Settings s = Load(dir, "admin:\n  listen: 127.0.0.1:9091\n  token_file: " + name + "\n");
    const std::string expected = dir.Path("etc/sluice.yaml") +
                                 ":3:15: cannot read an admin token from " +
                                 dir.Path("etc/" + name) + " (one per line: TOKEN, or NAME TOKEN)";
    EXPECT_THAT(Lines(CheckAdminAccess(s)), ElementsAre(expected)) << name;
    EXPECT_EQ(AdminTokens(s, s.admin_listen).status().message(), expected) << name;
  }
}

}  // namespace
}  // namespace sluice::rules
