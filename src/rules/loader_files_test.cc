// The loader (loader.h) on files and directories: domains across files, what a directory's
// listing loads, the settings file in a directory or named directly, a clients file of a million
// rows, and the config's version as files change.

#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "rules/loader_testing.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

namespace fs = std::filesystem;

using test::Joined;
using test::kExampleA;
using test::kExampleB;
using test::kExampleC;
using test::kPlans;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::TempDir;

TEST(LoaderFilesTest, DuplicateDomainAcrossFiles) {
  TempDir dir;
  dir.Write("a.yaml", "domain: shared\n");
  dir.Write("b.yaml", "# again\ndomain: shared\n");
  const LoadResult result = LoadConfig({dir.path().string()});
  std::vector<std::string> lines;
  for (const ConfigError& e : result.errors) lines.push_back(e.ToString());
  EXPECT_THAT(lines, ElementsAre(dir.Path("b.yaml") +
                                 ":2:1: duplicate domain 'shared' in config "
                                 "file (also in " +
                                 dir.Path("a.yaml") + ")"));
  EXPECT_EQ(result.config, nullptr);
}

TEST(LoaderFilesTest, DirectoryIgnoresNonYamlFilesAndDotEntries) {
  TempDir dir;
  dir.Write("edge.yaml", kExampleA);
  dir.Write("sub/api.yml", kExampleB);
  dir.Write("README.md", "domain: readme\n: not yaml at all [\n");
  dir.Write("edge.yaml.bak", "domain: edge\n");
  dir.Write("notes.txt", "domain: notes\n");
  dir.Write(".hidden.yaml", "domain: [broken\n");
  dir.Write(".git/config.yaml", "domain: edge\n");
  // A Kubernetes ConfigMap mount: the files are symlinks through `..data` to a dated directory.
  dir.Write("..2024_01_01_00_00_00.000/files.yaml", kExampleC);
  fs::create_directory_symlink("..2024_01_01_00_00_00.000", dir.path() / "..data");
  fs::create_symlink("..data/files.yaml", dir.path() / "files.yaml");
  const LoadResult result = LoadConfig({dir.path().string()});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_THAT(result.config->domains, SizeIs(3));
  EXPECT_NE(result.config->FindDomain("edge"), nullptr);
  EXPECT_NE(result.config->FindDomain("api"), nullptr);
  EXPECT_NE(result.config->FindDomain("files"), nullptr);
  EXPECT_EQ(result.config->FindDomain("readme"), nullptr);
}

TEST(LoaderFilesTest, MissingPath) {
  const LoadResult result = LoadConfig({"/nonexistent/sluice/rules"});
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].ToString(), "/nonexistent/sluice/rules: no such file or directory");
}

TEST(LoaderFilesTest, SettingsFileInTheDirectory) {
  TempDir dir;
  dir.Write("edge.yaml", kExampleA);
  dir.Write("sluice.yaml", "listen: 0.0.0.0:1234\ncount_denied: true\n");
  const LoadResult result = LoadConfig({dir.path().string()});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_EQ(result.config->settings.file, dir.Path("sluice.yaml"));
  EXPECT_EQ(result.config->settings.listen, "0.0.0.0:1234");
  EXPECT_TRUE(result.config->settings.count_denied);
  EXPECT_THAT(result.config->domains, SizeIs(1));
}

TEST(LoaderFilesTest, TwoSettingsFilesAreAnError) {
  TempDir dir;
  dir.Write("a.yaml", "listen: 0.0.0.0:1\n");
  dir.Write("b.yaml", "listen: 0.0.0.0:2\n");
  const LoadResult result = LoadConfig({dir.path().string()});
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].ToString(),
            dir.Path("b.yaml") +
                ":1:1: a second settings file (a document without `domain:`); "
                "the first is " +
                dir.Path("a.yaml"));
}

TEST(LoaderFilesTest, SettingsFileNamedDirectlyBringsItsRules) {
  TempDir dir;
  dir.Write("rules/edge.yaml", kExampleA);
  dir.Write("rules/api.yaml", kExampleB);
  dir.Write("etc/sluice.yaml", "rules: ../rules\nlisten: 127.0.0.1:1\n");
  const LoadResult result = LoadConfig({dir.Path("etc/sluice.yaml")});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_EQ(result.config->settings.listen, "127.0.0.1:1");
  EXPECT_THAT(result.config->domains, SizeIs(2));
  EXPECT_EQ(result.config->limit_count, 6u);

  // An absolute rules path works too; a missing one is an error.
  dir.Write("etc/abs.yaml", "rules: " + dir.Path("rules") + "\n");
  const LoadResult absolute = LoadConfig({dir.Path("etc/abs.yaml")});
  ASSERT_THAT(absolute.errors, IsEmpty()) << Joined(absolute.errors);
  EXPECT_THAT(absolute.config->domains, SizeIs(2));
  dir.Write("etc/missing.yaml", "rules: ../nowhere\n");
  const LoadResult missing = LoadConfig({dir.Path("etc/missing.yaml")});
  ASSERT_THAT(missing.errors, SizeIs(1));
  EXPECT_EQ(missing.errors[0].message, "no such file or directory");
}

