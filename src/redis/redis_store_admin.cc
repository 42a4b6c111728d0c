// RedisStore's admin side: Reset (DEL of the states) and the reset epoch, a counter next to the
// states that every Reset moves and every instance's over-limit cache reads; and leases
// (consistency: leased), taken by decide.lua's mode 4; and merges (consistency: eventual), mode 5.

#include <algorithm>
#include <memory>

#include "absl/strings/numbers.h"
#include "fmt/format.h"
#include "redis/redis_store.h"

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
    if (place.field.empty()) {
      AppendCommand(&command, {"DEL", place.key});
    } else {
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
  std::string command;
  AppendCommand(&command, {"GET", EpochKey()});
  client_->Send(
      EpochKey(), std::move(command), [done = std::move(done)](absl::StatusOr<Reply> reply) {
        if (!reply.ok()) return done(reply.status());
        if (reply->IsError()) return done(absl::InternalError(reply->str));
        int64_t epoch = 0;  // never reset: no key
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

// What one lease call needs until its reply (a NOSCRIPT answer sends it again).
struct RedisStore::LeaseCall {
  Limit limit;
  std::string key;
  std::string field;
  uint64_t want;
  int64_t life_us;
  GrantDone done;
};

void RedisStore::Lease(const backend::Item& item, uint64_t want, int64_t life_us, GrantDone done) {
  Place place = StatePlace(*item.limit, item.limit_id, item.key);
  SendLease(std::make_shared<LeaseCall>(LeaseCall{.limit = *item.limit,
                                                  .key = std::move(place.key),
                                                  .field = std::move(place.field),
                                                  .want = want,
                                                  .life_us = life_us,
                                                  .done = std::move(done)}),
            /*by_sha=*/true);
}

void RedisStore::SendLease(std::shared_ptr<LeaseCall> call, bool by_sha) {
  const DecideItem it{&call->limit, call->key, 0, false, false, call->field};
  const std::string sha = by_sha ? Sha() : std::string();
  script_calls_.fetch_add(1, std::memory_order_relaxed);
  lease_calls_.fetch_add(1, std::memory_order_relaxed);
  client_->Send(
      call->key, EncodeLease(sha, it, call->want, call->life_us),
      [this, call, by_sha, sha](absl::StatusOr<Reply> reply) {
        if (!reply.ok()) return call->done(reply.status());
        if (reply->IsError()) {
          if (by_sha && reply->str.starts_with("NOSCRIPT")) {
            noscript_.fetch_add(1, std::memory_order_relaxed);
            return SendLease(call, /*by_sha=*/false);
          }
          return call->done(absl::InternalError(fmt::format("lease script: {}", reply->str)));
        }
        if (reply->type != Reply::Type::kArray || reply->elements.size() != 4) {
          return call->done(absl::InternalError("lease script: a reply of the wrong shape"));
        }
        if (sha.empty()) LearnSha(call->key);  // the SHA, for next time
        const auto& e = reply->elements;
        const auto count = [](const Reply& r) {
          return static_cast<uint64_t>(std::max<int64_t>(0, r.integer));
        };
        call->done(Grant{.granted = count(e[1]),
                         .now_us = e[0].integer,
                         .ends_us = e[2].integer,
                         .left = count(e[3])});
      });
}

// What one merge call needs until its reply (a NOSCRIPT answer sends it again).
struct RedisStore::SyncCall {
  std::vector<Limit> limits;    // what the items point to
  std::vector<SyncItem> items;  // their keys are the Redis keys
  std::vector<size_t> deltas;   // Sync's indexes
  std::string route;            // a key of the node the call goes to
  MergedDone done;
};

size_t RedisStore::Sync(std::span<const Delta> deltas, MergedDone done) {
  // By node (one on a single server), at most kMaxSyncBatch states per call.
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<SyncCall>>> by_node;
  std::vector<std::shared_ptr<SyncCall>> calls;
  for (size_t i = 0; i < deltas.size(); ++i) {
    const backend::Item& item = deltas[i].item;
    Place place = StatePlace(*item.limit, item.limit_id, item.key);
    auto& node = by_node[client_->cluster() ? client_->NodeFor(place.key) : std::string()];
    if (node.empty() || node.back()->items.size() >= kMaxSyncBatch) {
      auto call = std::make_shared<SyncCall>();
      call->limits.reserve(kMaxSyncBatch);  // never moved: the items point into it
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
                          .counted_at_us = deltas[i].counted_at_us});
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
