// RedisStore's decisions (redis_store.h): one request's way through slots, the two steps across
// slots, NOSCRIPT, deadlines and late replies, and refunds. The per-node batches it is queued in
// are in redis_store_batches.cc, health and stats in redis_store_health.cc, and Reset, the reset
// epoch, leases and merges in redis_store_admin.cc.

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
    by_slot[slot].push_back({&limits[i], std::move(place.key), items[i].cost, false, false,
                             std::move(place.field), decided_at_us});
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
  const int64_t near_us = client_->clock().NowMicros();  // calendar windows' boundaries
  bool one_slot = true;
  uint16_t first_slot = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    Place place = StatePlace(queued.limits[i], items[i].limit_id, items[i].key);
    queued.items.push_back({&queued.limits[i], std::move(place.key), items[i].cost,
                            items[i].count_denied, items[i].shadow, std::move(place.field),
                            near_us});
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
        if (!dry.ok()) return finish(std::move(dry));
        if (!dry->allowed) {  // answered once its count_denied items are recorded
          auto denied = std::make_shared<absl::StatusOr<DecideResult>>(std::move(dry));
          return RecordCounted(*call, deadline,
                               [denied, finish]() mutable { finish(std::move(*denied)); });
        }
        Run(std::move(call), /*commit=*/true, deadline, std::move(finish));
      });
}

void RedisStore::RecordCounted(const Call& call, SteadyTime deadline, std::function<void()> then) {
  // A denied request's count_denied items still count their cost, as within one slot: a commit
  // of theirs alone (each group decides or records its own; none is given back, RefundAdmitted
  // leaves count_denied items alone), `then` once it has answered.
  auto counted = std::make_shared<Call>();
  counted->limits = call.limits;  // complete: the items' pointers into it stay valid
  for (const std::vector<size_t>& group : call.groups) {
    std::vector<size_t> kept;
    for (size_t i : group) {
      if (!call.items[i].count_denied || call.items[i].cost == 0) continue;
      kept.push_back(counted->items.size());
      counted->items.push_back(call.items[i]);
      counted->items.back().limit = &counted->limits[i];
    }
    if (!kept.empty()) counted->groups.push_back(std::move(kept));
  }
  if (counted->items.empty()) return then();
  Run(std::move(counted), /*commit=*/true, deadline,
      [then = std::move(then)](absl::StatusOr<DecideResult>) { then(); });
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
      // (A count_denied item keeps what it consumed whatever the others decide.)
      if (decisions[i].allowed && call.items[i].cost > 0 && !call.items[i].count_denied)
        items.push_back(call.items[i]);
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

}  // namespace sluice::redis
