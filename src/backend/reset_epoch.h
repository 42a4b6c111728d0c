// ResetEpochWatch: keeps an instance's copies of shared states (the over-limit cache's denials,
// leased units) honest after resets elsewhere, by reading the backend's reset epoch: a reset
// anywhere is seen within kFreshUs plus a round trip, and a keeper stops answering within
// kFreshUs when the backend cannot be read.
//
// Thread safety: safe for concurrent use.
// Ownership: `source` is not owned; this must outlive the source's calls. Units: microseconds.
//
// Design: docs/hybrid.md#the-reset-epoch (Fresh, MaybeRead, on_change).

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
