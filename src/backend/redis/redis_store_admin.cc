// RedisStore's admin side: Reset (DEL of the states) and the reset epoch, a counter next to the
// states that every Reset moves and every instance's over-limit cache reads; and leases
// (consistency: leased), taken by decide.lua's mode 4 (6 for a batch); and merges (consistency:
// eventual), mode 5, which may fence their states against leases.

#include <algorithm>
#include <deque>
#include <memory>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "backend/redis/redis_store.h"
#include "fmt/format.h"

namespace sluice::redis {

void RedisStore::Reset(std::span<const backend::Item> items, ResetDone done) {
  if (items.empty()) return done(size_t{0});
  struct Gather {
    Gather(size_t waiting, ResetDone done) : waiting(waiting), done(std::move(done)) {}
    absl::Mutex mu;
    size_t waiting ABSL_GUARDED_BY(mu);
    size_t deleted ABSL_GUARDED_BY(mu) = 0;
    absl::Status error ABSL_GUARDED_BY(mu);
    const ResetDone done;  // by the last reply, once none is left
  };
  auto gather = std::make_shared<Gather>(items.size(), std::move(done));
  for (const auto& item : items) {  // one command per state: on a cluster they may be in any slot
    Place place = StatePlace(*item.limit, item.limit_id, item.key);
    std::string command;
    // A penalized limit's penalty state goes too (decide.lua, "Penalties"): a reset lifts a block.
    const bool penalized = item.limit->penalty.has_value();
    if (place.field.empty()) {
      if (penalized) {
        AppendCommand(&command, {"DEL", place.key, place.key + ":p"});
      } else {
        AppendCommand(&command, {"DEL", place.key});
      }
    } else {
      if (penalized) {
        std::string lift;
        AppendCommand(&lift, {"DEL", absl::StrCat(place.key, ":p:", place.field)});
        client_->Send(place.key, std::move(lift), [](absl::StatusOr<Reply>) {});
      }
      AppendCommand(&command, {"HDEL", place.key, place.field});
    }
    client_->Send(place.key, std::move(command), [this, gather](absl::StatusOr<Reply> reply) {
      absl::Status error;
      size_t deleted;
      {
        absl::MutexLock lock(&gather->mu);
        if (!reply.ok()) {
          gather->error = reply.status();
        } else if (reply->IsError()) {
          gather->error = absl::InternalError(reply->str);
        } else {
          gather->deleted += static_cast<size_t>(std::max<int64_t>(0, reply->integer));
        }
        if (--gather->waiting > 0) return;
        error = gather->error;
        deleted = gather->deleted;
      }
      if (!error.ok()) return gather->done(error);
      BumpResetEpoch(deleted, gather->done);
    });
  }
}

// The reset epoch is a counter key of its own; Reset moves it once the states are gone.
std::string RedisStore::EpochKey() const { return options_.key_prefix + "resets"; }

void RedisStore::ReadResetEpoch(EpochDone done) {
  // A Redis that lost its states (restarted empty, flushed, failed over to a replica that had
  // not caught up) must read as a new epoch too, or the instances' copies of its states (held
  // denials, leases) would outlive the states. So a missing key starts at a random value, set
  // by whichever reader comes first (SET NX GET, Redis 7.0): the next start differs from the
  // last, and resets count up from it (INCR).
  std::random_device random;
  const int64_t start = static_cast<int64_t>(((uint64_t{random()} << 32) | random()) >> 2);
  std::string command;
  AppendCommand(&command, {"SET", EpochKey(), absl::StrCat(start), "NX", "GET"});
  client_->Send(
      EpochKey(), std::move(command), [start, done = std::move(done)](absl::StatusOr<Reply> reply) {
        if (!reply.ok()) return done(reply.status());
        if (reply->IsError()) return done(absl::InternalError(reply->str));
        int64_t epoch = start;  // no key: ours is the start
        if (reply->type == Reply::Type::kString && !absl::SimpleAtoi(reply->str, &epoch)) {
          return done(absl::InternalError("reset epoch is not a number"));
        }
        done(epoch);
      });
}

void RedisStore::BumpResetEpoch(size_t deleted, const ResetDone& done) {
  std::string command;
  AppendCommand(&command, {"INCR", EpochKey()});
  client_->Send(EpochKey(), std::move(command), [deleted, done](absl::StatusOr<Reply> reply) {
    if (!reply.ok()) return done(reply.status());
    if (reply->IsError()) return done(absl::InternalError(reply->str));
    done(deleted);
  });
}

void RedisStore::Lease(const backend::Item& item, uint64_t want, int64_t life_us, GrantDone done) {
  leases_.fetch_add(1, std::memory_order_relaxed);
  if (!breaker_.Allow()) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return done(absl::UnavailableError("redis: circuit breaker open after repeated failures"));
  }
  // Queued as a decision is, with a decision's deadline, batched with the other leases headed to
  // its node.
  Queued lease;
  lease.deadline = MonotonicNow(client_->clock()) +
                   std::chrono::duration_cast<SteadyTime::duration>(client_->timeout());
  lease.limits.push_back(*item.limit);
  Place place = StatePlace(lease.limits[0], item.limit_id, item.key);
  lease.items.push_back(
      {&lease.limits[0], std::move(place.key), 0, false, false, std::move(place.field)});
  lease.want = want;
  lease.life_us = life_us;
  lease.lease_done = [this, done = std::move(done)](absl::StatusOr<Grant> grant) {
    Record(grant.status());
    done(std::move(grant));
  };
  const bool cluster = client_->cluster();
  if (cluster && !options_.batch_cluster) {
    return SendLease(std::make_shared<Queued>(std::move(lease)), /*by_sha=*/true);
  }
  std::string node = cluster ? client_->NodeFor(lease.items[0].key) : "";
  Enqueue({.node = std::move(node), .leases = true}, std::move(lease));
}

