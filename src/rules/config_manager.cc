#include "rules/config_manager.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "spdlog/spdlog.h"
#include "util/log.h"

namespace sluice::rules {
namespace fs = std::filesystem;
namespace {

std::atomic<ConfigManager*> g_sighup_target{nullptr};

void OnSighup(int) {
  if (ConfigManager* m = g_sighup_target.load()) m->TriggerReload();
}

constexpr uint32_t kWatchMask = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM |
                                IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF |
                                IN_MOVE_SELF;

}  // namespace

ConfigManager::ConfigManager(std::vector<std::string> paths, std::string embedded_text,
                             LoadOptions options, const Clock* clock)
    : paths_(std::move(paths)),
      embedded_text_(std::move(embedded_text)),
      options_(std::move(options)),
      clock_(clock),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

ConfigManager::~ConfigManager() {
  ConfigManager* self = this;
  g_sighup_target.compare_exchange_strong(self, nullptr);  // no signal reaches us from now on
  StopWatching();
  if (wake_fd_ >= 0) close(wake_fd_);
}

ConfigManager::ReloadOutcome ConfigManager::Reload() {
  absl::MutexLock lock(&reload_mu_);
  return LoadAndSwap(remote_.get());
}

ConfigManager::ReloadOutcome ConfigManager::Apply(std::shared_ptr<const RemoteDomains> remote) {
  absl::MutexLock lock(&reload_mu_);
  ReloadOutcome outcome = LoadAndSwap(remote.get());
  if (outcome.errors.empty()) {
    remote_ = std::move(remote);
    awaiting_remote_.store(false);
  }
  return outcome;
}

ConfigManager::ReloadOutcome ConfigManager::LoadAndSwap(const RemoteDomains* remote) {
  LoadResult result = paths_.empty() && !options_.remote_rules
                          ? LoadConfigText("<embedded default>", embedded_text_)
                          : LoadConfig(paths_, options_, remote);
  ReloadOutcome outcome;
  std::shared_ptr<const Config> active = Current();
  if (!result.errors.empty()) {
    failures_.fetch_add(1);
    for (const ConfigError& e : result.errors) util::Log().error("config: {}", e.ToString());
    util::Log().error("config: {} error(s); keeping version {}", result.errors.size(),
                      active ? active->version : "none");
    outcome.errors = std::move(result.errors);
    outcome.version = active ? active->version : "";
    return outcome;
  }
  if (active && active->version == result.config->version) {
    outcome.unchanged = true;
    outcome.version = active->version;
    return outcome;
  }
  outcome.version = result.config->version;
  {
    util::SpinLockHolder lock(&current_mu_);
    current_.swap(result.config);
  }
  // The old config is freed here, on the reloading thread, not by whichever request thread
  // happens to drop the last copy of it: freeing a large rule set takes milliseconds, which would
  // land on one request. One still in use is kept until a later reload finds it unused.
  retired_.push_back(std::move(result.config));
  std::erase_if(retired_,
                [](const std::shared_ptr<const Config>& c) { return c.use_count() == 1; });
  successes_.fetch_add(1);
  outcome.applied = true;
  util::Log().info("config: loaded version {}", outcome.version);
  return outcome;
}

void ConfigManager::AddWatches() {
  // Each path, every directory below it, and its parent (where a symlink swap or an atomic
  // rename replaces it; there only events about the path's own name count). Adding a watch that
  // exists returns the same descriptor.
  const auto watch = [this](const fs::path& dir) {
    const int wd = inotify_add_watch(inotify_fd_, dir.c_str(), kWatchMask);
    return wd >= 0 ? &watches_[wd] : nullptr;
  };
  // Plan mapping files may live outside the rules directories: watch them by name too. So may
  // the rules that a settings file names (`rules:`, relative to the settings file): they are
  // watched as if they had been given as a path.
  std::vector<std::string> files;
  std::vector<std::string> roots = paths_;
  if (std::shared_ptr<const Config> config = Current()) {
    for (const auto& domain : config->domains) {
      if (!domain->clients_path.empty()) files.push_back(domain->clients_path);
    }
    const Settings& settings = config->settings;
    if (!settings.file.empty() && !settings.rules_path.empty()) {
      fs::path rules = settings.rules_path;
      if (rules.is_relative()) rules = fs::path(settings.file).parent_path() / rules;
      roots.push_back(rules.string());
    }
  }
  for (const std::string& f : files) {
    std::error_code ec;
    const fs::path path = fs::absolute(f, ec).lexically_normal();
    if (WatchInterest* parent = watch(path.parent_path())) {
      parent->names.insert(path.filename().string());
    }
  }
  for (const std::string& p : roots) {
    std::error_code ec;
    fs::path path = fs::absolute(p, ec).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();  // "rules/" -> "rules"
    const bool is_directory = fs::is_directory(path, ec);
    // A symbolic link above the path (envoyproxy/ratelimit's RUNTIME_ROOT, `current` ->
    // `v2`) is swapped in its own directory, where no other watch sees it.
    for (fs::path above = path.parent_path(); above.has_relative_path();
         above = above.parent_path()) {
      if (!fs::is_symlink(above, ec)) continue;
      if (WatchInterest* parent = watch(above.parent_path())) {
        parent->names.insert(above.filename().string());
      }
    }
    if (WatchInterest* parent = watch(path.parent_path())) {
      parent->names.insert(path.filename().string());
      // A file of a Kubernetes ConfigMap volume is a symlink through `..data`, which the
      // kubelet swaps by renaming a new link over it.
      if (!is_directory) parent->names.insert("..data");
    }
    if (!is_directory) continue;
    if (WatchInterest* self = watch(path)) self->all = true;
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      if (!it->is_directory(ec)) continue;
      if (WatchInterest* sub = watch(it->path())) sub->all = true;
    }
  }
}

