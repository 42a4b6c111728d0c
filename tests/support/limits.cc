#include "tests/support/limits.h"

namespace sluice::testing {

Limit MakeLimit(Algorithm algorithm, uint64_t requests, int64_t window_us,
                std::optional<uint64_t> burst) {
  return Limit{
      .algorithm = algorithm, .requests = requests, .window_us = window_us, .burst = burst};
}

Limit TokenBucket(uint64_t requests, int64_t window_us, std::optional<uint64_t> burst) {
  return MakeLimit(Algorithm::kTokenBucket, requests, window_us, burst);
}

Limit LeakyBucket(uint64_t requests, int64_t window_us, std::optional<uint64_t> burst) {
  return MakeLimit(Algorithm::kLeakyBucket, requests, window_us, burst);
}

Limit FixedWindow(uint64_t requests, int64_t window_us) {
  return MakeLimit(Algorithm::kFixedWindow, requests, window_us);
}

Limit WithCapacity(Algorithm algorithm, uint64_t requests, int64_t window_us, uint64_t capacity) {
  switch (algorithm) {
    case Algorithm::kTokenBucket:
      return MakeLimit(algorithm, requests, window_us, capacity);
    case Algorithm::kLeakyBucket:
      return MakeLimit(algorithm, requests, window_us, capacity - 1);
    default:
      return MakeLimit(algorithm, capacity, window_us);
  }
}

}  // namespace sluice::testing
