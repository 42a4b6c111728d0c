#include "rules/config_manager.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/matcher.h"
#include "sluice/clock.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr int64_t kSecond = 1000000;
// A realistic unix time, 1 s into a minute, so that a fixed window of a minute does not roll over
// while a test runs on the manual clock.
constexpr int64_t kT0 = (1700000000 / 60 * 60 + 1) * kSecond;

// Debounce for the watcher tests: short enough to keep the suite fast, long enough that a burst
// of writes a few milliseconds apart counts as one change.
constexpr int kDebounceMs = 50;
// The longest any test waits for the watcher (a reload normally lands within ~kDebounceMs).
constexpr milliseconds kMaxWait{5000};

// A test's config directory: `config` (path()) in a TempDir of its own (root()). The manager also
// watches the parent of a watched directory, and that parent should be this test's own quiet
// directory, not all of the system's temp dir.
class ConfigDir {
 public:
  ConfigDir() {
    if (!root_.path().empty()) fs::create_directory(path_);
  }

  const fs::path& root() const { return root_.path(); }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  testing::TempDir root_;
  fs::path path_ = root_.path() / "config";
};

// Writes `text` in place (truncate + write), as an editor saving over the file does.
void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  ASSERT_TRUE(out) << "cannot write " << path;
}

// Writes `text` next to `path` under a name the loader ignores, then renames it over `path`: the
// atomic replace of deployment tools (and of many editors).
void ReplaceFile(const std::string& path, const std::string& text) {
  const fs::path target(path);
  // (fmt rather than operator+: GCC 12 reports a false -Wrestrict on "." + std::string.)
  const std::string temp =
      (target.parent_path() / fmt::format(".{}.tmp", target.filename().string())).string();
  WriteFile(temp, text);
  ASSERT_EQ(std::rename(temp.c_str(), path.c_str()), 0) << "rename over " << path;
}

