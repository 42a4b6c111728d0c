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
  // `embedded_text` document, unless `options.remote_rules` (the rules come with Apply). The
  // watcher's debounce is measured in `clock`'s monotonic time (not owned; must outlive the
  // manager).
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

  // Makes `remote` the domains that came over xDS (LoadConfig's `remote`) and reloads with them,
  // through the same loader and validation as files. If the result is not valid, the previous
  // remote domains stay (and so does the active config) and the errors are returned: the xDS
  // client NACKs with them. Later reloads (files, SIGHUP) use the last remote domains applied.
  ReloadOutcome Apply(std::shared_ptr<const RemoteDomains> remote);

  // The rules come (also) over xDS: until Apply has succeeded once, awaiting_remote() is true
  // and readiness (/readyz, gRPC health) says no.
  void ExpectRemote() { awaiting_remote_.store(true); }
  bool awaiting_remote() const { return awaiting_remote_.load(); }

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
  // Loads the paths with `remote` and, if valid and different, makes it current.
  ReloadOutcome LoadAndSwap(const RemoteDomains* remote) ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
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
  absl::Mutex reload_mu_;  // one reload at a time
  std::shared_ptr<const RemoteDomains> remote_ ABSL_GUARDED_BY(reload_mu_);
  // Configs replaced while requests still held them, freed by a later reload (LoadAndSwap).
  std::vector<std::shared_ptr<const Config>> retired_ ABSL_GUARDED_BY(reload_mu_);
  std::atomic<bool> awaiting_remote_{false};
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
