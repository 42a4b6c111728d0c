// The holds of concurrency limits in this process (memory_holds.h).

#include "backend/memory/memory_holds.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/hash/hash.h"

namespace sluice::store {

namespace {

uint64_t NewStart() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return (random() >> 1) + 1;  // never 0, and room to count up
}

}  // namespace

MemoryHolds::MemoryHolds(size_t max_states)
    : max_per_shard_(std::max<size_t>(1, max_states / kShards)) {}

std::string MemoryHolds::StateKey(uint64_t limit_id, std::string_view key) {
  std::string out(sizeof(limit_id), '\0');
  std::memcpy(out.data(), &limit_id, sizeof(limit_id));
  out.append(key);
  return out;
}

MemoryHolds::Shard& MemoryHolds::ShardOf(const std::string& state_key) {
  return shards_[absl::HashOf(state_key) % kShards];
}

algo::Acquired MemoryHolds::AcquireOne(const backend::HoldRequest& request, int64_t now_us) {
  const std::string key = StateKey(request.limit_id, request.key);
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.states.find(key);
  if (it == shard.states.end()) {
    if (shard.states.size() >= max_per_shard_) {
      absl::erase_if(shard.states, [now_us](const auto& s) { return s.second.IsIdle(now_us); });
    }
    if (shard.states.size() >= max_per_shard_) return {.ok = false, .retry_after_us = 1'000'000};
    it = shard.states.try_emplace(key).first;
    // Ids from a random start: a state dropped when idle and made again must not give an id a
    // late release of an ended hold could still name.
    it->second.next_id = NewStart();
  }
  return algo::Acquire(it->second, now_us, request.n, request.max_hold_us);
}

bool MemoryHolds::ReleaseOne(const backend::Hold& hold, int64_t now_us) {
  const std::string key = StateKey(hold.limit_id, hold.key);
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  const auto it = shard.states.find(key);
  if (it == shard.states.end()) return false;
  const bool live = algo::Release(it->second, hold.id, now_us);
  if (it->second.IsIdle(now_us)) shard.states.erase(it);
  return live;
}

void MemoryHolds::Acquire(std::span<const backend::HoldRequest> requests, int64_t now_us,
                          AcquireDone done) {
  backend::Acquisition result;
  result.ok = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    const algo::Acquired got = AcquireOne(requests[i], now_us);
    if (!got.ok) {
      // All or none: the holds taken for the earlier ones go back.
      for (const backend::Hold& taken : result.holds) ReleaseOne(taken, now_us);
      backend::Acquisition refused;
      refused.refused = i;
      refused.retry_after_us = got.retry_after_us;
      return done(std::move(refused));
    }
    result.remaining = i == 0 ? got.remaining : std::min(result.remaining, got.remaining);
    result.holds.push_back({.limit_id = requests[i].limit_id,
                            .key = std::string(requests[i].key),
                            .id = got.id,
                            .max_hold_us = requests[i].max_hold_us,
                            .expires_us = got.expires_us});
  }
  done(std::move(result));
}

void MemoryHolds::Release(std::span<const backend::Hold> holds, int64_t now_us, CountDone done) {
  size_t live = 0;
  for (const backend::Hold& hold : holds) live += ReleaseOne(hold, now_us) ? 1 : 0;
  done(live);
}

void MemoryHolds::Renew(std::span<const backend::Hold> holds, int64_t now_us, CountDone done) {
  size_t live = 0;
  for (const backend::Hold& hold : holds) {
    const std::string key = StateKey(hold.limit_id, hold.key);
    Shard& shard = ShardOf(key);
    absl::MutexLock lock(&shard.mu);
    const auto it = shard.states.find(key);
    if (it != shard.states.end() && algo::Renew(it->second, hold.id, now_us, hold.max_hold_us)) {
      ++live;
    }
  }
  done(live);
}

uint64_t MemoryHolds::LiveHolds(int64_t now_us) const {
  uint64_t live = 0;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [key, state] : shard.states) live += algo::LiveHolds(state, now_us);
  }
  return live;
}

std::optional<absl::flat_hash_map<uint64_t, uint64_t>> MemoryHolds::LiveByLimit(
    int64_t now_us) const {
  absl::flat_hash_map<uint64_t, uint64_t> live;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [key, state] : shard.states) {
      uint64_t limit_id = 0;
      std::memcpy(&limit_id, key.data(), sizeof(limit_id));  // StateKey's first bytes
      if (const uint64_t n = algo::LiveHolds(state, now_us); n > 0) live[limit_id] += n;
    }
  }
  return live;
}

}  // namespace sluice::store