// Polls `done` every few milliseconds for at most `timeout`; returns its last value.
bool WaitFor(const std::function<bool()>& done, milliseconds timeout = kMaxWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// A domain file: one key-only `api_key` descriptor limited to `requests` per minute.
std::string ApiDomain(const std::string& domain, uint64_t requests) {
  return fmt::format(
      "domain: {}\n"
      "descriptors:\n"
      "  - key: api_key\n"
      "    rate_limit: {{unit: minute, requests_per_unit: {}}}\n",
      domain, requests);
}

// The requests-per-window of the first limit an `api_key` descriptor gets in `domain` of the
// manager's current config; nullopt when there is no config, no such domain or no limit.
std::optional<uint64_t> ApiKeyLimit(const ConfigManager& manager, const std::string& domain) {
  const std::shared_ptr<const Config> config = manager.Current();
  if (config == nullptr) return std::nullopt;
  const Domain* d = config->FindDomain(domain);
  if (d == nullptr) return std::nullopt;
  const std::vector<Entry> entries = {{"api_key", "some-client"}};
  const RuleNode* node = MatchDescriptor(*d, entries);
  if (node == nullptr || node->limits.empty()) return std::nullopt;
  return node->limits.front().limit.requests;
}

// Waits until the manager's `api_key` limit in `domain` is `requests`.
bool WaitForApiKeyLimit(const ConfigManager& manager, const std::string& domain, uint64_t requests,
                        milliseconds timeout = kMaxWait) {
  return WaitFor([&] { return ApiKeyLimit(manager, domain) == requests; }, timeout);
}

engine::Request ApiKeyRequest(const std::string& domain, const std::string& api_key,
                              uint64_t cost = 1) {
  engine::Request request;
  request.domain = domain;
  request.descriptors.push_back(
      {.entries = {{"api_key", api_key}}, .limit = {}, .hits_addend = {}});
  request.hits_addend = cost;
  return request;
}

TEST(ConfigManagerTest, InitialReloadAppliesTheDirectory) {
  ConfigDir dir;
  WriteFile(dir / "api.yaml", ApiDomain("api", 10));
  WriteFile(dir / "web.yml", ApiDomain("web", 20));
  WriteFile(dir / "README.txt", "not yaml: ignored");
  ConfigManager manager({dir.path().string()}, "");
  EXPECT_EQ(manager.Current(), nullptr);

  const ConfigManager::ReloadOutcome outcome = manager.Reload();

  EXPECT_TRUE(outcome.applied);
  EXPECT_FALSE(outcome.unchanged);
  EXPECT_TRUE(outcome.errors.empty());
  ASSERT_NE(manager.Current(), nullptr);
  EXPECT_EQ(outcome.version, manager.Current()->version);
  EXPECT_FALSE(outcome.version.empty());
  EXPECT_EQ(manager.Current()->domains.size(), 2u);
  EXPECT_EQ(ApiKeyLimit(manager, "api"), 10u);
  EXPECT_EQ(ApiKeyLimit(manager, "web"), 20u);
  EXPECT_EQ(manager.reload_successes(), 1u);
  EXPECT_EQ(manager.reload_failures(), 0u);
}

TEST(ConfigManagerTest, InvalidEditKeepsTheOldConfigAndReportsFileLineColumn) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  const std::shared_ptr<const Config> before = manager.Current();

  // An unknown key (a typo of rate_limit) on line 4, column 5.
  WriteFile(file,
            "domain: api\n"
            "descriptors:\n"
            "  - key: api_key\n"
            "    rate_limt: {unit: minute, requests_per_unit: 99}\n");
  ConfigManager::ReloadOutcome outcome = manager.Reload();

  EXPECT_FALSE(outcome.applied);
  EXPECT_FALSE(outcome.unchanged);
  ASSERT_FALSE(outcome.errors.empty());
  EXPECT_THAT(outcome.errors.front().ToString(), HasSubstr(file + ":4:5: "));
  EXPECT_THAT(outcome.errors.front().ToString(), HasSubstr("rate_limt"));
  EXPECT_EQ(outcome.version, before->version);
  EXPECT_EQ(manager.Current(), before);
  EXPECT_EQ(manager.Current()->version, before->version);
  EXPECT_EQ(ApiKeyLimit(manager, "api"), 10u);
  EXPECT_EQ(manager.reload_failures(), 1u);
  EXPECT_EQ(manager.reload_successes(), 1u);

  // A YAML syntax error (an unclosed flow map) is reported with its position too.
  WriteFile(file,
            "domain: api\n"
            "descriptors:\n"
            "  - key: api_key\n"
            "    rate_limit: {unit: minute, requests_per_unit: 99\n");
  outcome = manager.Reload();
  EXPECT_FALSE(outcome.applied);
  ASSERT_FALSE(outcome.errors.empty());
  EXPECT_THAT(outcome.errors.front().ToString(),
              MatchesRegex(".*api\\.yaml:[0-9]+:[0-9]+: YAML syntax error.*"));
  EXPECT_EQ(manager.Current(), before);
  EXPECT_EQ(manager.reload_failures(), 2u);

  // Every error of a file is listed, each with its own position.
  WriteFile(file,
            "domain: api\n"
            "descriptors:\n"
            "  - key: api_key\n"
            "    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
            "  - key: user\n"
            "    rate_limit: {unit: minute, requests_per_unit: -3}\n");
  outcome = manager.Reload();
  EXPECT_FALSE(outcome.applied);
  ASSERT_GE(outcome.errors.size(), 2u);
  for (const ConfigError& error : outcome.errors) {
    EXPECT_THAT(error.ToString(), MatchesRegex(".*api\\.yaml:[0-9]+:[0-9]+: .+"));
  }
  EXPECT_EQ(outcome.errors[0].position.line, 4);
  EXPECT_EQ(outcome.errors[1].position.line, 6);
  EXPECT_EQ(manager.Current(), before);
  EXPECT_EQ(manager.reload_failures(), 3u);

  // Fixing the file is applied again.
  WriteFile(file, ApiDomain("api", 11));
  EXPECT_TRUE(manager.Reload().applied);
  EXPECT_EQ(ApiKeyLimit(manager, "api"), 11u);
  EXPECT_EQ(manager.reload_failures(), 3u);
}

