// The holds of concurrency limits on Redis (redis_holds.h).

#include "backend/redis/redis_holds.h"

#include <openssl/evp.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "redis/resp.h"

namespace sluice::redis {
namespace {

// One call does a batch of ops, one per declared key, in Redis's clock (TIME, once). KEYS: each
// op's sorted set. ARGV, each op's in turn: `a` (acquire), n, max_hold (µs), the hold's id; `n`
// (renew), max_hold, id; `r` (release), id. Answers one flat list: for an acquire three values,
// {1, end, free after it} or {0, retry after (µs; -1 never), 0}; for a release one, 1 when the
// hold was there (live, or ended and not dropped yet), for a renew one, 1 when it was live; else
// 0. (A release carries and answers no more than it needs: half of a hold's ops are releases,
// and their arguments and answers were a good part of their cost to Redis.) (On a cluster a
// batch's keys share a slot.)
constexpr std::string_view kHoldsScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
local b, j = 0, 0
for _, key in ipairs(KEYS) do
  local op = ARGV[b + 1]
  if op == 'r' then
    j = j + 1
    out[j] = redis.call('ZREM', key, ARGV[b + 2])
    b = b + 2
  elseif op == 'n' then
    local hold, id = tonumber(ARGV[b + 2]), ARGV[b + 3]
    b = b + 3
    local held = redis.call('ZSCORE', key, id)
    j = j + 1
    if held and tonumber(held) > now then  -- live (an ended one is never brought back)
      redis.call('ZADD', key, now + hold, id)
      redis.call('PEXPIRE', key, math.ceil(hold / 1000) + 1000)
      out[j] = 1
    else
      out[j] = 0
    end
  else
    local n, hold, id = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), ARGV[b + 4]
    b = b + 4
    local live = redis.call('ZCOUNT', key, now + 1, '+inf')  -- (the live: ending after now)
    if live < n then
      -- Holds never released (their holder died) are dropped here one time in 16, whatever
      -- the key's traffic (the clock's low bits), and at every refusal below.
      if now % 16 == 0 then redis.call('ZREMRANGEBYSCORE', key, '-inf', now) end
      redis.call('ZADD', key, now + hold, id)
      redis.call('PEXPIRE', key, math.ceil(hold / 1000) + 1000)
      out[j + 1], out[j + 2], out[j + 3] = 1, now + hold, n - live - 1
    elseif n == 0 then
      out[j + 1], out[j + 2], out[j + 3] = 0, -1, 0
    else
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
      local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      out[j + 1], out[j + 2], out[j + 3] = 0, tonumber(first[2]) - now, 0
    end
    j = j + 3
  end
end
return out
)lua";

// The most ops of one call, and the calls in flight per queue (a node, or a cluster's slot):
// ops queued meanwhile go together in the next call.
constexpr size_t kMaxBatch = 256;
constexpr int kMaxInFlight = 2;

uint64_t NewHoldId() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  uint64_t id = 0;
  while (id == 0) id = random();
  return id;
}

// The script's SHA1 in hex, as EVALSHA names it.
const std::string& HoldsSha() {
  static const std::string sha = [] {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_Digest(kHoldsScript.data(), kHoldsScript.size(), digest, &size, EVP_sha1(), nullptr);
    std::string hex;
    for (unsigned int i = 0; i < size; ++i)
      fmt::format_to(std::back_inserter(hex), "{:02x}", digest[i]);
    return hex;
  }();
  return sha;
}

// One op of a call: its state, what to do, and where its {x, y, z} goes.
struct Op {
  std::string key;
  char op = 'a';
  uint64_t n = 0;
  int64_t max_hold_us = 0;
  uint64_t id = 0;
  std::function<void(absl::StatusOr<Reply>)> done;
};

// How many values the script answers for `op`, and how many numbers it takes after the op's
// letter.
size_t Answers(const Op& op) { return op.op == 'a' ? 3 : 1; }
size_t Arguments(const Op& op) { return op.op == 'a' ? 3 : op.op == 'n' ? 2 : 1; }

