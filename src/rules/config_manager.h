// ConfigManager: the live configuration, reloaded without a restart.
//
// Holds the current Config snapshot. Readers take it with Current() and keep using it for as long
// as they hold it; a reload builds and validates a whole new Config and then swaps it in
// atomically, so readers never see a half-loaded config and never wait for a load. A config that
// fails to load leaves the old one running; every error is logged and counted.
//
// Reload() is the one reload function: file changes (inotify, debounced, including the
// Kubernetes ConfigMap `..data` symlink swap and atomic rename-over), SIGHUP and the admin API
// all end up there. Safe for concurrent use.

#ifndef SLUICE_RULES_CONFIG_MANAGER_H_
#define SLUICE_RULES_CONFIG_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "rules/loader.h"
#include "sluice/clock.h"
#include "util/spin_lock.h"

namespace sluice::rules {

class ConfigManager {
 public:
  // `paths`: files and directories as for LoadConfig, read with `options`. Empty: the
  // `embedded_text` document. The watcher's debounce is measured in `clock`'s monotonic time
  // (not owned; must outlive the manager).
  ConfigManager(std::vector<std::string> paths, std::string embedded_text, LoadOptions options = {},
                const Clock* clock = SystemClock::Get());
  ~ConfigManager();

  ConfigManager(const ConfigManager&) = delete;
  ConfigManager& operator=(const ConfigManager&) = delete;

  struct ReloadOutcome {
    bool applied = false;    // a new config is active
    bool unchanged = false;  // loaded fine but identical to the active one
    std::string version;     // the active version afterwards
    std::vector<ConfigError> errors;
  };

  // Loads the configuration again and, if it is valid and different, makes it current.
  ReloadOutcome Reload();

  // The active config; null until a first load succeeded. Never waits for a load: the lock it
  // takes only ever guards a pointer copy or swap.
  std::shared_ptr<const Config> Current() const {
    util::SpinLockHolder lock(&current_mu_);
    return current_;
  }

  // Watches the paths for changes and reloads after `debounce_ms` of quiet (by the clock), or
  // at most 5 × `debounce_ms` after the first change while they keep coming. Also reloads when
  // TriggerReload() is called (e.g. from a SIGHUP handler: it is async-signal-safe); triggers
  // that come before StartWatching are acted on once it starts.
  absl::Status StartWatching(int debounce_ms = 200);
  void StopWatching();
  void TriggerReload();

  // Installs a SIGHUP handler that calls TriggerReload() on this manager.
  void ReloadOnSighup();

  uint64_t reload_successes() const { return successes_.load(); }
  uint64_t reload_failures() const { return failures_.load(); }

 private:
  void WatchLoop(int debounce_ms);
  void AddWatches();

  const std::vector<std::string> paths_;
  const std::string embedded_text_;
  const LoadOptions options_;
  const Clock* const clock_;
  // (Not std::atomic<std::shared_ptr>: GCC 12's releases its internal lock with relaxed order,
  // which ThreadSanitizer rightly reports as a race.)
  mutable util::SpinLock current_mu_;
  std::shared_ptr<const Config> current_ ABSL_GUARDED_BY(current_mu_);
  absl::Mutex reload_mu_;  // one reload at a time (it guards no field: the whole of Reload)
  std::atomic<uint64_t> successes_{0};
  std::atomic<uint64_t> failures_{0};

  // Watches on the paths' parent directories care only about the entry with the path's name
  // (writes next to the config must not hold back its reload); other watches care about all.
  struct WatchInterest {
    bool all = false;
    std::set<std::string> names;
  };
  std::map<int, WatchInterest> watches_;  // by watch descriptor; used by the watcher only
  int inotify_fd_ = -1;
  const int wake_fd_;  // eventfd for TriggerReload and StopWatching; lives as long as this
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

}  // namespace sluice::rules

#endif  // SLUICE_RULES_CONFIG_MANAGER_H_
