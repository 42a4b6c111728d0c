// RedisStore's decisions (redis_store.h): one request's way through batching, slots, the two
// steps across slots, NOSCRIPT, deadlines and late replies, and refunds, in one file because
// they share its queue and call state (a little over 600 lines). Reset, the reset epoch and
// leases are in redis_store_admin.cc.

#include "backend/redis/redis_store.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "fmt/format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::redis {

// One request: its limits (copied, so the caller's config may go away) and items by slot.
struct RedisStore::Call {
  std::vector<Limit> limits;
  std::vector<DecideItem> items;
  std::vector<std::vector<size_t>> groups;  // indexes into items, one group per slot
};

RedisStore::RedisStore(Client* client, Options options)
    : client_(client),
      options_(std::move(options)),
      breaker_(options_.breaker, &client->clock()),
      late_guard_(std::make_shared<LateGuard>(this)) {}

RedisStore::~RedisStore() {
  absl::MutexLock lock(&late_guard_->mu);
  late_guard_->store = nullptr;
}

void RedisStore::Refund(std::span<const backend::Item> items, int64_t decided_at_us,
                        std::function<void(absl::Status)> done) {
  if (items.empty()) return done(absl::OkStatus());
  // One call per slot (every item, on a single server).
  absl::flat_hash_map<uint16_t, std::vector<DecideItem>> by_slot;
  std::vector<Limit> limits(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    limits[i] = *items[i].limit;
    Place place = StatePlace(limits[i], items[i].limit_id, items[i].key);
    const uint16_t slot = client_->cluster() ? KeySlot(place.key) : 0;
    by_slot[slot].push_back(
        {&limits[i], std::move(place.key), items[i].cost, false, false, std::move(place.field)});
  }
  struct Gather {
    Gather(size_t waiting, std::function<void(absl::Status)> done)
        : waiting(waiting), done(std::move(done)) {}
    absl::Mutex mu;
    size_t waiting ABSL_GUARDED_BY(mu);
    absl::Status status ABSL_GUARDED_BY(mu);
    const std::function<void(absl::Status)> done;  // by the last group, once none is left
  };
  auto gather = std::make_shared<Gather>(by_slot.size(), std::move(done));
  for (auto& [slot, group] : by_slot) {
    RefundGroup(std::move(group), decided_at_us, [gather](absl::Status status) {
      absl::Status last;
      {
        absl::MutexLock lock(&gather->mu);
        if (!status.ok()) gather->status = status;
        if (--gather->waiting > 0) return;
        last = gather->status;
      }
      gather->done(last);
    });
  }
}

void RedisStore::RefundGroup(std::vector<DecideItem> items, int64_t decided_at_us,
                             std::function<void(absl::Status)> done) {
  // By SHA (leases give units back often), again as text after NOSCRIPT: the call keeps its own
  // copy of the limits for that.
  struct Call {
    std::vector<Limit> limits;
    std::vector<DecideItem> items;
    int64_t at;
    std::function<void(absl::Status)> done;
  };
  auto call = std::make_shared<Call>();
  call->limits.reserve(items.size());
  for (DecideItem& item : items) {
    call->limits.push_back(*item.limit);
    item.limit = &call->limits.back();
  }
  call->items = std::move(items);
  call->at = decided_at_us;
  call->done = std::move(done);
  SendRefund(std::move(call), /*by_sha=*/true);
}

template <typename RefundCall>
void RedisStore::SendRefund(std::shared_ptr<RefundCall> call, bool by_sha) {
  const std::string sha = by_sha ? Sha() : std::string();
  const std::string key = call->items.front().key;
  script_calls_.fetch_add(1, std::memory_order_relaxed);
  client_->Send(
      key, EncodeRefund(sha, call->items, call->at),
      [this, call, sha](absl::StatusOr<Reply> reply) {
        if (!reply.ok()) return call->done(reply.status());
        if (reply->IsError()) {
          if (!sha.empty() && reply->str.starts_with("NOSCRIPT")) {
            noscript_.fetch_add(1, std::memory_order_relaxed);
            return SendRefund(call, /*by_sha=*/false);
          }
          return call->done(absl::InternalError(fmt::format("refund script: {}", reply->str)));
        }
        if (sha.empty()) LearnSha(call->items.front().key);
        call->done(absl::OkStatus());
      });
}

