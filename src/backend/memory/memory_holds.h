// The holds of concurrency limits in this process (backend/holds.h): one algo::ConcurrencyState
// per (limit, key), in shards each under its own lock. A state whose holds have all ended is
// dropped when its shard is full (at most `max_states` in all), and a new state is then refused
// while every one holds live holds (never over the limit: the hold is not taken).

#ifndef SLUICE_BACKEND_MEMORY_MEMORY_HOLDS_H_
#define SLUICE_BACKEND_MEMORY_MEMORY_HOLDS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "algo/concurrency.h"
#include "backend/holds.h"

namespace sluice::store {

class MemoryHolds : public backend::Holds {
 public:
  explicit MemoryHolds(size_t max_states = size_t{1} << 20);

  void Acquire(std::span<const backend::HoldRequest> requests, int64_t now_us,
               AcquireDone done) override;
  void Release(std::span<const backend::Hold> holds, int64_t now_us, CountDone done) override;
  void Renew(std::span<const backend::Hold> holds, int64_t now_us, CountDone done) override;

  // Live holds at now_us over every state (for tests and metrics).
  uint64_t LiveHolds(int64_t now_us) const;
  std::optional<absl::flat_hash_map<uint64_t, uint64_t>> LiveByLimit(int64_t now_us) const override;

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, algo::ConcurrencyState> states ABSL_GUARDED_BY(mu);
  };
  static std::string StateKey(uint64_t limit_id, std::string_view key);
  Shard& ShardOf(const std::string& state_key);
  // One hold of `request` at now_us, or why not (Acquired::ok false; a retry of 1 s when the
  // shard is full of states with live holds).
  algo::Acquired AcquireOne(const backend::HoldRequest& request, int64_t now_us);
  bool ReleaseOne(const backend::Hold& hold, int64_t now_us);

  const size_t max_per_shard_;
  std::array<Shard, kShards> shards_;
};

}  // namespace sluice::store

#endif  // SLUICE_BACKEND_MEMORY_MEMORY_HOLDS_H_
