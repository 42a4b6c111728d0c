#include "backend/memory/memory_reservations.h"

#include <utility>

namespace sluice::store {

void MemoryReservations::Put(std::string id, std::string text, int64_t now_us, int64_t ttl_us,
                             PutDone done) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (++since_prune_ >= kept_.size() / 2 + 64 || kept_.size() >= max_) {
      since_prune_ = 0;
      absl::erase_if(kept_,
                     [now_us](const auto& entry) { return entry.second.expires_us <= now_us; });
    }
    if (kept_.size() >= max_) {
      status = absl::ResourceExhaustedError(
          "too many reservations waiting to be settled in this process");
    } else {
      kept_[std::move(id)] = {.text = std::move(text), .expires_us = now_us + ttl_us};
    }
  }
  done(status);
}

void MemoryReservations::Take(std::string_view id, int64_t now_us, TakeDone done) {
  absl::StatusOr<std::string> out = absl::NotFoundError("no such reservation");
  {
    absl::MutexLock lock(&mu_);
    if (auto it = kept_.find(absl::string_view(id.data(), id.size())); it != kept_.end()) {
      if (it->second.expires_us > now_us) out = std::move(it->second.text);
      kept_.erase(it);
    }
  }
  done(std::move(out));
}

size_t MemoryReservations::size() const {
  absl::MutexLock lock(&mu_);
  return kept_.size();
}

}  // namespace sluice::store