TEST(LoaderFilesTest, RulesOfASettingsFileInADirectoryAreNotFollowed) {
  // `rules:` applies only when the settings file is named directly.
  TempDir dir;
  dir.Write("other/edge.yaml", kExampleA);
  dir.Write("conf/sluice.yaml", "rules: ../other\n");
  const LoadResult result = LoadConfig({dir.Path("conf")});
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  EXPECT_THAT(result.config->domains, IsEmpty());
}

TEST(LoaderFilesTest, MillionRowClientsCsvLoads) {
  TempDir dir;
  constexpr int kRows = 1000000;
  {
    std::string csv = "key,plan\n";
    csv.reserve(size_t{kRows} * 24);
    static const char* kPlanNames[] = {"free", "pro", "enterprise"};
    for (int i = 0; i < kRows; ++i) {
      csv += "key-";
      csv += std::to_string(i);
      csv += ',';
      csv += kPlanNames[i % 3];
      csv += '\n';
    }
    dir.Write("clients.csv", csv);
  }
  dir.Write("plans.yaml", std::string(kPlans) + "clients: clients.csv\n");
  const auto start = std::chrono::steady_clock::now();
  const LoadResult result = LoadConfig({dir.path().string()});
  const auto elapsed = std::chrono::steady_clock::now() - start;
  std::cout << "[ timing   ] 1M-row clients CSV loaded in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms\n";
  ASSERT_THAT(result.errors, IsEmpty()) << Joined(result.errors);
  const Domain* plans = result.config->FindDomain("plans");
  ASSERT_NE(plans->clients, nullptr);
  EXPECT_EQ(plans->clients->size(), size_t{kRows});
  EXPECT_EQ(plans->clients->Find("key-0")->name, "free");
  EXPECT_EQ(plans->clients->Find("key-1")->name, "pro");
  EXPECT_EQ(plans->clients->Find("key-500000")->name, "enterprise");
  EXPECT_EQ(plans->clients->Find("key-999999")->name, "free");
}

TEST(LoaderFilesTest, VersionChangesWhenAFileChangesAndNotOtherwise) {
  TempDir dir;
  dir.Write("edge.yaml", kExampleA);
  dir.Write("plans.yaml", std::string(kPlans) + "clients: clients.csv\n");
  dir.Write("clients.csv", "k1,pro\n");
  const auto version = [&] {
    const LoadResult r = LoadConfig({dir.path().string()});
    EXPECT_THAT(r.errors, IsEmpty()) << Joined(r.errors);
    return r.config ? r.config->version : std::string();
  };
  const std::string v1 = version();
  EXPECT_EQ(v1.size(), 16u);
  EXPECT_EQ(version(), v1);  // same files, same version

  dir.Write("notes.txt", "ignored files do not count");
  EXPECT_EQ(version(), v1);

  dir.Write("edge.yaml", std::string(kExampleA) + "# a comment\n");
  const std::string v2 = version();
  EXPECT_NE(v2, v1);

  dir.Write("clients.csv", "k1,free\n");  // the clients file is part of the configuration
  const std::string v3 = version();
  EXPECT_NE(v3, v2);

  dir.Write("clients.csv", "k1,pro\n");
  dir.Write("edge.yaml", kExampleA);
  EXPECT_EQ(version(), v1);  // back to the same bytes, back to the same version
}

// serve --envoy-env: a runtime directory that is not there is no rules, with the settings given.
TEST(LoaderFilesTest, MissingPathIsEmptyWhenAsked) {
  LoadOptions options;
  options.settings.emplace().listen = "127.0.0.1:1";
  options.missing_is_empty = true;
  const LoadResult result = LoadConfig({"/nonexistent/sluice/rules"}, options);
  ASSERT_THAT(result.errors, IsEmpty());
  EXPECT_THAT(result.config->domains, IsEmpty());
  EXPECT_EQ(result.config->settings.listen, "127.0.0.1:1");
}

}  // namespace
}  // namespace sluice::rules