// An empty or comment-only file renamed over a domain's file (a truncated write, a bad deploy)
// must not remove the domain: it is an error, the old config stays, the failure is counted.
TEST(ConfigManagerTest, EmptyFileOverADomainKeepsTheDomain) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  const std::shared_ptr<const Config> before = manager.Current();

  for (const char* text : {"", "# nothing here yet\n", "\n\n  \n", "---\n"}) {
    WriteFile(dir / "new.yaml", text);
    fs::rename(dir / "new.yaml", file);
    const ConfigManager::ReloadOutcome outcome = manager.Reload();
    EXPECT_FALSE(outcome.applied) << "text: '" << text << "'";
    ASSERT_FALSE(outcome.errors.empty());
    EXPECT_THAT(outcome.errors.front().ToString(),
                HasSubstr(file + ":1:1: the file holds no YAML document"));
    EXPECT_EQ(manager.Current(), before);
    EXPECT_EQ(ApiKeyLimit(manager, "api"), 10u);
  }
  EXPECT_EQ(manager.reload_failures(), 4u);
}

TEST(ConfigManagerTest, UnchangedReloadReportsUnchangedAndKeepsTheSnapshot) {
  ConfigDir dir;
  WriteFile(dir / "api.yaml", ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  const std::shared_ptr<const Config> before = manager.Current();

  // Rewriting identical bytes is not a change either.
  WriteFile(dir / "api.yaml", ApiDomain("api", 10));
  const ConfigManager::ReloadOutcome outcome = manager.Reload();

  EXPECT_FALSE(outcome.applied);
  EXPECT_TRUE(outcome.unchanged);
  EXPECT_TRUE(outcome.errors.empty());
  EXPECT_EQ(outcome.version, before->version);
  EXPECT_EQ(manager.Current(), before);
  EXPECT_EQ(manager.reload_successes(), 1u);
  EXPECT_EQ(manager.reload_failures(), 0u);
}

TEST(ConfigManagerTest, DuplicateDomainAcrossFilesIsRejectedAndTheOldConfigKept) {
  ConfigDir dir;
  WriteFile(dir / "a.yaml", ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  const std::shared_ptr<const Config> before = manager.Current();

  WriteFile(dir / "b.yaml", ApiDomain("api", 20));
  const ConfigManager::ReloadOutcome outcome = manager.Reload();

  EXPECT_FALSE(outcome.applied);
  ASSERT_EQ(outcome.errors.size(), 1u);
  const std::string message = outcome.errors[0].ToString();
  EXPECT_THAT(message, HasSubstr(dir / "b.yaml"));
  EXPECT_THAT(message, HasSubstr("duplicate domain 'api'"));
  EXPECT_THAT(message, HasSubstr(dir / "a.yaml"));
  EXPECT_THAT(message, MatchesRegex(".*b\\.yaml:[0-9]+:[0-9]+: .*"));
  EXPECT_EQ(manager.Current(), before);
  EXPECT_EQ(ApiKeyLimit(manager, "api"), 10u);
  EXPECT_EQ(manager.reload_failures(), 1u);
}

TEST(ConfigManagerTest, WatcherPicksUpAValidEdit) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  WriteFile(file, ApiDomain("api", 20));
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));

  // A new file in the directory is picked up as well.
  WriteFile(dir / "web.yaml", ApiDomain("web", 30));
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "web", 30));

  // An invalid edit seen by the watcher keeps the config and is counted.
  const std::shared_ptr<const Config> before = manager.Current();
  WriteFile(file, "domain: api\ndescriptors: [\n");
  EXPECT_TRUE(WaitFor([&] { return manager.reload_failures() == 1; }));
  EXPECT_EQ(manager.Current(), before);
  EXPECT_EQ(ApiKeyLimit(manager, "api"), 20u);
  manager.StopWatching();
}