std::string Encode(const std::vector<Op>& batch, bool by_sha) {
  std::vector<std::string> numbers;   // ARGV's numbers as text, for the views below
  numbers.reserve(batch.size() * 3);  // (no reallocation: the views stay valid)
  for (const Op& op : batch) {
    if (op.op == 'a') numbers.push_back(std::to_string(op.n));
    if (op.op != 'r') numbers.push_back(std::to_string(op.max_hold_us));
    numbers.push_back(std::to_string(op.id));
  }
  const std::string count = std::to_string(batch.size());
  std::vector<std::string_view> args = {
      by_sha ? "EVALSHA" : "EVAL", by_sha ? std::string_view(HoldsSha()) : kHoldsScript, count};
  for (const Op& op : batch) args.push_back(op.key);
  size_t next = 0;
  for (const Op& op : batch) {
    args.push_back(op.op == 'a' ? "a" : op.op == 'r' ? "r" : "n");
    for (size_t k = 0; k < Arguments(op); ++k) args.push_back(numbers[next++]);
  }
  std::string command;
  AppendCommand(&command, std::span<const std::string_view>(args));
  return command;
}

}  // namespace

// The ops' queues, one per server (on a cluster, per slot), shared with the calls in flight:
// a reply that comes after the RedisHolds is gone (the client failing what it still has, at
// shutdown) finds them here, answers its ops and sends nothing more. Each queue has at most
// kMaxInFlight calls out; ops that come meanwhile go together in the next.
struct RedisHolds::Batcher : std::enable_shared_from_this<Batcher> {
  struct Queue {
    std::vector<Op> waiting;
    int in_flight = 0;
  };
  Client* const client;
  const std::string prefix;
  absl::Mutex mu;
  absl::flat_hash_map<uint16_t, Queue> queues ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;

  Batcher(Client* c, std::string p) : client(c), prefix(std::move(p)) {}

  std::string KeyOf(uint64_t limit_id, std::string_view key) const {
    return fmt::format("{}h:{:016x}:{{{}}}", prefix, limit_id, key);
  }

  // One op of the script on `key`, `done` given its {x, y, z}.
  void Run(std::string key, char op, uint64_t n, int64_t max_hold_us, uint64_t id,
           std::function<void(absl::StatusOr<Reply>)> done) {
    const uint16_t queue = client->cluster() ? KeySlot(key) : 0;
    std::vector<Op> batch;
    {
      absl::ReleasableMutexLock lock(&mu);
      if (closed) {
        lock.Release();
        return done(absl::UnavailableError("redis: holds: shutting down"));
      }
      queues[queue].waiting.push_back({.key = std::move(key),
                                       .op = op,
                                       .n = n,
                                       .max_hold_us = max_hold_us,
                                       .id = id,
                                       .done = std::move(done)});
      batch = TakeBatch(queue, /*starting=*/true);
    }
    if (!batch.empty()) Send(queue, std::move(batch), /*by_sha=*/true);
  }

  // The next batch of `queue`, taking a call slot (`starting`) or keeping the one that just
  // answered; empty when none (and then, unless starting, the slot is given back).
  std::vector<Op> TakeBatch(uint16_t queue, bool starting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<Op> batch;
    auto it = queues.find(queue);
    if (it == queues.end()) return batch;
    Queue& q = it->second;
    if (starting) {
      if (q.in_flight >= kMaxInFlight) return batch;  // goes with a later call
      ++q.in_flight;
    } else if (q.waiting.empty() || closed) {
      if (--q.in_flight == 0) queues.erase(it);
      return batch;
    }
    const size_t take = std::min(q.waiting.size(), kMaxBatch);
    batch.assign(std::make_move_iterator(q.waiting.begin()),
                 std::make_move_iterator(q.waiting.begin() + static_cast<std::ptrdiff_t>(take)));
    q.waiting.erase(q.waiting.begin(), q.waiting.begin() + static_cast<std::ptrdiff_t>(take));
    return batch;
  }

