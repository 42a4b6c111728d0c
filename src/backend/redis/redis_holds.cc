// The holds of concurrency limits on Redis (redis_holds.h).

#include "backend/redis/redis_holds.h"

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

std::string Command(const std::string& key, char op, uint64_t n, int64_t max_hold_us, uint64_t id) {
  std::string command;
  const std::string op_text(1, op), n_text = std::to_string(n),
                                    hold_text = std::to_string(max_hold_us),
                                    id_text = std::to_string(id);
  AppendCommand(&command, {"EVAL", kHoldsScript, "1", key, op_text, n_text, hold_text, id_text});
  return command;
}

}  // namespace

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
    const std::string key = KeyOf(asked[i].limit_id, asked[i].key);
    client_->Send(key, Command(key, 'a', requests[i].n, asked[i].max_hold_us, asked[i].id),
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
  struct Count {
    std::atomic<size_t> waiting, live{0};
    std::atomic<bool> failed{false};
    absl::Status why;
    CountDone done;
  };
  auto c = std::make_shared<Count>();
  c->waiting = holds.size();
  c->done = std::move(done);
  for (const backend::Hold& hold : holds) {
    const std::string key = KeyOf(hold.limit_id, hold.key);
    client_->Send(
        key, Command(key, op, 0, hold.max_hold_us, hold.id), [c](absl::StatusOr<Reply> reply) {
          if (!reply.ok() || reply->IsError()) {
            if (!c->failed.exchange(true)) {
              c->why = !reply.ok() ? reply.status()
                                   : absl::UnavailableError("redis: holds: " + reply->str);
            }
          } else if (reply->integer == 1) {
            c->live.fetch_add(1);
          }
          if (c->waiting.fetch_sub(1) != 1) return;
          if (c->failed.load()) return c->done(c->why);
          c->done(c->live.load());
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