// `--config sluice.yaml` whose `rules:` names a directory: the rules there are watched as if the
// directory had been given itself (an edit, a new file, a removed file).
TEST(ConfigManagerTest, WatcherFollowsTheRulesDirectoryASettingsFileNames) {
  ConfigDir dir;
  const std::string settings = (dir.root() / "sluice.yaml").string();
  WriteFile(settings, "rules: config\n");  // relative to the settings file: dir.path()
  WriteFile(dir / "api.yaml", ApiDomain("api", 10));
  ConfigManager manager({settings}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_EQ(ApiKeyLimit(manager, "api"), 10u);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  WriteFile(dir / "api.yaml", ApiDomain("api", 20));
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  WriteFile(dir / "web.yaml", ApiDomain("web", 30));
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "web", 30));
  fs::remove(dir / "web.yaml");
  EXPECT_TRUE(WaitFor([&] { return manager.Current()->FindDomain("web") == nullptr; }));
  manager.StopWatching();
}

// The plan mapping file may live outside the rules directory; editing it reloads too.
TEST(ConfigManagerTest, WatcherPicksUpAnEditedClientsFileOutsideTheRulesDirectory) {
  ConfigDir dir;
  const std::string csv = (dir.root() / "clients.csv").string();
  WriteFile(csv, "key,plan\nk1,free\n");
  WriteFile(dir / "plans.yaml",
            "domain: plans\n"
            "plans:\n"
            "  free: {limits: [{requests: 1, window: 1s}]}\n"
            "  pro: {limits: [{requests: 100, window: 1s}]}\n"
            "default_plan: free\n"
            "clients: " +
                csv +
                "\n"
                "descriptors:\n"
                "  - key: api_key\n"
                "    plan_from: plan\n");
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  const auto plan_of = [&](const std::string& key) -> std::string {
    const std::shared_ptr<const Config> config = manager.Current();
    const rules::Plan* plan = config->FindDomain("plans")->clients->Find(key);
    return plan == nullptr ? "" : plan->name;
  };
  ASSERT_EQ(plan_of("k1"), "free");
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  WriteFile(csv, "key,plan\nk1,pro\nk2,pro\n");
  EXPECT_TRUE(WaitFor([&] { return plan_of("k1") == "pro" && plan_of("k2") == "pro"; }));
  manager.StopWatching();
}

TEST(ConfigManagerTest, WatcherPicksUpAtomicRenameOverAFileInTheDirectory) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  ReplaceFile(file, ApiDomain("api", 20));
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  // The replaced file is a new inode: a second replace must be seen as well.
  ReplaceFile(file, ApiDomain("api", 30));
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 30));
  manager.StopWatching();
}

TEST(ConfigManagerTest, WatcherPicksUpAtomicRenameOverANamedFile) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ConfigManager manager({file}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  ReplaceFile(file, ApiDomain("api", 20));
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  ReplaceFile(file, ApiDomain("api", 30));
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 30));
  manager.StopWatching();
}

// A Kubernetes ConfigMap volume: the files are symlinks through `..data`, itself a symlink to a
// timestamped directory; an update writes a new directory and renames a fresh `..data` symlink
// over the old one (atomic), then deletes the old directory.
class ConfigMapVolume {
 public:
  explicit ConfigMapVolume(const fs::path& root) : root_(root) {}

