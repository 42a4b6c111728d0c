// The holds of concurrency limits on Redis (backend/holds.h), for every instance: one sorted set
// per (limit, key), `PREFIXh:LIMIT_ID:{KEY}`, of hold ids scored by their ends in Redis's own
// clock (TIME, µs), changed only by one small script that first drops the ended ones. A hold
// outlives the instance that took it, and any instance may release or renew it; the set expires
// a second after its last hold would have. Holds of several states are taken one script each
// (they may be on several nodes of a cluster), all or none: when one refuses, those taken are
// released. The script takes a batch of such ops: those headed to one server (on a cluster, one
// slot) while a call is out go together in the next, as decisions are batched.

#ifndef SLUICE_BACKEND_REDIS_REDIS_HOLDS_H_
#define SLUICE_BACKEND_REDIS_REDIS_HOLDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
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
  // One op of the script on `key`, `done` given its {x, y, z}: queued with the others headed
  // to the same queue (the server; on a cluster, the key's slot) and sent in one call with
  // those waiting when a call slot is free (at most kMaxInFlight calls per queue).
  struct Op {
    std::string key;
    char op = 'a';
    uint64_t n = 0;
    int64_t max_hold_us = 0;
    uint64_t id = 0;
    std::function<void(absl::StatusOr<Reply>)> done;
  };
  struct Queue {
    std::vector<Op> waiting;
    int in_flight = 0;
  };
  void Run(std::string key, char op, uint64_t n, int64_t max_hold_us, uint64_t id,
           std::function<void(absl::StatusOr<Reply>)> done);
  // The next batch of `queue`, taking a call slot (`starting`) or keeping the one that just
  // answered; empty when none (and then, unless starting, the slot is given back).
  std::vector<Op> TakeBatch(uint16_t queue, bool starting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `batch` as one call: by the script's SHA, again as text after NOSCRIPT.
  void Send(uint16_t queue, std::vector<Op> batch, bool by_sha);
  static std::string Encode(const std::vector<Op>& batch, bool by_sha);
  // Sends one op of the script for each of `holds` and answers how many said 1.
  void Each(std::span<const backend::Hold> holds, char op, CountDone done);

  Client* client_;
  const std::string prefix_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint16_t, Queue> queues_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::redis

#endif  // SLUICE_BACKEND_REDIS_REDIS_HOLDS_H_
