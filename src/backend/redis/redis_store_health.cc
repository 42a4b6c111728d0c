// RedisStore's health and numbers: the script's SHA, the outcome of each call (feeding the
// health that Failover reads), the probe that brings health back, and the stats.

#include <string>

#include "backend/redis/redis_store.h"
#include "fmt/format.h"

namespace sluice::redis {

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
