// Reservations kept in this process (backend/reservations.h), for the memory store: a map under
// one lock, expired ones dropped as new ones come (amortised, so the map stays within the live
// ones and twice the pruning step), at most `max` at once.

#ifndef SLUICE_BACKEND_MEMORY_MEMORY_RESERVATIONS_H_
#define SLUICE_BACKEND_MEMORY_MEMORY_RESERVATIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "backend/reservations.h"

namespace sluice::store {

class MemoryReservations : public backend::Reservations {
 public:
  explicit MemoryReservations(size_t max = size_t{1} << 20) : max_(max) {}

  void Put(std::string id, std::string text, int64_t now_us, int64_t ttl_us, PutDone done) override;
  void Take(std::string_view id, int64_t now_us, TakeDone done) override;

  // How many are kept, expired ones not yet dropped included (for tests).
  size_t size() const;

 private:
  struct Kept {
    std::string text;
    int64_t expires_us = 0;
  };
  const size_t max_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Kept> kept_ ABSL_GUARDED_BY(mu_);
  size_t since_prune_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::store

#endif  // SLUICE_BACKEND_MEMORY_MEMORY_RESERVATIONS_H_
