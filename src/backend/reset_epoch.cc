#include "backend/reset_epoch.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace sluice::backend {

namespace {
constexpr int64_t kLongAgo = std::numeric_limits<int64_t>::min() / 2;
}  // namespace

ResetEpochWatch::ResetEpochWatch(Backend* source, OnChange on_change)
    : source_(source), on_change_(std::move(on_change)), read_at_(kLongAgo), fresh_at_(kLongAgo) {}

void ResetEpochWatch::MaybeRead(int64_t mono) {
  {
    absl::MutexLock lock(&mu_);
    if (reading_ || mono - read_at_ < kReadUs) return;
    reading_ = true;
    read_at_ = mono;
  }
  source_->ReadResetEpoch([this, asked_at = mono](absl::StatusOr<int64_t> epoch) {
    bool changed = false;
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      failing_.store(!epoch.ok(), std::memory_order_release);
      if (!epoch.ok()) return;  // not fresh: the keeper stops answering soon
      changed = known_ && *epoch != value_;
      if (changed) ++changes_;
      known_ = true;
      value_ = *epoch;
    }
    if (changed) on_change_(asked_at);
    int64_t fresh = fresh_at_.load(std::memory_order_relaxed);
    while (fresh < asked_at &&
           !fresh_at_.compare_exchange_weak(fresh, asked_at, std::memory_order_release)) {
    }
  });
}

uint64_t ResetEpochWatch::changes() const {
  absl::MutexLock lock(&mu_);
  return changes_;
}

}  // namespace sluice::backend