  // Publishes a new version holding `files` (name -> text); the first call creates the links.
  void Publish(const std::vector<std::pair<std::string, std::string>>& files) {
    const std::string version = fmt::format("..v{}", ++generation_);
    fs::create_directory(root_ / version);
    for (const auto& [name, text] : files) WriteFile((root_ / version / name).string(), text);
    if (generation_ == 1) {
      fs::create_directory_symlink(version, root_ / "..data");
      for (const auto& [name, text] : files) {
        fs::create_symlink(fs::path("..data") / name, root_ / name);
      }
      return;
    }
    fs::create_directory_symlink(version, root_ / "..data_tmp");
    ASSERT_EQ(std::rename((root_ / "..data_tmp").c_str(), (root_ / "..data").c_str()), 0);
    fs::remove_all(root_ / fmt::format("..v{}", generation_ - 1));
  }

 private:
  fs::path root_;
  int generation_ = 0;
};

TEST(ConfigManagerTest, WatcherPicksUpAConfigMapSymlinkSwap) {
  ConfigDir dir;
  ConfigMapVolume volume(dir.path());
  volume.Publish({{"rules.yaml", ApiDomain("api", 10)}});
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_EQ(ApiKeyLimit(manager, "api"), 10u);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  volume.Publish({{"rules.yaml", ApiDomain("api", 20)}});
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  // And again, after the directory the watcher may have been watching is gone.
  volume.Publish({{"rules.yaml", ApiDomain("api", 30)}});
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 30));
  EXPECT_EQ(manager.reload_failures(), 0u);
  manager.StopWatching();
}

// A file named directly inside a ConfigMap mount (`--config /etc/sluice/rules.yaml`): the update
// renames `..data`, not `rules.yaml`, so the parent watch must count events about the first
// component of the symlink's target (rules.yaml -> ..data/rules.yaml) as well as the file's name.
TEST(ConfigManagerTest, WatcherPicksUpAConfigMapSymlinkSwapOfANamedFile) {
  ConfigDir dir;
  ConfigMapVolume volume(dir.path());
  volume.Publish({{"rules.yaml", ApiDomain("api", 10)}});
  ConfigManager manager({dir / "rules.yaml"}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  volume.Publish({{"rules.yaml", ApiDomain("api", 20)}});
  ASSERT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  volume.Publish({{"rules.yaml", ApiDomain("api", 30)}});
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 30));
  manager.StopWatching();
}

// envoyproxy/ratelimit's runtime layout: the watched directory is below a symlink (RUNTIME_ROOT,
// `current` -> `v1`) that a deployment swaps to a new version; nothing below it changes.
TEST(ConfigManagerTest, WatcherPicksUpASwapOfASymlinkAboveTheDirectory) {
  ConfigDir dir;
  for (const char* version : {"v1", "v2"}) {
    fs::create_directories(dir.path() / version / "ratelimit" / "config");
  }
  WriteFile(dir / "v1/ratelimit/config/api", ApiDomain("api", 10));
  WriteFile(dir / "v2/ratelimit/config/api", ApiDomain("api", 20));
  fs::create_directory_symlink("v1", dir.path() / "current");
  LoadOptions options;
  options.any_extension = true;
  ConfigManager manager({dir / "current/ratelimit/config"}, "", options);
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());
  ASSERT_EQ(ApiKeyLimit(manager, "api"), 10u);

  fs::create_directory_symlink("v2", dir.path() / "current.new");
  fs::rename(dir.path() / "current.new", dir.path() / "current");
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  // And back: the watch holds after a swap.
  fs::create_directory_symlink("v1", dir.path() / "current.new");
  fs::rename(dir.path() / "current.new", dir.path() / "current");
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 10));
  manager.StopWatching();
}

// The watcher's debounce is measured on the manager's clock. (The manual clock's tests wait a
// moment of real time before they advance it: for the watcher to have seen the writes, so that
// it measures from the clock's reading before the advance.)
constexpr milliseconds kWatcherSees{300};
constexpr int64_t kDebounceUs = int64_t{kDebounceMs} * 1000;

