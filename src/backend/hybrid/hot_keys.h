// HotKeys: which states this instance sees at more than a given rate (`hot_keys: lease`,
// backend::Item::hot_key_rate), found with the space-saving algorithm in bounded memory (at most
// `slots` states) at a small fixed cost per request. Only a state's own requests promote it.
//
// Thread safety: safe for concurrent use. Units: requests per second, whole seconds of the
// monotonic clock.
//
// Design: docs/hybrid.md#how-hot-keys-are-found (tracking, promotion, demotion, cost).

#ifndef SLUICE_BACKEND_HYBRID_HOT_KEYS_H_
#define SLUICE_BACKEND_HYBRID_HOT_KEYS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"

namespace sluice::backend {

class HotKeys {
 public:
  static constexpr int64_t kSecondUs = 1000000;
  static constexpr uint32_t kDemoteAfterSeconds = 3;

  // A promoted state, for the metrics.
  struct Hot {
    std::string key;    // Item::key
    std::string limit;  // DescribeLimit
    double rate = 0;    // requests per second on this instance, a lower bound
  };
  struct Stats {
    size_t tracked = 0;
    size_t promoted = 0;
    uint64_t promotions = 0;
    uint64_t demotions = 0;
  };

  explicit HotKeys(size_t slots = 256);

  // Counts one request of `item`'s state at `mono` (µs, monotonic; never going back) and says
  // whether the state is promoted now (item.sharing.hot_key_rate > 0).
  bool Record(const Item& item, int64_t mono);
  // The promoted states of highest rate at `mono`, at most `k`, highest first.
  std::vector<Hot> Top(size_t k, int64_t mono);
  Stats GetStats() const;
  // What the tracker holds, fixed at construction (promoted states' key texts aside).
  size_t memory_bytes() const;

 private:
  struct Slot {
    uint64_t hash = 0;
    uint64_t weight_now = 0;     // requests this second, inherited ones included
    uint64_t weight_last = 0;    // the same, the last second
    uint32_t own_now = 0;        // its own requests this second
    uint32_t own_last = 0;       // the last second (0 if it took the slot since)
    uint32_t hot_key_rate = 0;   // its last request's
    uint32_t quiet_seconds = 0;  // whole seconds in a row under half of hot_key_rate
    uint32_t heap_index = 0;
    bool promoted = false;
    std::string key;    // promoted only
    std::string limit;  // promoted only
  };

  static uint64_t Weight(const Slot& slot) { return slot.weight_now + slot.weight_last; }
  static double Rate(const Slot& slot, int64_t mono);
  // Starts the second `second` (seconds of the monotonic clock): demotes and decays.
  void Roll(int64_t second) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slot of `hash`, taken from the least requested state when it is not tracked.
  Slot& Find(uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Demote(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The heap of slots by weight, least first.
  bool Less(uint32_t a, uint32_t b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Place(size_t at, uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SiftUp(size_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SiftDown(size_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);     // the first heap_.size() are in use
  std::vector<uint32_t> heap_ ABSL_GUARDED_BY(mu_);  // slot indices; reserved at construction
  absl::flat_hash_map<uint64_t, uint32_t> index_ ABSL_GUARDED_BY(mu_);  // hash → slot
  int64_t second_ ABSL_GUARDED_BY(mu_) = 0;
  size_t promoted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t promotions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t demotions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_HYBRID_HOT_KEYS_H_
