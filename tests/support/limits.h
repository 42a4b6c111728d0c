// Limit builders for tests: a sluice::Limit spelled at the call site by its algorithm, N (requests
// per window), W (the window, in µs, as Limit::window_us) and B (the burst; unset unless given).
// Plain functions of their arguments: safe from any thread. Nothing is validated: a test may build
// the invalid limits that it means to see refused.

#ifndef SLUICE_TESTS_SUPPORT_LIMITS_H_
#define SLUICE_TESTS_SUPPORT_LIMITS_H_

#include <cstdint>
#include <optional>

#include "sluice/limit.h"

namespace sluice::testing {

// N per W of `algorithm`, with burst B when given.
Limit MakeLimit(Algorithm algorithm, uint64_t requests, int64_t window_us,
                std::optional<uint64_t> burst = std::nullopt);

// The same, one algorithm each: a token bucket of N per W (capacity B, else N); a leaky bucket of
// N per W (a queue of B, else none); a fixed window of N per W.
Limit TokenBucket(uint64_t requests, int64_t window_us,
                  std::optional<uint64_t> burst = std::nullopt);
Limit LeakyBucket(uint64_t requests, int64_t window_us,
                  std::optional<uint64_t> burst = std::nullopt);
Limit FixedWindow(uint64_t requests, int64_t window_us);

// A limit of `algorithm` whose capacity (Limit::Capacity: the most admitted at one instant) is
// `capacity`: a token bucket of N per W with burst `capacity`, a leaky bucket of N per W with a
// queue of `capacity` - 1, a window algorithm of `capacity` per W (N unused). `capacity` >= 1.
Limit WithCapacity(Algorithm algorithm, uint64_t requests, int64_t window_us, uint64_t capacity);

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_LIMITS_H_