std::string RedisStore::EncodeLeaseBatch(std::string_view sha, std::span<const Queued> batch,
                                         size_t* deadline_at) {
  std::vector<LeaseAsk> asks;
  asks.reserve(batch.size());
  for (const Queued& q : batch) {
    asks.push_back({.item = q.items[0], .want = q.want, .life_us = q.life_us});
  }
  return EncodeLeases(sha, asks, deadline_at);
}

void RedisStore::AnswerLeases(std::span<const Queued> batch, const absl::StatusOr<Reply>& reply) {
  absl::StatusOr<LeaseReply> parsed = reply.ok() ? ParseLeaseReply(*reply, batch.size())
                                                 : absl::StatusOr<LeaseReply>(reply.status());
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!parsed.ok()) {
      batch[i].lease_done(parsed.status());
      continue;
    }
    const LeaseGrant& g = parsed->grants[i];
    batch[i].lease_done(Grant{.granted = g.granted,
                              .now_us = parsed->now_us,
                              .ends_us = g.fenced ? parsed->now_us : g.ends_us,
                              .left = g.left,
                              .fenced = g.fenced});
  }
}

void RedisStore::ReturnLateLeases(LateGuard& guard, const Reply& reply,
                                  std::span<const Queued> batch) {
  absl::MutexLock lock(&guard.mu);
  RedisStore* store = guard.store;
  if (store == nullptr) return;
  auto parsed = ParseLeaseReply(reply, batch.size());
  if (!parsed.ok()) return;  // it ran past its deadline (and took nothing), or failed
  for (size_t i = 0; i < batch.size(); ++i) {
    const Algorithm a = batch[i].limits[0].algorithm;
    const uint64_t granted = parsed->grants[i].granted;
    if (granted == 0 || a == Algorithm::kTokenBucket) continue;  // (unsafe for a bucket)
    DecideItem unspent = batch[i].items[0];
    unspent.cost = granted;
    store->late_refunds_.fetch_add(1, std::memory_order_relaxed);
    store->RefundGroup({std::move(unspent)}, parsed->now_us, [](absl::Status) {});
  }
}

