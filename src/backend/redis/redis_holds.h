// The holds of concurrency limits on Redis (backend/holds.h), for every instance: one sorted set
// per (limit, key), `PREFIXh:LIMIT_ID:{KEY}`, of hold ids scored by their ends in Redis's own
// clock (TIME, µs), changed only by one small script that first drops the ended ones. A hold
// outlives the instance that took it, and any instance may release or renew it; the set expires
// a second after its last hold would have. Holds of several states are taken one script each
// (they may be on several nodes of a cluster), all or none: when one refuses, those taken are
// released.

#ifndef SLUICE_BACKEND_REDIS_REDIS_HOLDS_H_
#define SLUICE_BACKEND_REDIS_REDIS_HOLDS_H_

#include <cstdint>
#include <string>

#include "backend/holds.h"
#include "redis/client.h"

namespace sluice::redis {

class RedisHolds : public backend::Holds {
 public:
  // `client` is not owned and must outlive this.
  RedisHolds(Client* client, std::string prefix) : client_(client), prefix_(std::move(prefix)) {}

  void Acquire(std::span<const backend::HoldRequest> requests, int64_t now_us,
               AcquireDone done) override;
  void Release(std::span<const backend::Hold> holds, int64_t now_us, CountDone done) override;
  void Renew(std::span<const backend::Hold> holds, int64_t now_us, CountDone done) override;

  // The sorted set of one state (for tests).
  std::string KeyOf(uint64_t limit_id, std::string_view key) const;

 private:
  struct Gathering;
  // The reply of request `i` of an acquisition; the last one answers it.
  void Gathered(Gathering& g, size_t i, absl::StatusOr<Reply> reply);
  // One call of the script on `key`'s node: by its SHA, again as text after NOSCRIPT.
  void Run(const std::string& key, char op, uint64_t n, int64_t max_hold_us, uint64_t id,
           std::function<void(absl::StatusOr<Reply>)> done, bool by_sha = true);
  // Sends one op of the script for each of `holds` and answers how many said 1.
  void Each(std::span<const backend::Hold> holds, char op, CountDone done);

  Client* client_;
  const std::string prefix_;
};

}  // namespace sluice::redis

#endif  // SLUICE_BACKEND_REDIS_REDIS_HOLDS_H_
