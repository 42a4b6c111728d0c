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
#include <memory>
#include <string>

#include "backend/holds.h"
#include "redis/client.h"

namespace sluice::redis {

class RedisHolds : public backend::Holds {
 public:
  // `client` is not owned and must outlive this.
  RedisHolds(Client* client, std::string prefix);
  // Answers the ops still waiting to be sent (Unavailable); a call in flight answers its own
  // when the client fails it, and nothing more is sent.
  ~RedisHolds() override;
  RedisHolds(const RedisHolds&) = delete;
  RedisHolds& operator=(const RedisHolds&) = delete;

  void Acquire(std::span<const backend::HoldRequest> requests, int64_t now_us,
               AcquireDone done) override;
  void Release(std::span<const backend::Hold> holds, int64_t now_us, CountDone done) override;
  void Renew(std::span<const backend::Hold> holds, int64_t now_us, CountDone done) override;

  // The sorted set of one state (for tests).
  std::string KeyOf(uint64_t limit_id, std::string_view key) const;

 private:
  // The queues of ops per server (or cluster slot) and the calls' replies (redis_holds.cc):
  // shared with the calls in flight, so that a reply after this object is gone is safe.
  struct Batcher;
  std::shared_ptr<Batcher> batcher_;
};

}  // namespace sluice::redis

#endif  // SLUICE_BACKEND_REDIS_REDIS_HOLDS_H_