// A burst of writes is one change: on a clock that does not move, none is applied however long
// it lasts in real time; once the clock has passed the debounce, the last content is, in one
// reload.
TEST(ConfigManagerTest, RapidSuccessiveWritesEndWithTheLastContentInOneReload) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 1));
  ManualClock clock;
  ConfigManager manager({dir.path().string()}, "", {}, &clock);
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());
  const uint64_t successes_before = manager.reload_successes();

  // 20 writes, each a different valid config.
  for (uint64_t i = 1; i <= 20; ++i) WriteFile(file, ApiDomain("api", 100 + i));
  std::this_thread::sleep_for(kWatcherSees);  // six debounces of real time
  EXPECT_EQ(ApiKeyLimit(manager, "api"), 1u) << "reloaded before the clock passed the debounce";

  clock.Advance(kDebounceUs);
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 120));
  EXPECT_EQ(manager.reload_successes() - successes_before, 1u);
  EXPECT_EQ(manager.reload_failures(), 0u);
  manager.StopWatching();
}

// The reload comes debounce_ms after the last change, by the manager's clock.
TEST(ConfigManagerTest, ReloadWaitsTheDebounceOnTheManagersClock) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ManualClock clock;
  ConfigManager manager({dir.path().string()}, "", {}, &clock);
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  WriteFile(file, ApiDomain("api", 20));
  std::this_thread::sleep_for(kWatcherSees);
  clock.Advance(kDebounceUs - 1000);
  EXPECT_FALSE(WaitForApiKeyLimit(manager, "api", 20, milliseconds(200)));
  clock.Advance(1000);
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  manager.StopWatching();
}

// Changes that keep coming hold the reload back for at most five debounces after the first.
TEST(ConfigManagerTest, ChangesThatKeepComingAreReloadedAfterFiveDebounces) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ManualClock clock;
  ConfigManager manager({dir.path().string()}, "", {}, &clock);
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  // A change every 0.8 debounce: never quiet for a whole one.
  const int64_t step_us = kDebounceUs * 8 / 10;
  uint64_t requests = 10;
  for (int64_t waited_us = 0; waited_us + step_us < 5 * kDebounceUs; waited_us += step_us) {
    WriteFile(file, ApiDomain("api", ++requests));
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_EQ(ApiKeyLimit(manager, "api"), 10u) << "reloaded " << waited_us << " µs in";
    clock.Advance(step_us);
  }
  WriteFile(file, ApiDomain("api", ++requests));  // 4.8 debounces after the first
  std::this_thread::sleep_for(milliseconds(100));
  clock.Advance(step_us);  // 5.6 debounces after the first, 0.8 after the last
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", requests));
  manager.StopWatching();
}

// The manager also watches the parent of a watched directory (to see the directory itself
// replaced). Writes there about other names must not count as config changes: a neighbour
// written more often than debounce_ms (a log file, a busy /tmp) would otherwise restart the
// debounce for as long as it keeps writing, holding back the reload of a real edit.
TEST(ConfigManagerTest, WritesNextToTheConfigDirectoryDoNotHoldBackAReload) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());

  // A neighbour of the config directory, appended to every 10 ms for at most 3 s.
  std::atomic<bool> stop{false};
  std::thread neighbour([&] {
    std::ofstream log((dir.root() / "app.log").string(), std::ios::app);
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(3000);
    while (!stop.load() && std::chrono::steady_clock::now() < deadline) {
      log << "a line\n" << std::flush;
      std::this_thread::sleep_for(milliseconds(10));
    }
  });
  std::this_thread::sleep_for(milliseconds(20));
  WriteFile(file, ApiDomain("api", 20));
  const bool applied_while_busy = WaitForApiKeyLimit(manager, "api", 20, milliseconds(1500));
  stop = true;
  neighbour.join();

  EXPECT_TRUE(applied_while_busy)
      << "the edit was held back by unrelated writes in the parent directory";
  // Once the neighbour is quiet the edit does land.
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  manager.StopWatching();
}