void RedisStore::Decide(std::span<const backend::Item> items, int64_t /*now_us*/,
                        std::span<Decision> out, Backend::Done done) {
  // Redis decides on its own clock.
  DecideAll(items, [out, done = std::move(done)](absl::StatusOr<DecideResult> result) {
    backend::Outcome outcome;
    if (!result.ok()) {
      outcome.status = result.status();
    } else if (result->decisions.size() != out.size()) {
      outcome.status = absl::InternalError("redis: a reply of the wrong length");
    } else {
      std::copy(result->decisions.begin(), result->decisions.end(), out.begin());
      outcome.allowed = result->allowed;
      outcome.decided_at_us = result->now_us;
    }
    done(outcome);
  });
}

namespace {

// Appends `value` in lower-case hex, at least `width` digits (zero-padded). (Written out: a key
// is made for every state of every request, and this is several times cheaper than fmt.)
void AppendHex(std::string* out, uint64_t value, int width) {
  char digits[16];
  int n = 0;
  do {
    digits[15 - n++] = "0123456789abcdef"[value & 0xf];
    value >>= 4;
  } while (value != 0);
  while (n < width) digits[15 - n++] = '0';
  out->append(digits + 16 - n, static_cast<size_t>(n));
}

}  // namespace

std::string RedisStore::RedisKey(uint64_t limit_id, std::string_view key) const {
  // The descriptor key can be long (values up to http.max_key_bytes): its hash keeps Redis keys
  // short, and as the hash tag (or the bucket's) it puts every limit of one descriptor in one slot.
  const uint64_t hash = XXH3_64bits(key.data(), key.size());
  std::string out;
  out.reserve(options_.key_prefix.size() + 40);
  out += options_.key_prefix;
  out += '{';
  if (options_.buckets == 0) {  // prefix{hash}limit
    AppendHex(&out, hash, 16);
    out += '}';
  } else {  // prefix{bucket}hash:limit
    AppendHex(&out, hash % options_.buckets, 1);
    out += '}';
    AppendHex(&out, hash, 16);
    out += ':';
  }
  AppendHex(&out, limit_id, 1);
  return out;
}

RedisStore::Place RedisStore::StatePlace(const Limit& limit, uint64_t limit_id,
                                         std::string_view key) const {
  if (options_.buckets == 0 || limit.algorithm == Algorithm::kSlidingLog) {
    return {RedisKey(limit_id, key), {}};
  }
  const uint64_t hash = XXH3_64bits(key.data(), key.size());
  std::string field(16, '\0');
  std::memcpy(field.data(), &hash, 8);
  std::memcpy(field.data() + 8, &limit_id, 8);
  std::string bucket = options_.key_prefix;
  bucket += '{';
  AppendHex(&bucket, hash % options_.buckets, 1);
  bucket += '}';
  return {std::move(bucket), std::move(field)};
}

