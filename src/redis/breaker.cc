#include "redis/breaker.h"

namespace sluice::redis {

bool Breaker::Allow() {
  const int64_t now_us = clock_->MonotonicMicros();
  absl::MutexLock lock(&mu_);
  switch (state_) {
    case State::kClosed:
      return true;
    case State::kOpen:
      if (now_us < retry_at_us_) return false;
      state_ = State::kHalfOpen;
      probing_ = true;
      return true;
    case State::kHalfOpen:
      if (probing_) return false;  // one probe at a time
      probing_ = true;
      return true;
  }
  return false;
}

void Breaker::Succeeded() {
  absl::MutexLock lock(&mu_);
  consecutive_failures_ = 0;
  probing_ = false;
  state_ = State::kClosed;
}

void Breaker::Failed() {
  const int64_t now_us = clock_->MonotonicMicros();
  absl::MutexLock lock(&mu_);
  probing_ = false;
  if (state_ == State::kHalfOpen ||
      (state_ == State::kClosed && ++consecutive_failures_ >= options_.failures_to_open)) {
    if (state_ == State::kClosed) ++opened_;
    state_ = State::kOpen;
    retry_at_us_ =
        now_us + std::chrono::duration_cast<std::chrono::microseconds>(options_.open_for).count();
  }
}

Breaker::State Breaker::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

bool Breaker::Healthy() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kClosed && consecutive_failures_ == 0;
}

uint64_t Breaker::opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

std::string_view Breaker::Name(State s) {
  switch (s) {
    case State::kClosed:
      return "closed";
    case State::kOpen:
      return "open";
    case State::kHalfOpen:
      return "half_open";
  }
  return "closed";
}

}  // namespace sluice::redis
