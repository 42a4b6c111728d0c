// The holds of concurrency limits on Redis (redis_holds.h).

#include "backend/redis/redis_holds.h"

#include <openssl/evp.h>

#include <atomic>
#include <memory>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "redis/resp.h"

namespace sluice::redis {
namespace {

// KEYS[1]: the state's sorted set. ARGV: op (a: acquire, r: release, n: renew), n, max_hold (µs),
// the hold's id. Acquire answers {1, end, free after it} or {0, retry after (µs; -1 never), 0};
// release and renew answer 1 when the hold was live.
constexpr std::string_view kHoldsScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local op, hold = ARGV[1], tonumber(ARGV[3])
if op == 'a' then
  local n = tonumber(ARGV[2])
  local live = redis.call('ZCARD', key)
  if live < n then
    redis.call('ZADD', key, now + hold, ARGV[4])
    redis.call('PEXPIRE', key, math.ceil(hold / 1000) + 1000)
    return {1, now + hold, n - live - 1}
  end
  if n == 0 then return {0, -1, 0} end
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now, 0}
end
if op == 'r' then return redis.call('ZREM', key, ARGV[4]) end
if not redis.call('ZSCORE', key, ARGV[4]) then return 0 end
redis.call('ZADD', key, now + hold, ARGV[4])
redis.call('PEXPIRE', key, math.ceil(hold / 1000) + 1000)
return 1
)lua";

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

// The script's call, by its SHA (`by_sha`: Redis has it, the usual case) or as text.
std::string Command(const std::string& key, char op, uint64_t n, int64_t max_hold_us, uint64_t id,
                    bool by_sha) {
  std::string command;
  const std::string op_text(1, op), n_text = std::to_string(n),
                                    hold_text = std::to_string(max_hold_us),
                                    id_text = std::to_string(id);
  AppendCommand(&command, {by_sha ? "EVALSHA" : "EVAL", by_sha ? HoldsSha() : kHoldsScript, "1",
                           key, op_text, n_text, hold_text, id_text});
  return command;
}

}  // namespace

void RedisHolds::Run(const std::string& key, char op, uint64_t n, int64_t max_hold_us, uint64_t id,
                     std::function<void(absl::StatusOr<Reply>)> done, bool by_sha) {
  client_->Send(
      key, Command(key, op, n, max_hold_us, id, by_sha),
      [this, key, op, n, max_hold_us, id, by_sha,
       done = std::move(done)](absl::StatusOr<Reply> reply) mutable {
        // A server that does not have the script yet (new, restarted, flushed): the
        // text once, which also loads it there.
        if (by_sha && reply.ok() && reply->IsError() && reply->str.starts_with("NOSCRIPT")) {
          return Run(key, op, n, max_hold_us, id, std::move(done), /*by_sha=*/false);
        }
        done(std::move(reply));
      });
}

// The acquisitions of several states, gathered as their replies come.
struct RedisHolds::Gathering {
  absl::Mutex mu;
  backend::Acquisition result ABSL_GUARDED_BY(mu);
  std::vector<bool> taken ABSL_GUARDED_BY(mu);
  size_t waiting ABSL_GUARDED_BY(mu) = 0;
  backend::Holds::AcquireDone done;
};

std::string RedisHolds::KeyOf(uint64_t limit_id, std::string_view key) const {
  return fmt::format("{}h:{:016x}:{{{}}}", prefix_, limit_id, key);
}

void RedisHolds::Acquire(std::span<const backend::HoldRequest> requests, int64_t /*now_us*/,
                         AcquireDone done) {
  if (requests.empty()) {
    backend::Acquisition none;
    none.ok = true;
    return done(std::move(none));
  }
  auto g = std::make_shared<Gathering>();
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
    Run(KeyOf(asked[i].limit_id, asked[i].key), 'a', requests[i].n, asked[i].max_hold_us,
        asked[i].id,
        [this, g, i](absl::StatusOr<Reply> reply) { Gathered(*g, i, std::move(reply)); });
  }
}

void RedisHolds::Gathered(Gathering& g, size_t i, absl::StatusOr<Reply> reply) {
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
      // All or none: what was taken goes back.
      for (size_t k = 0; k < g.taken.size(); ++k) {
        if (g.taken[k]) back.push_back(result.holds[k]);
      }
      result.ok = false;
      result.holds.clear();
    }
  }
  if (!back.empty()) Release(back, 0, [](absl::StatusOr<size_t>) {});
  g.done(std::move(result));
}

void RedisHolds::Each(std::span<const backend::Hold> holds, char op, CountDone done) {
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
            } else if (reply->integer == 1) {
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
  Each(holds, 'r', std::move(done));
}

void RedisHolds::Renew(std::span<const backend::Hold> holds, int64_t /*now_us*/, CountDone done) {
  Each(holds, 'n', std::move(done));
}

}  // namespace sluice::redis
