// The backend stack of the library (sluice::RateLimiter, include/sluice/rate_limiter.h), built
// from its options: the memory store as Options::memory sizes it, or, with Options::redis,
// Failover over the Redis store with no local backend (the library's failure policies, open and
// closed, never decide locally). Like Stack (stack.h), the one place the library meets the
// concrete backends: the library itself sees a backend::Backend.

#ifndef SLUICE_STACK_LIBRARY_STACK_H_
#define SLUICE_STACK_LIBRARY_STACK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/holds.h"
#include "sluice/clock.h"
#include "sluice/rate_limiter.h"

namespace sluice::stack {

class LibraryStack {
 public:
  // On Redis, connects and waits up to RedisOptions::connect_wait_us for the first connection,
  // so that a refused login is an error here. `clock` (the memory store's) is not owned and must
  // outlive the stack.
  static absl::StatusOr<std::unique_ptr<LibraryStack>> Build(const RateLimiter::Options& options,
                                                             const Clock* clock);

  // Calls still in flight on Redis are failed (their callbacks run) before this returns.
  ~LibraryStack();
  LibraryStack(const LibraryStack&) = delete;
  LibraryStack& operator=(const LibraryStack&) = delete;

  // The top of the stack: what the limiter decides on.
  backend::Backend& backend() const { return *top_; }
  // The concurrency limits' holds (sluice::ConcurrencyLimiter): in memory, or on Redis.
  backend::Holds& holds() const;
  // For messages: "memory", "redis 127.0.0.1:6379", "redis cluster via ...".
  const std::string& where() const { return where_; }

  // (Defined in library_stack.cc.)
  struct Parts;

 private:
  explicit LibraryStack(std::unique_ptr<Parts> parts);

  std::unique_ptr<Parts> parts_;
  backend::Backend* top_ = nullptr;
  std::string where_ = "memory";
};

}  // namespace sluice::stack

#endif  // SLUICE_STACK_LIBRARY_STACK_H_
