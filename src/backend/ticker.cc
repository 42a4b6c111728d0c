#include "backend/ticker.h"

#include <utility>

namespace sluice::backend {

Ticker::Ticker(absl::Duration interval, std::function<void()> tick)
    : interval_(interval), tick_(std::move(tick)) {
  thread_ = std::thread([this] { Run(); });
}

void Ticker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Ticker::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_);
    if (stopping_) break;
    mu_.Unlock();
    tick_();
    mu_.Lock();
  }
}

}  // namespace sluice::backend
