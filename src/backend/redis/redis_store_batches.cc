// RedisStore's per-node batches: requests queued per Redis node (per slot's node in a cluster)
// and sent as one script call of at most max_batch requests, split again when the cluster moved
// a slot behind the client's back.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "backend/redis/redis_store.h"
#include "fmt/format.h"

namespace sluice::redis {

void RedisStore::Queued::Fail(absl::Status status) const {
  if (lease_done) return lease_done(std::move(status));
  done(std::move(status));
}

// Takes the next batch of `queue` (at most max_batch), or marks one call fewer in flight when
// the queue is empty (and forgets the queue once nothing is queued or in flight).
std::vector<RedisStore::Queued> RedisStore::TakeBatch(const QueueKey& queue, bool starting) {
  std::vector<Queued> batch;
  auto it = queues_.find(queue);
  if (it == queues_.end()) return batch;
  NodeQueue& q = it->second;
  if (starting) {
    if (q.in_flight >= options_.max_in_flight) return batch;  // goes with a later batch
    ++q.in_flight;
  } else if (q.waiting.empty()) {
    if (--q.in_flight == 0) queues_.erase(it);
    return batch;
  }
  const size_t take = std::min(q.waiting.size(), options_.max_batch);
  batch.assign(std::make_move_iterator(q.waiting.begin()),
               std::make_move_iterator(q.waiting.begin() + static_cast<std::ptrdiff_t>(take)));
  q.waiting.erase(q.waiting.begin(), q.waiting.begin() + static_cast<std::ptrdiff_t>(take));
  queued_ -= take;
  return batch;
}

void RedisStore::Enqueue(QueueKey queue, Queued queued) {
  std::vector<Queued> batch;
  {
    absl::ReleasableMutexLock lock(&batch_mu_);
    if (queued_ >= options_.max_queued) {
      lock.Release();
      return queued.Fail(absl::ResourceExhaustedError(
          fmt::format("redis: {} requests already waiting", options_.max_queued)));
    }
    queues_[queue].waiting.push_back(std::move(queued));
    ++queued_;
    batch = TakeBatch(queue, /*starting=*/true);
  }
  if (!batch.empty()) SendBatch(std::move(queue), std::move(batch), /*by_sha=*/true);
}

void RedisStore::SendBatch(QueueKey queue, std::vector<Queued> batch, bool by_sha) {
  // Requests whose deadline passed while they waited are answered now, not sent: the call's
  // deadline is the earliest of those left (the first, usually: the queue is in order).
  const auto now = MonotonicNow(client_->clock());
  std::vector<Queued> late;
  for (size_t i = 0; i < batch.size();) {
    if (batch[i].deadline > now) {
      ++i;
      continue;
    }
    late.push_back(std::move(batch[i]));
    batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(i));
  }
  if (batch.empty()) {
    // Nothing to send: this call slot is free again, for whatever waits.
    std::vector<Queued> next;
    {
      absl::MutexLock lock(&batch_mu_);
      next = TakeBatch(queue, /*starting=*/false);
    }
    if (!next.empty()) SendBatch(queue, std::move(next), /*by_sha=*/true);
  }
  for (Queued& q : late) {
    q.Fail(absl::DeadlineExceededError("redis: no reply in time (the request waited for a call)"));
  }
  if (batch.empty()) return;
  Deadline call_deadline{.at = batch.front().deadline};
  for (const Queued& q : batch) call_deadline.at = std::min(call_deadline.at, q.deadline);
  const std::string sha = by_sha ? Sha() : std::string();
  std::string command = EncodeBatch(queue, sha, batch, &call_deadline.redis_time_at);
  const bool sent_text = sha.empty();
  const std::string route = batch.front().items.front().key;
  // Shared with the late-reply handler: one of the two runs.
  auto sent = std::make_shared<std::vector<Queued>>(std::move(batch));
  call_deadline.late = [guard = late_guard_, sent, leases = queue.leases](const Reply& reply) {
    if (leases) return ReturnLateLeases(*guard, reply, *sent);
    std::vector<std::span<const DecideItem>> requests;
    for (const Queued& q : *sent) requests.emplace_back(q.items);
    RefundLate(*guard, reply, requests);
  };
  script_calls_.fetch_add(1, std::memory_order_relaxed);
  if (queue.leases) lease_calls_.fetch_add(1, std::memory_order_relaxed);
  client_->Send(
      route, std::move(command),
      [this, queue = std::move(queue), route, sent,
       sent_text](absl::StatusOr<Reply> reply) mutable {
        std::vector<Queued>& batch = *sent;
        if (reply.ok() && reply->IsError() && reply->str.starts_with("NOSCRIPT") && !sent_text) {
          noscript_.fetch_add(1, std::memory_order_relaxed);
          return SendBatch(std::move(queue), std::move(batch), /*by_sha=*/false);
        }
        if (reply.ok() && sent_text) LearnSha(route);
        // The next batch first, if requests waited meanwhile: once the last of this
        // batch's callbacks has run, the store may be gone (its owner was waiting for
        // them), so nothing below them may touch it.
        std::vector<Queued> next;
        {
          absl::MutexLock lock(&batch_mu_);
          next = TakeBatch(queue, /*starting=*/false);
        }
        if (!next.empty()) SendBatch(queue, std::move(next), /*by_sha=*/true);
        if (client_->cluster() && SlotsMoved(reply)) return SplitBatch(queue, batch);
        if (queue.leases) return AnswerLeases(batch, reply);
        std::vector<std::span<const DecideItem>> requests;
        for (const Queued& q : batch) requests.emplace_back(q.items);
        absl::StatusOr<std::vector<DecideResult>> results =
            reply.ok() ? ParseDecideReply(*reply, requests)
                       : absl::StatusOr<std::vector<DecideResult>>(reply.status());
        for (size_t i = 0; i < batch.size(); ++i) {
          if (results.ok()) {
            batch[i].done(std::move((*results)[i]));
          } else {
            batch[i].done(results.status());
          }
        }
      },
      std::move(call_deadline));
}