  // Sends `batch` as one call: by the script's SHA, again as text after NOSCRIPT.
  void Send(uint16_t queue, std::vector<Op> batch, bool by_sha) {
    auto ops = std::make_shared<std::vector<Op>>(std::move(batch));
    const std::string key = ops->front().key;
    client->Send(key, Encode(*ops, by_sha),
                 [self = shared_from_this(), queue, ops, by_sha](absl::StatusOr<Reply> reply) {
                   self->Answer(queue, *ops, by_sha, std::move(reply));
                 });
  }

  // A call's reply: each op answered, then the queue's next batch sent.
  void Answer(uint16_t queue, std::vector<Op>& ops, bool by_sha, absl::StatusOr<Reply> reply) {
    // A server that does not have the script yet (new, restarted, flushed): the text once, which
    // also loads it there.
    if (by_sha && reply.ok() && reply->IsError() && reply->str.starts_with("NOSCRIPT")) {
      return Send(queue, std::move(ops), /*by_sha=*/false);
    }
    size_t answers = 0;
    for (const Op& op : ops) answers += Answers(op);
    const bool fits =
        reply.ok() && reply->type == Reply::Type::kArray && reply->elements.size() == answers;
    size_t at = 0;  // the next op's first value
    for (size_t i = 0; i < ops.size(); ++i) {
      if (fits) {  // its x, y, z as one array, as the ops read them (y, z 0 for one value)
        Reply one;
        one.type = Reply::Type::kArray;
        const auto first = reply->elements.begin() + static_cast<std::ptrdiff_t>(at);
        one.elements.assign(
            std::make_move_iterator(first),
            std::make_move_iterator(first + static_cast<std::ptrdiff_t>(Answers(ops[i]))));
        at += Answers(ops[i]);
        Reply zero;
        zero.type = Reply::Type::kInteger;
        while (one.elements.size() < 3) one.elements.push_back(zero);
        ops[i].done(std::move(one));
      } else if (!reply.ok()) {
        ops[i].done(reply.status());
      } else {
        ops[i].done(absl::UnavailableError(
            "redis: holds: " + (reply->IsError() ? reply->str : std::string("an odd answer"))));
      }
    }
    std::vector<Op> next;
    {
      absl::MutexLock lock(&mu);
      next = TakeBatch(queue, /*starting=*/false);
    }
    if (!next.empty()) Send(queue, std::move(next), /*by_sha=*/true);
  }

  // Sends one op for each of `holds` and answers how many said 1.
  void Each(std::span<const backend::Hold> holds, char op, CountDone done);
  // The acquisitions of several states, gathered as their replies come.
  struct Gathering {
    absl::Mutex mu;
    backend::Acquisition result ABSL_GUARDED_BY(mu);
    std::vector<bool> taken ABSL_GUARDED_BY(mu);
    size_t waiting ABSL_GUARDED_BY(mu) = 0;
    backend::Holds::AcquireDone done;
  };
  // The reply of request `i` of an acquisition; the last one answers it (all or none: what was
  // taken goes back when one refused or failed).
  void Gathered(Gathering& g, size_t i, absl::StatusOr<Reply> reply);
};

RedisHolds::RedisHolds(Client* client, std::string prefix)
    : batcher_(std::make_shared<Batcher>(client, std::move(prefix))) {}

RedisHolds::~RedisHolds() {
  // What waits is answered now; calls in flight answer their ops when the client fails them.
  std::vector<Op> waiting;
  {
    absl::MutexLock lock(&batcher_->mu);
    batcher_->closed = true;
    for (auto& [slot, queue] : batcher_->queues) {
      for (Op& op : queue.waiting) waiting.push_back(std::move(op));
      queue.waiting.clear();
    }
  }
  for (Op& op : waiting) op.done(absl::UnavailableError("redis: holds: shutting down"));
}

std::string RedisHolds::KeyOf(uint64_t limit_id, std::string_view key) const {
  return batcher_->KeyOf(limit_id, key);
}

