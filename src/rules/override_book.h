// Where the runtime overrides in force are kept (rules/overrides.h says what one is): the engine
// reads the current set for every request (Current: one atomic load, and no more while there are
// none); the admin API sets and removes them (Put, Remove). Implementations keep them across
// restarts: FileOverrideBook (below) in a file, for the memory store; stack's Redis book in Redis,
// for every instance.

#ifndef SLUICE_RULES_OVERRIDE_BOOK_H_
#define SLUICE_RULES_OVERRIDE_BOOK_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rules/config.h"
#include "rules/overrides.h"

namespace sluice::rules {

class OverrideBook {
 public:
  virtual ~OverrideBook() = default;

  // The overrides in force (expired ones may remain until the next change; OverrideSet::Find
  // skips them), or null while there are none.
  // Whether there may be any: false means Current() is null (a cheap first look).
  bool any() const { return any_.load(std::memory_order_acquire); }
  std::shared_ptr<const OverrideSet> Current() const {
    if (!any_.load(std::memory_order_acquire)) return nullptr;
    return current_.load(std::memory_order_acquire);
  }

  // Sets `o` (replacing the one of the same domain and entries), kept where the book keeps them;
  // `done` runs once, on any thread, with why not if it could not be kept (then it is not set).
  using Done = std::function<void(absl::Status)>;
  virtual void Put(Override o, Done done) = 0;
  // Removes the override of `domain` and `entries` (sorted); `done` says whether there was one.
  using RemoveDone = std::function<void(absl::StatusOr<bool>)>;
  virtual void Remove(std::string domain, std::vector<Entry> entries, RemoveDone done) = 0;
  // For messages: where they are kept ("file /var/lib/sluice/overrides.json", "redis ...").
  virtual std::string where() const = 0;

 protected:
  // Makes `all` the set in force.
  void Publish(std::vector<Override> all);

 private:
  std::atomic<bool> any_{false};
  std::atomic<std::shared_ptr<const OverrideSet>> current_;
};

// The overrides of one process, kept in `path` (JSON Lines: one override's JSON per line,
// written to a temporary file and renamed over it, so that a crash leaves the old or the new
// one), or in memory only when `path` is empty. Expired ones are dropped when the next change is
// written.
class FileOverrideBook : public OverrideBook {
 public:
  // Reads `path` if it exists, making its directory if that does not exist: an error naming
  // the file (or the directory) when it cannot be read (made). A line that does
  // not parse against `config` (edited by hand, or a limit its domain now rejects) is skipped
  // with a warning naming the line; it is gone from the file at the next change. `clock_us` gives
  // the time of `for` and of expiries.
  static absl::StatusOr<std::unique_ptr<FileOverrideBook>> Open(std::string path,
                                                                const Config& config,
                                                                std::function<int64_t()> clock_us);

  void Put(Override o, Done done) override;
  void Remove(std::string domain, std::vector<Entry> entries, RemoveDone done) override;
  std::string where() const override;

 private:
  FileOverrideBook(std::string path, std::function<int64_t()> clock_us)
      : path_(std::move(path)), clock_us_(std::move(clock_us)) {}
  // Writes `all` (unless in memory only) and publishes it; the old set stays on an error.
  absl::Status Keep(std::vector<Override> all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const std::function<int64_t()> clock_us_;
  absl::Mutex mu_;  // one change at a time
  std::vector<Override> all_ ABSL_GUARDED_BY(mu_);
};

// Reads stored overrides (FileOverrideBook's lines, Redis's values), each parsed against
// `config`; one that does not parse is skipped and its error added to `skipped`.
std::vector<Override> ParseStoredOverrides(const std::vector<std::string>& items,
                                           const Config& config, int64_t now_us,
                                           std::vector<std::string>* skipped);

// `all` with `o` in place of the one of its domain and entries (or added), without the expired.
std::vector<Override> WithOverride(std::vector<Override> all, Override o, int64_t now_us);

}  // namespace sluice::rules

#endif  // SLUICE_RULES_OVERRIDE_BOOK_H_