TEST(ConfigManagerTest, TriggerReloadReloads) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  // Changed before the watch starts, so no file event announces it: only the trigger can.
  WriteFile(file, ApiDomain("api", 20));
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());
  std::this_thread::sleep_for(milliseconds(3 * kDebounceMs));
  ASSERT_EQ(ApiKeyLimit(manager, "api"), 10u) << "reloaded without a trigger";

  manager.TriggerReload();
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  EXPECT_EQ(manager.reload_successes(), 2u);
  manager.StopWatching();
}

TEST(ConfigManagerTest, SighupReloads) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 10));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  WriteFile(file, ApiDomain("api", 20));
  ASSERT_TRUE(manager.StartWatching(kDebounceMs).ok());
  manager.ReloadOnSighup();
  std::this_thread::sleep_for(milliseconds(3 * kDebounceMs));
  ASSERT_EQ(ApiKeyLimit(manager, "api"), 10u) << "reloaded without a signal";

  ASSERT_EQ(raise(SIGHUP), 0);
  EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 20));
  manager.StopWatching();
}

// Limiter state is keyed by where a limit sits and by its definition (engine::RuleLimitId), so a
// reload keeps the counters of every unchanged limit and starts a changed one afresh.
TEST(ConfigManagerTest, LimiterStateSurvivesAReloadOnlyForUnchangedLimits) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  const auto api_file = [](uint64_t api_key_requests, uint64_t user_requests) {
    return fmt::format(
        "domain: api\n"
        "descriptors:\n"
        "  - key: api_key\n"
        "    rate_limit: {{unit: minute, requests_per_unit: {}}}\n"
        "  - key: user\n"
        "    rate_limit: {{unit: minute, requests_per_unit: {}}}\n",
        api_key_requests, user_requests);
  };
  WriteFile(file, api_file(10, 5));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ManualClock clock(kT0);
  store::MemoryStore store(store::MemoryStore::Options{}, &clock);
  engine::Engine engine(&store);
  const auto remaining = [&](uint64_t cost) {
    const engine::Response response =
        engine.Check(*manager.Current(), ApiKeyRequest("api", "alice", cost), clock.NowMicros());
    EXPECT_TRUE(response.allowed);
    return response.Headline() == nullptr ? int64_t{-2} : response.Headline()->decision.remaining;
  };
  EXPECT_EQ(remaining(3), 7);

  // An unrelated change (another descriptor's limit, a new descriptor, a new domain).
  WriteFile(file, api_file(10, 6) +
                      "  - key: path\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
  WriteFile(dir / "other.yaml", ApiDomain("other", 1));
  ASSERT_TRUE(manager.Reload().applied);
  clock.Advance(kSecond);
  EXPECT_EQ(remaining(1), 6) << "the unchanged api_key limit must keep its count";

  // The api_key limit itself changes: it starts fresh.
  WriteFile(file, api_file(20, 6));
  ASSERT_TRUE(manager.Reload().applied);
  clock.Advance(kSecond);
  EXPECT_EQ(remaining(1), 19) << "a changed limit must start from a fresh state";
  EXPECT_EQ(remaining(1), 18);

  // Moving the unchanged definition to another file keeps its state too.
  fs::remove(file);
  WriteFile(dir / "moved.yaml", api_file(20, 6));
  ASSERT_TRUE(manager.Reload().applied);
  clock.Advance(kSecond);
  EXPECT_EQ(remaining(1), 17);
}