void RedisHolds::Acquire(std::span<const backend::HoldRequest> requests, int64_t /*now_us*/,
                         AcquireDone done) {
  if (requests.empty()) {
    backend::Acquisition none;
    none.ok = true;
    return done(std::move(none));
  }
  auto g = std::make_shared<Batcher::Gathering>();
  g->done = std::move(done);
  std::vector<backend::Hold> asked;
  for (const backend::HoldRequest& request : requests) {
    asked.push_back({.limit_id = request.limit_id,
                     .key = std::string(request.key),
                     .id = NewHoldId(),
                     .max_hold_us = request.max_hold_us,
                     .expires_us = 0});
  }
  {
    absl::MutexLock lock(&g->mu);
    g->waiting = requests.size();
    g->taken.assign(requests.size(), false);
    g->result.ok = true;
    g->result.remaining = INT64_MAX;
    g->result.holds = asked;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    batcher_->Run(batcher_->KeyOf(asked[i].limit_id, asked[i].key), 'a', requests[i].n,
                  asked[i].max_hold_us, asked[i].id,
                  [b = batcher_, g, i](absl::StatusOr<Reply> reply) {
                    b->Gathered(*g, i, std::move(reply));
                  });
  }
}

void RedisHolds::Batcher::Gathered(Gathering& g, size_t i, absl::StatusOr<Reply> reply) {
  backend::Acquisition result;
  std::vector<backend::Hold> back;
  {
    absl::MutexLock lock(&g.mu);
    if (!reply.ok() || reply->IsError() || reply->elements.size() != 3) {
      if (g.result.status.ok()) {
        g.result.status =
            !reply.ok() ? reply.status() : absl::UnavailableError("redis: holds: " + reply->str);
      }
    } else if (reply->elements[0].integer == 1) {
      g.taken[i] = true;
      g.result.holds[i].expires_us = reply->elements[1].integer;
      g.result.remaining = std::min(g.result.remaining, reply->elements[2].integer);
    } else if (g.result.ok) {
      g.result.ok = false;
      g.result.refused = i;
      g.result.retry_after_us = reply->elements[1].integer;
    }
    if (--g.waiting > 0) return;
    result = std::move(g.result);
    if (!result.ok || !result.status.ok()) {
      for (size_t k = 0; k < g.taken.size(); ++k) {
        if (g.taken[k]) back.push_back(result.holds[k]);
      }
      result.ok = false;
      result.holds.clear();
    }
  }
  if (!back.empty()) Each(back, 'r', [](absl::StatusOr<size_t>) {});
  g.done(std::move(result));
}

void RedisHolds::Batcher::Each(std::span<const backend::Hold> holds, char op, CountDone done) {
  if (holds.empty()) return done(size_t{0});
  // The replies may come on several threads (a cluster's nodes): counted under a lock.
  struct Count {
    absl::Mutex mu;
    size_t waiting ABSL_GUARDED_BY(mu) = 0;
    size_t live ABSL_GUARDED_BY(mu) = 0;
    absl::Status why ABSL_GUARDED_BY(mu);  // the first failure
    CountDone done;
  };
  auto c = std::make_shared<Count>();
  {
    absl::MutexLock lock(&c->mu);
    c->waiting = holds.size();
  }
  c->done = std::move(done);
  for (const backend::Hold& hold : holds) {
    Run(KeyOf(hold.limit_id, hold.key), op, 0, hold.max_hold_us, hold.id,
        [c](absl::StatusOr<Reply> reply) {
          absl::StatusOr<size_t> answer;
          {
            absl::MutexLock lock(&c->mu);
            if (!reply.ok() || reply->IsError()) {
              if (c->why.ok()) {
                c->why = !reply.ok() ? reply.status()
                                     : absl::UnavailableError("redis: holds: " + reply->str);
              }
            } else if (reply->elements.size() == 3 && reply->elements[0].integer == 1) {
              ++c->live;
            }
            if (--c->waiting != 0) return;
            answer = c->why.ok() ? absl::StatusOr<size_t>(c->live) : c->why;
          }
          c->done(std::move(answer));
        });
  }
}

void RedisHolds::Release(std::span<const backend::Hold> holds, int64_t /*now_us*/, CountDone done) {
  batcher_->Each(holds, 'r', std::move(done));
}

void RedisHolds::Renew(std::span<const backend::Hold> holds, int64_t /*now_us*/, CountDone done) {
  batcher_->Each(holds, 'n', std::move(done));
}

}  // namespace sluice::redis