std::string RedisStore::EncodeBatch(const QueueKey& queue, std::string_view sha,
                                    std::span<const Queued> batch, size_t* deadline_at) const {
  // On a cluster the call goes to the node of its first key; the others were on that node too
  // when queued. Their slots may differ: the keys go as arguments (allow-cross-slot-keys; a lease
  // batch always passes them so).
  if (queue.leases) return EncodeLeaseBatch(sha, batch, deadline_at);
  std::vector<std::span<const DecideItem>> requests;
  requests.reserve(batch.size());
  for (const Queued& q : batch) requests.emplace_back(q.items);
  return EncodeDecide(sha, requests, /*commit=*/true, /*keys_in_argv=*/client_->cluster(),
                      deadline_at);
}

void RedisStore::SplitBatch(const QueueKey& queue, std::vector<Queued>& batch) {
  // The slot map changed under the batch: each request goes on its own, with its keys declared,
  // the way that follows MOVED and ASK. The refused batch wrote nothing (Redis checks a key's
  // node when the script first touches it, and decide.lua reads every key of a batch before it
  // writes any), so no request counts twice.
  batches_split_.fetch_add(1, std::memory_order_relaxed);
  for (Queued& q : batch) {
    auto one = std::make_shared<Queued>(std::move(q));
    if (queue.leases) {
      SendLease(std::move(one), /*by_sha=*/true);
      continue;
    }
    std::string key = one->items.front().key;
    RunGroup(std::move(key), one->items, one, /*commit=*/true, /*by_sha=*/true, one->deadline,
             [one](absl::StatusOr<DecideResult> r) { one->done(std::move(r)); });
  }
}

bool RedisStore::SlotsMoved(const absl::StatusOr<Reply>& reply) {
  if (!reply.ok()) return absl::StrContains(reply.status().message(), "redirects");
  // Any error reply: a key of a slot the node no longer serves ("non local key"), a node that
  // became a replica (READONLY: with no declared keys there is no MOVED to learn the new
  // master from), a cluster in the middle of a change. Request by request, the client follows.
  return reply->IsError();
}

}  // namespace sluice::redis