// Readers keep deciding while the config is swapped under them; each decision must see one
// complete config: both of its domains, from the same generation.
//
// Run it under the tsan preset too: the snapshot pointer must be published race-free.
TEST(ConfigManagerTest, ReloadDuringConcurrentDecisions) {
  ConfigDir dir;
  // Generation g: both domain files limit api_key to kBase * (g + 1) per minute.
  constexpr uint64_t kBase = 1000;
  const auto publish = [&](int generation) {
    const uint64_t requests = kBase * static_cast<uint64_t>(generation + 1);
    WriteFile(dir / "api.yaml", ApiDomain("api", requests));
    WriteFile(dir / "web.yaml", ApiDomain("web", requests));
  };
  publish(0);
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ManualClock clock(kT0);
  store::MemoryStore store(store::MemoryStore::Options{}, &clock);
  engine::Engine engine(&store);

  constexpr int kThreads = 4;
  constexpr int kReloads = 50;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> decisions{0};
  std::atomic<uint64_t> incomplete{0};
  std::atomic<uint64_t> seen_generation_mask{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < kThreads; ++t) {
    readers.emplace_back([&, t] {
      const engine::Request api = ApiKeyRequest("api", fmt::format("client-{}", t));
      const engine::Request web = ApiKeyRequest("web", fmt::format("client-{}", t));
      while (!stop.load(std::memory_order_relaxed)) {
        const std::shared_ptr<const Config> config = manager.Current();
        const engine::Response a = engine.Check(*config, api, kT0);
        const engine::Response w = engine.Check(*config, web, kT0);
        const bool complete = config->domains.size() == 2 && a.domain_found && w.domain_found &&
                              a.Headline() != nullptr && w.Headline() != nullptr &&
                              a.Headline()->limit.requests == w.Headline()->limit.requests &&
                              a.Headline()->limit.requests % kBase == 0;
        if (!complete) {
          incomplete.fetch_add(1);
        } else {
          const uint64_t generation = a.Headline()->limit.requests / kBase - 1;
          seen_generation_mask.fetch_or(uint64_t{1} << (generation & 63));
        }
        decisions.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  // Every reload waits until the readers have made some decisions on the new config (bounded),
  // so that reloads and decisions really interleave.
  const auto readers_progress = [&] {
    const uint64_t start = decisions.load();
    return WaitFor([&] { return decisions.load() >= start + kThreads; }, milliseconds(2000));
  };
  EXPECT_TRUE(readers_progress());
  int applied = 0;
  for (int i = 1; i <= kReloads; ++i) {
    publish(i % 2);
    if (manager.Reload().applied) ++applied;
    EXPECT_TRUE(readers_progress());
  }
  stop = true;
  for (std::thread& reader : readers) reader.join();

  EXPECT_EQ(applied, kReloads);
  EXPECT_EQ(manager.reload_failures(), 0u);
  EXPECT_EQ(incomplete.load(), 0u);
  EXPECT_EQ(seen_generation_mask.load(), 0b11u) << "readers should have seen both configs";
  EXPECT_GT(decisions.load(), static_cast<uint64_t>(kReloads));
}

// The same with the watcher doing the reloads (its own thread) while decisions run, and the
// manager stopped while they still run.
TEST(ConfigManagerTest, WatcherReloadsDuringConcurrentDecisions) {
  ConfigDir dir;
  const std::string file = dir / "api.yaml";
  WriteFile(file, ApiDomain("api", 1000));
  ConfigManager manager({dir.path().string()}, "");
  ASSERT_TRUE(manager.Reload().applied);
  ManualClock clock(kT0);
  store::MemoryStore store(store::MemoryStore::Options{}, &clock);
  engine::Engine engine(&store);
  ASSERT_TRUE(manager.StartWatching(5).ok());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> incomplete{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&, t] {
      const engine::Request api = ApiKeyRequest("api", fmt::format("client-{}", t));
      while (!stop.load(std::memory_order_relaxed)) {
        const std::shared_ptr<const Config> config = manager.Current();
        const engine::Response response = engine.Check(*config, api, kT0);
        if (!response.domain_found || response.Headline() == nullptr) incomplete.fetch_add(1);
      }
    });
  }
  for (uint64_t i = 1; i <= 10; ++i) {
    ReplaceFile(file, ApiDomain("api", 1000 + i));
    EXPECT_TRUE(WaitForApiKeyLimit(manager, "api", 1000 + i));
  }
  manager.StopWatching();
  stop = true;
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(incomplete.load(), 0u);
}

}  // namespace
}  // namespace sluice::rules