void RedisStore::DecideAll(std::span<const backend::Item> items, Done done) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  if (!breaker_.Allow()) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return done(absl::UnavailableError("redis: circuit breaker open after repeated failures"));
  }
  // The items with their Redis places; whether they all share one slot (always, on a single
  // server).
  const bool cluster = client_->cluster();
  Queued queued;
  // One deadline for the whole decision: time in the queue, a cross-slot request's two steps,
  // redirections and a NOSCRIPT repeat all count against it (each call carries it to Redis too,
  // so a call that runs late there changes nothing: decide.lua).
  queued.deadline = MonotonicNow(client_->clock()) +
                    std::chrono::duration_cast<SteadyTime::duration>(client_->timeout());
  queued.limits.reserve(items.size());
  queued.items.reserve(items.size());
  for (const auto& it : items) queued.limits.push_back(*it.limit);
  bool one_slot = true;
  uint16_t first_slot = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Place place = StatePlace(queued.limits[i], items[i].limit_id, items[i].key);
    queued.items.push_back({&queued.limits[i], std::move(place.key), items[i].cost,
                            items[i].count_denied, items[i].shadow, std::move(place.field)});
    if (!cluster) continue;
    const uint16_t slot = KeySlot(queued.items[i].key);
    if (i == 0) first_slot = slot;
    if (slot != first_slot) one_slot = false;
  }
  auto finish = [this, done = std::move(done)](absl::StatusOr<DecideResult> result) {
    Record(result.status());
    done(std::move(result));
  };
  // One slot: batched with other requests for the same node.
  if (one_slot && (!cluster || options_.batch_cluster)) {
    queued.done = std::move(finish);
    std::string node = cluster ? client_->NodeFor(queued.items.front().key) : "";
    return Enqueue({.node = std::move(node), .leases = false}, std::move(queued));
  }
  // Otherwise grouped by slot (a moved vector keeps its elements, so the items' limit pointers
  // stay valid).
  const SteadyTime deadline = queued.deadline;
  auto call = std::make_shared<Call>();
  call->limits = std::move(queued.limits);
  call->items = std::move(queued.items);
  absl::flat_hash_map<uint16_t, size_t> group_of_slot;
  for (size_t i = 0; i < call->items.size(); ++i) {
    auto [it, fresh] = group_of_slot.try_emplace(KeySlot(call->items[i].key), call->groups.size());
    if (fresh) call->groups.emplace_back();
    call->groups[it->second].push_back(i);
  }
  if (call->groups.size() <= 1) {
    return Run(std::move(call), /*commit=*/true, deadline, std::move(finish));
  }
  // Across slots: evaluate everywhere first; decide for real only if every slot would admit.
  Run(call, /*commit=*/false, deadline,
      [this, call, deadline, finish](absl::StatusOr<DecideResult> dry) mutable {
        if (!dry.ok() || !dry->allowed) return finish(std::move(dry));
        Run(std::move(call), /*commit=*/true, deadline, std::move(finish));
      });
}

void RedisStore::Run(std::shared_ptr<Call> call, bool commit, SteadyTime deadline,
                     std::function<void(absl::StatusOr<DecideResult>)> done) {
  struct Gather {
    Gather(size_t groups, size_t items, std::function<void(absl::StatusOr<DecideResult>)> done)
        : left(groups), admitted_at(groups, -1), done(std::move(done)) {
      result.allowed = true;
      result.decisions.resize(items);
    }
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu);
    absl::Status error ABSL_GUARDED_BY(mu);
    DecideResult result ABSL_GUARDED_BY(mu);
    // Per group: its decision time when it admitted, else -1.
    std::vector<int64_t> admitted_at ABSL_GUARDED_BY(mu);
    const std::function<void(absl::StatusOr<DecideResult>)> done;  // by the last group
  };
  auto gather = std::make_shared<Gather>(call->groups.size(), call->items.size(), std::move(done));
  for (size_t g = 0; g < call->groups.size(); ++g) {
    std::vector<DecideItem> items;
    for (size_t i : call->groups[g]) items.push_back(call->items[i]);
    std::string key = items.front().key;
    RunGroup(std::move(key), std::move(items), call, commit, /*by_sha=*/true, deadline,
             [this, call, gather, g, commit](absl::StatusOr<DecideResult> r) {
               absl::Status error;
               DecideResult result;
               std::vector<int64_t> admitted_at;
               {
                 absl::MutexLock lock(&gather->mu);
                 if (!r.ok()) {
                   if (gather->error.ok()) gather->error = r.status();
                 } else {
                   gather->result.now_us = std::max(gather->result.now_us, r->now_us);
                   gather->result.allowed = gather->result.allowed && r->allowed;
                   if (r->allowed) gather->admitted_at[g] = r->now_us;
                   for (size_t j = 0; j < call->groups[g].size(); ++j) {
                     gather->result.decisions[call->groups[g][j]] = r->decisions[j];
                   }
                 }
                 if (--gather->left > 0) return;
                 // The last group: nothing else touches the gather from here on.
                 error = std::move(gather->error);
                 result = std::move(gather->result);
                 admitted_at = std::move(gather->admitted_at);
               }
               // A slot refused (or failed) after others consumed: give theirs back, so a
               // request across slots is all-or-nothing in the end (it may under-admit
               // meanwhile, never over-admit).
               if (commit && (!error.ok() || !result.allowed)) {
                 RefundAdmitted(*call, admitted_at, result.decisions);
               }
               if (!error.ok()) return gather->done(error);
               gather->done(std::move(result));
             });
  }
}

