// What store::LocalOverLimitCache and store::LocalLeases, the memory store's per-thread fronts,
// share: a state's hash, the generations that tell a thread its kept copy of a state is stale, and
// the ids that name a front in the threads' tables.

#ifndef SLUICE_BACKEND_MEMORY_STATE_GENERATIONS_H_
#define SLUICE_BACKEND_MEMORY_STATE_GENERATIONS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace sluice::store {

// The hash of an item's state (limit_id, key).
uint64_t StateHash(const backend::Item& item);

// An id for a new front, never reused in the process: a thread's table holds one front's
// entries, and one it does not know starts it afresh.
uint64_t NewFrontId();

// kCount counters, a state's chosen by its hash, each on a cache line of its own (moving one
// does not slow the reads of the others). What gives a state's quota back (a reset, a refund)
// moves its counter after it is done; what a thread keeps of a state carries the counter's value
// read before the store decided, and is used only while the counter has not moved.
class StateGenerations {
 public:
  static constexpr size_t kCount = 64;

  uint64_t Read(uint64_t hash) const { return Of(hash).load(std::memory_order_acquire); }
  void Move(uint64_t hash) { Of(hash).fetch_add(1, std::memory_order_acq_rel); }

 private:
  struct alignas(64) Counter {
    std::atomic<uint64_t> value{0};
  };
  std::atomic<uint64_t>& Of(uint64_t hash) const { return counters_[(hash >> 32) % kCount].value; }

  mutable std::array<Counter, kCount> counters_;
};

}  // namespace sluice::store

#endif  // SLUICE_BACKEND_MEMORY_STATE_GENERATIONS_H_
