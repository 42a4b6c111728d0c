#include "backend/memory/state_generations.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::store {

uint64_t StateHash(const backend::Item& item) {
  return XXH3_64bits_withSeed(item.key.data(), item.key.size(), item.limit_id);
}

uint64_t NewFrontId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace sluice::store
