// The runtime overrides of every instance on one Redis (or Cluster): a hash `PREFIX{overrides}`
// of one field per override (domain and entries) holding its JSON, and a counter
// `PREFIX{overrides}:version` that every change moves, both changed by one script so that the
// two never disagree. Each instance reads the counter every `poll` (100 ms: a change is in force
// everywhere within a second, with room for a loaded machine) and the hash when the counter moved.
// A change made here is in force here as soon as Redis took it. While Redis cannot be reached, the
// overrides last read stay in force, and changes are refused (503), never half made.

#ifndef SLUICE_STACK_REDIS_OVERRIDES_H_
#define SLUICE_STACK_REDIS_OVERRIDES_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/ticker.h"
#include "redis/client.h"
#include "rules/config.h"
#include "rules/override_book.h"

namespace sluice::stack {

class RedisOverrideBook : public rules::OverrideBook {
 public:
  // `client` is not owned and must outlive the book. `config` gives the rules stored overrides
  // are read against; `clock_us` the time (Unix µs).
  RedisOverrideBook(redis::Client* client, std::string prefix, std::string where,
                    std::function<std::shared_ptr<const rules::Config>()> config,
                    std::function<int64_t()> clock_us,
                    std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  ~RedisOverrideBook() override { poller_->Stop(); }
  RedisOverrideBook(const RedisOverrideBook&) = delete;
  RedisOverrideBook& operator=(const RedisOverrideBook&) = delete;

  // Reads what Redis holds now, waiting up to `wait`: at start, so that the first decisions see
  // the overrides. An error when Redis did not answer (serve goes on; the poll reads them later).
  absl::Status ReadNow(std::chrono::milliseconds wait);

  void Put(rules::Override o, Done done) override;
  void Remove(std::string domain, std::vector<rules::Entry> entries, RemoveDone done) override;
  std::string where() const override { return where_; }

 private:
  // Reads the counter and, when it moved, the hash; publishes what it read (unless a change of
  // this instance's, newer, was published meanwhile).
  absl::Status Refresh(std::chrono::milliseconds wait);
  // Publishes `all` as of counter `version`, unless a newer one is in force.
  void PublishAt(int64_t version, std::vector<rules::Override> all) ABSL_LOCKS_EXCLUDED(mu_);

  redis::Client* client_;
  const std::string hash_key_, version_key_, where_;
  const std::function<std::shared_ptr<const rules::Config>()> config_;
  const std::function<int64_t()> clock_us_;
  const std::chrono::milliseconds poll_;

  absl::Mutex mu_;
  // The counter of the last read in force (-1: nothing read yet).
  int64_t version_ ABSL_GUARDED_BY(mu_) = -1;
  // The counter after this instance's last change: no older read wins.
  int64_t floor_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<rules::Override> all_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<backend::Ticker> poller_;  // last: stopped first
};

}  // namespace sluice::stack

#endif  // SLUICE_STACK_REDIS_OVERRIDES_H_