void RedisStore::RefundAdmitted(const Call& call, const std::vector<int64_t>& admitted_at,
                                const std::vector<Decision>& decisions) {
  for (size_t g = 0; g < call.groups.size(); ++g) {
    if (admitted_at[g] < 0) continue;
    std::vector<DecideItem> items;
    for (size_t i : call.groups[g]) {
      if (decisions[i].allowed && call.items[i].cost > 0) items.push_back(call.items[i]);
    }
    if (items.empty()) continue;
    cross_slot_refunds_.fetch_add(1, std::memory_order_relaxed);
    RefundGroup(std::move(items), admitted_at[g], [](absl::Status) {});
  }
}

void RedisStore::RefundLate(LateGuard& guard, const Reply& reply,
                            std::span<const std::span<const DecideItem>> requests) {
  absl::MutexLock lock(&guard.mu);
  RedisStore* store = guard.store;
  if (store == nullptr) return;
  auto results = ParseDecideReply(reply, requests);
  if (!results.ok()) return;  // it ran past its deadline (and changed nothing), or failed
  for (size_t r = 0; r < requests.size(); ++r) {
    const DecideResult& result = (*results)[r];
    if (!result.allowed) continue;
    std::vector<DecideItem> items;
    for (size_t i = 0; i < requests[r].size(); ++i) {
      if (result.decisions[i].allowed && requests[r][i].cost > 0) items.push_back(requests[r][i]);
    }
    if (items.empty()) continue;
    store->late_refunds_.fetch_add(1, std::memory_order_relaxed);
    store->RefundGroup(std::move(items), result.now_us, [](absl::Status) {});
  }
}

void RedisStore::RunGroup(std::string key, std::vector<DecideItem> items,
                          std::shared_ptr<const void> limits, bool commit, bool by_sha,
                          SteadyTime deadline,
                          std::function<void(absl::StatusOr<DecideResult>)> done) {
  const std::string sha = by_sha ? Sha() : std::string();
  Deadline call_deadline{.at = deadline};
  std::string command = EncodeDecide(sha, items, commit, &call_deadline.redis_time_at);
  if (commit) {
    call_deadline.late = [guard = late_guard_, items, limits](const Reply& reply) {
      const std::span<const DecideItem> one[] = {items};
      RefundLate(*guard, reply, one);
    };
  }
  const bool sent_text = sha.empty();
  script_calls_.fetch_add(1, std::memory_order_relaxed);
  client_->Send(
      key, std::move(command),
      [this, key, items = std::move(items), limits, commit, sent_text, deadline,
       done = std::move(done)](absl::StatusOr<Reply> reply) mutable {
        if (!reply.ok()) return done(reply.status());
        if (reply->IsError() && reply->str.starts_with("NOSCRIPT") && !sent_text) {
          // The node does not have it (restart, SCRIPT FLUSH, failover): send the
          // text, which runs it and loads it again.
          noscript_.fetch_add(1, std::memory_order_relaxed);
          return RunGroup(std::move(key), std::move(items), std::move(limits), commit,
                          /*by_sha=*/false, deadline, std::move(done));
        }
        if (sent_text) LearnSha(key);  // the SHA, for next time
        done(ParseDecideReply(*reply, items));
      },
      std::move(call_deadline));
}

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

std::string RedisStore::Sha() {
  absl::MutexLock lock(&sha_->mu);
  return sha_->sha;
}