void RedisStore::SendLease(std::shared_ptr<Queued> lease, bool by_sha) {
  const DecideItem& item = lease->items[0];
  const std::string sha = by_sha ? Sha() : std::string();
  script_calls_.fetch_add(1, std::memory_order_relaxed);
  lease_calls_.fetch_add(1, std::memory_order_relaxed);
  client_->Send(
      item.key, EncodeLease(sha, item, lease->want, lease->life_us),
      [this, lease, sha](absl::StatusOr<Reply> reply) {
        if (reply.ok() && !sha.empty() && reply->IsError() && reply->str.starts_with("NOSCRIPT")) {
          noscript_.fetch_add(1, std::memory_order_relaxed);
          return SendLease(lease, /*by_sha=*/false);
        }
        if (reply.ok() && !reply->IsError() && sha.empty()) {
          LearnSha(lease->items[0].key);  // the SHA, for next time
        }
        AnswerLeases({lease.get(), 1}, reply);  // mode 4's reply is one lease's of mode 6
      },
      Deadline{.at = lease->deadline});
}

namespace {

// Whether a merge call's item is of the state at `place`.
bool SameState(const DecideItem& item, const RedisStore::Place& place) {
  return item.key == place.key && item.field == place.field;
}

}  // namespace

// What one merge call needs until its reply (a NOSCRIPT answer sends it again).
struct RedisStore::SyncCall {
  std::deque<Limit> limits;     // what the items point to (never moved as it grows)
  std::vector<SyncItem> items;  // their keys are the Redis keys
  std::vector<size_t> deltas;   // Sync's indexes
  std::string route;            // a key of the node the call goes to
  MergedDone done;
};

size_t RedisStore::Sync(std::span<const Delta> deltas, MergedDone done) {
  // By node (one on a single server), at most kMaxSyncBatch deltas per call; but a state's
  // deltas (adjacent: a copy's two windows) always share a call, which merges them in order. Split
  // over two calls on two connections, the later delta's call could run first and its reply, whose
  // state lacks the earlier delta, come back last: Eventual::Merge would keep that state.
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<SyncCall>>> by_node;
  std::vector<std::shared_ptr<SyncCall>> calls;
  for (size_t i = 0; i < deltas.size(); ++i) {
    const backend::Item& item = deltas[i].item;
    Place place = StatePlace(*item.limit, item.limit_id, item.key);
    auto& node = by_node[client_->cluster() ? client_->NodeFor(place.key) : std::string()];
    const bool full = !node.empty() && node.back()->items.size() >= kMaxSyncBatch;
    if (node.empty() || (full && !SameState(node.back()->items.back().item, place))) {
      auto call = std::make_shared<SyncCall>();
      call->route = place.key;
      call->done = done;
      node.push_back(call);
      calls.push_back(call);
    }
    SyncCall& call = *node.back();
    call.limits.push_back(*item.limit);
    call.items.push_back({.item = {&call.limits.back(), std::move(place.key), 0, false, false,
                                   std::move(place.field)},
                          .units = deltas[i].units,
                          .counted_at_us = deltas[i].counted_at_us,
                          .fence_us = deltas[i].fence_us});
    call.deltas.push_back(i);
  }
  for (auto& call : calls) SendSync(std::move(call), /*by_sha=*/true);
  return calls.size();
}

void RedisStore::SendSync(std::shared_ptr<SyncCall> call, bool by_sha) {
  const std::string sha = by_sha ? Sha() : std::string();
  script_calls_.fetch_add(1, std::memory_order_relaxed);
  sync_calls_.fetch_add(1, std::memory_order_relaxed);
  client_->Send(call->route, EncodeSync(sha, call->items),
                [this, call, by_sha, sha](absl::StatusOr<Reply> reply) {
                  Merged merged;
                  merged.deltas = call->deltas;
                  if (!reply.ok()) {
                    merged.status = reply.status();
                    return call->done(std::move(merged));
                  }
                  if (by_sha && reply->IsError() && reply->str.starts_with("NOSCRIPT")) {
                    noscript_.fetch_add(1, std::memory_order_relaxed);
                    return SendSync(call, /*by_sha=*/false);
                  }
                  auto parsed = ParseSyncReply(*reply, call->items);
                  if (!parsed.ok()) {
                    merged.status = parsed.status();
                    return call->done(std::move(merged));
                  }
                  if (sha.empty()) LearnSha(call->route);  // the SHA, for next time
                  merged.now_us = parsed->now_us;
                  merged.states = std::move(parsed->states);
                  call->done(std::move(merged));
                });
}

}  // namespace sluice::redis