absl::Status ConfigManager::StartWatching(int debounce_ms) {
  if (watcher_.joinable()) return absl::OkStatus();
  if (wake_fd_ < 0) return absl::InternalError("eventfd failed");
  if (!paths_.empty()) {
    inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ < 0) return absl::InternalError("inotify_init1 failed");
    AddWatches();
  }
  stopping_ = false;
  watcher_ = std::thread([this, debounce_ms] { WatchLoop(debounce_ms); });
  return absl::OkStatus();
}

void ConfigManager::StopWatching() {
  if (!watcher_.joinable()) return;
  stopping_ = true;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  watcher_.join();
  if (inotify_fd_ >= 0) close(inotify_fd_);
  inotify_fd_ = -1;
  watches_.clear();
}

void ConfigManager::TriggerReload() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void ConfigManager::ReloadOnSighup() {
  g_sighup_target.store(this);
  struct sigaction sa {};
  sa.sa_handler = OnSighup;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &sa, nullptr);
}

void ConfigManager::WatchLoop(int debounce_ms) {
  alignas(inotify_event) char buffer[16 * 1024];
  // A reload waits for debounce_ms of quiet after the last change, but never more than kMaxDelay
  // debounces after the first. Both in the clock's monotonic time: poll waits, in real time, for
  // what is left by the clock, and the clock is read again when it returns.
  constexpr int kMaxDelay = 5;
  const int64_t debounce_us = int64_t{debounce_ms} * 1000;
  bool pending = false;
  int64_t first_change_us = 0;
  int64_t last_change_us = 0;
  while (!stopping_) {
    int timeout_ms = -1;
    if (pending) {
      const int64_t due_us =
          std::min(last_change_us + debounce_us, first_change_us + kMaxDelay * debounce_us);
      const int64_t left_us = due_us - clock_->MonotonicMicros();
      if (left_us <= 0) {
        // Quiet for debounce_ms after a change (or changing for too long): reload, and watch
        // any new directories.
        pending = false;
        Reload();
        if (inotify_fd_ >= 0) AddWatches();
        continue;
      }
      timeout_ms = static_cast<int>(std::min<int64_t>((left_us + 999) / 1000, debounce_ms));
    }
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
    const int ready = poll(fds, inotify_fd_ >= 0 ? 2 : 1, timeout_ms);
    if (ready <= 0) continue;  // EINTR, or the wait is over: the clock says whether it is due
    bool changed = false;
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof count);
      if (stopping_) break;
      changed = true;  // SIGHUP or a manual trigger: debounced like a file change
    }
    if (inotify_fd_ >= 0 && (fds[1].revents & POLLIN)) {
      ssize_t n;
      while ((n = read(inotify_fd_, buffer, sizeof buffer)) > 0) {
        for (ssize_t off = 0; off < n;) {
          const auto* event = reinterpret_cast<const inotify_event*>(buffer + off);
          off += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
          auto w = watches_.find(event->wd);
          if (w == watches_.end() || w->second.all ||
              (event->len > 0 && w->second.names.contains(event->name))) {
            changed = true;
          }
        }
      }
    }
    if (changed) {
      last_change_us = clock_->MonotonicMicros();
      if (!pending) first_change_us = last_change_us;
      pending = true;
    }
  }
}

}  // namespace sluice::rules
