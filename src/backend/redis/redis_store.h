// RedisStore: the Redis backend's store, which decides the limits of one request on Redis
// (decide.lua), the counterpart of MemoryStore::DecideAll, asynchronously.
//
// Thread safety: safe for concurrent use; `done` runs on the client's I/O thread. All limits of
// one descriptor share a hash tag and are decided in one script call, all-or-nothing; items in
// different cluster slots are evaluated first and then decided, so they can briefly under-admit,
// never over-admit. Requests waiting for a call are batched (Options::max_batch).
// Units: microseconds. Each request has one deadline (the client's timeout), carried to Redis in
// Redis's clock; deadlines, the breaker and health read the client's clock (Client::clock).
//
// Design: docs/redis.md#the-redisstore-contract (keys, packing, fences, batching, deadlines,
// late replies, NOSCRIPT).

#ifndef SLUICE_BACKEND_REDIS_REDIS_STORE_H_
#define SLUICE_BACKEND_REDIS_REDIS_STORE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"
#include "backend/hybrid/eventual.h"
#include "backend/hybrid/leases.h"
#include "backend/redis/scripts.h"
#include "redis/breaker.h"
#include "redis/client.h"

namespace sluice::redis {

class RedisStore final : public backend::Backend,
                         public backend::LeaseSource,
                         public backend::SyncSource {
 public:
  struct Options {
    std::string key_prefix = "sluice:";
    Breaker::Options breaker = {};
    size_t max_batch = 128;      // requests per script call (single server)
    int max_in_flight = 2;       // script calls in flight at once (single server)
    size_t max_queued = 100000;  // requests waiting for a call; more are refused at once
    uint32_t buckets = 0;        // hashes the states are packed into; 0: a key per state
    bool batch_cluster = true;   // cluster: batch the requests headed to one node, as on one server
  };

  struct Stats {
    uint64_t calls = 0;         // DecideAll calls
    uint64_t script_calls = 0;  // script calls sent (batches count once)
    uint64_t errors = 0;        // failed calls (timeouts included)
    uint64_t timeouts = 0;
    uint64_t noscript_reloads = 0;
    uint64_t refused = 0;  // refused by the open breaker
    Breaker::State breaker = Breaker::State::kClosed;
    uint64_t breaker_opened = 0;
    uint64_t cross_slot_refunds = 0;  // slots refunded after another slot refused
    uint64_t batches_split = 0;       // cluster batches sent again request by request (slots moved)
    uint64_t late_refunds = 0;  // requests admitted by a call whose reply came too late, refunded
    uint64_t leases = 0;        // leases asked for (Lease)
    uint64_t lease_calls = 0;   // script calls that took leases (a batch counts once)
    uint64_t sync_calls = 0;    // merge calls (consistency: eventual; script calls too)
  };

  using Done = std::function<void(absl::StatusOr<DecideResult>)>;

  // `client` is not owned. It must be there while the store is used and, when both go, go
  // first: its destructor fails the calls still in flight, whose callbacks use the store.
  RedisStore(Client* client, Options options);
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  // Decides `items` (as for MemoryStore::DecideAll; nothing in them needs to outlive the call).
  // Errors: Unavailable (not connected, breaker open), DeadlineExceeded, Internal.
  void DecideAll(std::span<const backend::Item> items, Done done);

  // Gives back what `items` (their cost) consumed when decided at `decided_at_us` (Redis's time,
  // from the decision), as MemoryStore::Refund does. By EVALSHA (leases give units back often),
  // sent again as text (EVAL) after NOSCRIPT, so a flushed script cache cannot fail them.
  void Refund(std::span<const backend::Item> items, int64_t decided_at_us,
              std::function<void(absl::Status)> done);

  // Forgets the states of `items` (DEL), then moves the reset epoch; `done` gets how many
  // states existed. Their fences (Sync) stay until they end: the eventual copies they keep
  // leases off are still decided on until their next merge.
  void Reset(std::span<const backend::Item> items, ResetDone done) override;
  // The reset epoch: `<prefix>resets`, a counter every Reset increments (0 before the first).
  void ReadResetEpoch(EpochDone done) override;

  // Leases (consistency: leased; backend/hybrid/leases.h): decide.lua's mode 4 takes up to `want`
  // units of `item`'s state for at most `life_us`, recorded so that spending them before the
  // lease ends can never over-admit (docs/algorithms.md, "Leases"). Times are Redis's.
  // leaky_bucket and sliding_log grant 0; so does a state a merge fenced (Delta::fence_us), of
  // any algorithm and consistency: Grant::fenced, its ends_us its now_us. Unspent units of a
  // window's lease go back with Refund(items, a time inside the lease); a bucket's are not given
  // back. Queued and batched as decisions are (mode 6 takes a batch, each lease as mode 4 would),
  // with a decision's deadline, breaker and errors; a batch's reply that comes too late gives back
  // what its window leases took. (A lease sent on its own, by mode 4: on a cluster without
  // batch_cluster or after a slot moved under its batch, does not: a late one's window units stay
  // counted until the window ends.)
  void Lease(const backend::Item& item, uint64_t want, int64_t life_us, GrantDone done) override;

  // Merges (consistency: eventual; backend/hybrid/eventual.h): decide.lua's mode 5 adds each
  // delta's units to its state as algo::ChargeCompact does, on Redis's clock, reads the state back
  // and, with Delta::fence_us > 0 (a read too), fences it until that long after the merge (a longer
  // fence stays); one call per cluster node and per kMaxSyncBatch deltas (one more where a
  // state's second delta would otherwise start a call: a state's deltas always share one), each
  // sent by EVALSHA (EVAL after NOSCRIPT).
  static constexpr size_t kMaxSyncBatch = 256;
  size_t Sync(std::span<const Delta> deltas, MergedDone done) override;

  // Where the state of (limit, limit_id, key) lives: a string key of its own (field empty) or a
  // field of hash `key`.
  struct Place {
    std::string key;
    std::string field;
  };
  Place StatePlace(const Limit& limit, uint64_t limit_id, std::string_view key) const;
  // The string key the state of (limit_id, key) would have; in the cluster slot of every state
  // of `key`, packed or not.
  std::string RedisKey(uint64_t limit_id, std::string_view key) const;

  Stats GetStats() const;

  // As a Backend: DecideAll (decisions into `out`, which must stay valid until `done` has run;
  // nothing else needs to outlive the call), Refund and Reset. Errors come as Outcome::status.
  void Decide(std::span<const backend::Item> items, int64_t now_us, std::span<Decision> out,
              Backend::Done done) override;
  void Refund(std::span<const backend::Item> items, int64_t decided_at_us, int64_t /*now_us*/,
              RefundDone done) override {
    Refund(items, decided_at_us, std::move(done));
  }

  // Whether decisions on Redis work now (what /readyz, sluice_backend_up and gRPC health
  // report): the client is connected, the breaker is closed and no call failed (timed out or
  // lost its connection) in the last kFailureHold; `detail` says which, and the last failure.
  // A failure holds for a while, whatever succeeds after it: on a cluster with one master hung,
  // the calls to the other masters succeed in between the failing ones. A connection
  // that is up is not enough: a hung Redis keeps its connections while every call times out.
  // Readiness must not wait for traffic that may never come (a load balancer sends none to a
  // backend that is not ready, and an idle instance has no calls to learn from), so while not
  // up, or when no call has succeeded for kIdleProbe, this sends a probe itself (PING, one at a
  // time, through the breaker); the next look at health sees its outcome.
  static constexpr std::chrono::seconds kIdleProbe{1};
  static constexpr std::chrono::seconds kFailureHold{1};
  Health GetHealth() override;
  std::string_view name() const override { return "redis"; }

 private:
  struct Queued;
  // One lease on its own (mode 4, its key declared: it follows MOVED and ASK).
  void SendLease(std::shared_ptr<Queued> lease, bool by_sha);
  struct SyncCall;
  void SendSync(std::shared_ptr<SyncCall> call, bool by_sha);
  std::string EpochKey() const;
  void BumpResetEpoch(size_t deleted, const ResetDone& done);
  struct Call;
  using SteadyTime = MonoTime;  // in the client's clock
  void Run(std::shared_ptr<Call> call, bool commit, SteadyTime deadline,
           std::function<void(absl::StatusOr<DecideResult>)> done);
  // One script call for `items` (one slot). `limits` owns what the items point to; a late
  // reply's refund (commit only) keeps it until then.
  void RunGroup(std::string key, std::vector<DecideItem> items, std::shared_ptr<const void> limits,
                bool commit, bool by_sha, SteadyTime deadline,
                std::function<void(absl::StatusOr<DecideResult>)> done);
  void Record(const absl::Status& status);
  // One refund script call for `items` (all in one slot).
  template <typename RefundCall>
  void SendRefund(std::shared_ptr<RefundCall> call, bool by_sha);
  void RefundGroup(std::vector<DecideItem> items, int64_t decided_at_us,
                   std::function<void(absl::Status)> done);
  // After a cross-slot commit that did not admit: the slots that admitted give their share back.
  // After a dry run across slots denied `call`: records its count_denied items' costs, then
  // runs `then`.
  void RecordCounted(const Call& call, SteadyTime deadline, std::function<void()> then);
  void RefundAdmitted(const Call& call, const std::vector<int64_t>& admitted_at,
                      const std::vector<Decision>& decisions);
  // The store, for the handlers of late replies (Deadline::late), which may come after it is
  // gone; null from its destructor on.
  struct LateGuard {
    explicit LateGuard(RedisStore* store) : store(store) {}
    absl::Mutex mu;
    RedisStore* store ABSL_GUARDED_BY(mu);
  };
  // The reply of a decide call that came after its requests were answered (DeadlineExceeded):
  // each request it admitted gives back what it consumed; nothing if the store is gone.
  static void RefundLate(LateGuard& guard, const Reply& reply,
                         std::span<const std::span<const DecideItem>> requests);
  // A request waiting for a call: a decision, or a lease (`lease_done` set; `items` its one
  // state).
  struct Queued {
    std::vector<Limit> limits;
    std::vector<DecideItem> items;
    SteadyTime deadline;  // DecideAll's (Lease's) time + the client's timeout
    std::function<void(absl::StatusOr<DecideResult>)> done;
    uint64_t want = 0;
    int64_t life_us = 0;
    GrantDone lease_done;
    void Fail(absl::Status status) const;
  };
  struct NodeQueue {
    std::vector<Queued> waiting;
    int in_flight = 0;  // script calls
  };
  // Batching, per node ("" on a single server) and per kind: decisions and leases go in calls of
  // their own.
  struct QueueKey {
    std::string node;
    bool leases = false;
    template <typename H>
    friend H AbslHashValue(H h, const QueueKey& k) {
      return H::combine(std::move(h), k.node, k.leases);
    }
    friend bool operator==(const QueueKey&, const QueueKey&) = default;
  };
  void Enqueue(QueueKey queue, Queued queued);
  std::vector<Queued> TakeBatch(const QueueKey& queue, bool starting)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(batch_mu_);
  void SendBatch(QueueKey queue, std::vector<Queued> batch, bool by_sha);
  // The script call of `batch`: decisions (decide.lua's mode 1 or 3) or leases (mode 6).
  std::string EncodeBatch(const QueueKey& queue, std::string_view sha,
                          std::span<const Queued> batch, size_t* deadline_at) const;
  // Sends a cluster batch's requests again one by one (its slots moved: SlotsMoved).
  void SplitBatch(const QueueKey& queue, std::vector<Queued>& batch);
  // The script call of a batch of leases; what each got, from its reply.
  static std::string EncodeLeaseBatch(std::string_view sha, std::span<const Queued> batch,
                                      size_t* deadline_at);
  static void AnswerLeases(std::span<const Queued> batch, const absl::StatusOr<Reply>& reply);
  // The reply of a lease batch that came after its leases were answered (DeadlineExceeded):
  // each window lease gives back what it took (a bucket's cannot be); nothing if the store is
  // gone.
  static void ReturnLateLeases(LateGuard& guard, const Reply& reply, std::span<const Queued> batch);
  // Whether a cluster batch failed because its slots may no longer (all) be on the node it went
  // to: then its requests go again one by one.
  static bool SlotsMoved(const absl::StatusOr<Reply>& reply);
  // The script's SHA once known, else empty (then the script's text is sent).
  std::string Sha();
  // Asks Redis for the script's SHA (SCRIPT LOAD) and keeps it for EVALSHA.
  void LearnSha(std::string_view key);

  Client* const client_;
  const Options options_;
  Breaker breaker_;
  // decide.lua's SHA1 once SCRIPT LOAD answered. Shared with that call's callback, which may
  // run after the store is gone (nothing waits for it).
  struct ShaCell {
    absl::Mutex mu;
    std::string sha ABSL_GUARDED_BY(mu);
  };
  const std::shared_ptr<ShaCell> sha_ = std::make_shared<ShaCell>();
  const std::shared_ptr<LateGuard> late_guard_;
  std::atomic<uint64_t> leases_{0}, lease_calls_{0};
  std::atomic<uint64_t> sync_calls_{0};
  std::atomic<uint64_t> calls_{0}, script_calls_{0}, errors_{0}, timeouts_{0}, noscript_{0},
      refused_{0}, cross_slot_refunds_{0}, batches_split_{0}, late_refunds_{0};
  // Sends a health probe (PING) unless one is in flight or the breaker refuses.
  void Probe();
  std::atomic<bool> probing_{false};  // a health probe (GetHealth) is in flight
  // Monotonic times (µs, the client's clock) of the last call that succeeded, and of the last
  // that failed (timeout, connection).
  std::atomic<int64_t> last_success_us_{0};
  std::atomic<int64_t> last_failure_us_{0};
  mutable absl::Mutex error_mu_;
  std::string last_error_ ABSL_GUARDED_BY(error_mu_);  // the last call's failure
  absl::Mutex batch_mu_;
  absl::flat_hash_map<QueueKey, NodeQueue> queues_ ABSL_GUARDED_BY(batch_mu_);
  size_t queued_ ABSL_GUARDED_BY(batch_mu_) = 0;  // requests waiting, all nodes
};

}  // namespace sluice::redis

#endif  // SLUICE_BACKEND_REDIS_REDIS_STORE_H_
