// ResetEpochWatch: keeps an instance's copies of shared states honest after resets elsewhere.
//
// What an instance keeps of states that live on a shared backend (the over-limit cache's
// denials, leased units) holds only until someone resets those states (admin "unblock this
// customer"), through any instance. The backend's reset epoch (Backend::ReadResetEpoch) changes
// with every reset. The keeper asks Fresh() before answering from what it keeps, and calls
// MaybeRead() while it keeps anything: a reading is asked for at most every kReadUs, a keeper
// answers only while its last good reading is less than kFreshUs old, and when a reading differs
// from the one before, `on_change` runs (with the monotonic time that reading was asked, so the
// keeper can also drop what was on its way then) before the reading counts. So a reset anywhere
// is seen within kFreshUs plus a round trip; a backend that cannot be read stops the keeper
// answering within kFreshUs.
//
// Safe for concurrent use. `source` is not owned; a reading in flight calls back into this
// object, which must outlive the source's calls (as the stack's parts do: the Redis client goes
// first).

#ifndef SLUICE_BACKEND_RESET_EPOCH_H_
#define SLUICE_BACKEND_RESET_EPOCH_H_

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backend/backend.h"

namespace sluice::backend {

class ResetEpochWatch {
 public:
  static constexpr int64_t kFreshUs = 500000;
  static constexpr int64_t kReadUs = 250000;
  using OnChange = std::function<void(int64_t asked_at)>;

  ResetEpochWatch(Backend* source, OnChange on_change);

  // Whether the last good reading was asked less than kFreshUs before `mono` (monotonic µs).
  bool Fresh(int64_t mono) const {
    return mono - fresh_at_.load(std::memory_order_acquire) < kFreshUs;
  }
  // Whether the last reading that came back failed (the backend is down or unreachable).
  bool Failing() const { return failing_.load(std::memory_order_acquire); }
  // Asks for a reading if the last one was asked kReadUs or more before `mono` and none is in
  // flight.
  void MaybeRead(int64_t mono);
  // Readings that differed from the one before.
  uint64_t changes() const;

 private:
  Backend* const source_;
  const OnChange on_change_;
  mutable absl::Mutex mu_;
  bool known_ ABSL_GUARDED_BY(mu_) = false;  // a reading came
  int64_t value_ ABSL_GUARDED_BY(mu_) = 0;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  int64_t read_at_ ABSL_GUARDED_BY(mu_);  // when the last reading was asked
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> fresh_at_;  // when the last good reading was asked
  std::atomic<bool> failing_{false};
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_RESET_EPOCH_H_