void RedisStore::LearnSha(std::string_view key) {
  std::string load;
  AppendCommand(&load, {"SCRIPT", "LOAD", DecideScript()});
  client_->Send(key, std::move(load), [cell = sha_](absl::StatusOr<Reply> r) {
    if (!r.ok() || r->type != Reply::Type::kString) return;
    absl::MutexLock lock(&cell->mu);
    cell->sha = r->str;
  });
}

void RedisStore::Record(const absl::Status& status) {
  if (status.ok()) {
    last_success_us_.store(client_->clock().MonotonicMicros(), std::memory_order_relaxed);
    return breaker_.Succeeded();
  }
  {
    absl::MutexLock lock(&error_mu_);
    last_error_ = std::string(status.message());
  }
  errors_.fetch_add(1, std::memory_order_relaxed);
  if (status.code() == absl::StatusCode::kDeadlineExceeded)
    timeouts_.fetch_add(1, std::memory_order_relaxed);
  if (status.code() == absl::StatusCode::kUnavailable ||
      status.code() == absl::StatusCode::kDeadlineExceeded) {
    last_failure_us_.store(client_->clock().MonotonicMicros(), std::memory_order_relaxed);
    breaker_.Failed();
  } else {
    breaker_.Succeeded();  // Redis answered: the connection is fine
  }
}

RedisStore::Health RedisStore::GetHealth() {
  if (!client_->Ready()) return {false, client_->last_error()};
  const int64_t now_us = client_->clock().MonotonicMicros();
  const std::chrono::microseconds since_failure(now_us -
                                                last_failure_us_.load(std::memory_order_relaxed));
  if (breaker_.Healthy() && since_failure > kFailureHold) {
    const std::chrono::microseconds since_success(now_us -
                                                  last_success_us_.load(std::memory_order_relaxed));
    if (since_success > kIdleProbe) Probe();  // idle: nothing else would notice a hung Redis
    return {true, "connected"};
  }
  Probe();  // no request may come to probe (a backend that is not ready gets no traffic)
  const Breaker::State state = breaker_.state();
  std::string last;
  {
    absl::MutexLock lock(&error_mu_);
    last = last_error_;
  }
  return {
      false,
      state == Breaker::State::kClosed
          ? fmt::format(
                "connected, but a call failed {} ms ago: {}",
                std::chrono::duration_cast<std::chrono::milliseconds>(since_failure).count(), last)
          : fmt::format("circuit breaker {} after repeated failures (last: {})",
                        Breaker::Name(state), last)};
}

void RedisStore::Probe() {
  if (probing_.exchange(true)) return;
  if (!breaker_.Allow()) {
    probing_ = false;
    return;
  }
  std::string ping;
  AppendCommand(&ping, {"PING"});
  client_->Send("", std::move(ping), [this](absl::StatusOr<Reply> reply) {
    if (reply.ok() && !reply->IsError()) {
      Record(absl::OkStatus());
    } else {
      last_failure_us_.store(client_->clock().MonotonicMicros(), std::memory_order_relaxed);
      absl::MutexLock lock(&error_mu_);
      last_error_ = reply.ok() ? reply->str : std::string(reply.status().message());
    }
    if (!reply.ok() || reply->IsError()) breaker_.Failed();
    probing_ = false;
  });
}

RedisStore::Stats RedisStore::GetStats() const {
  return Stats{.calls = calls_.load(),
               .script_calls = script_calls_.load(),
               .errors = errors_.load(),
               .timeouts = timeouts_.load(),
               .noscript_reloads = noscript_.load(),
               .refused = refused_.load(),
               .breaker = breaker_.state(),
               .breaker_opened = breaker_.opened(),
               .cross_slot_refunds = cross_slot_refunds_.load(),
               .batches_split = batches_split_.load(),
               .late_refunds = late_refunds_.load(),
               .leases = leases_.load(),
               .lease_calls = lease_calls_.load(),
               .sync_calls = sync_calls_.load()};
}

}  // namespace sluice::redis
