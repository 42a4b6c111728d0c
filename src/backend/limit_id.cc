#include "backend/limit_id.h"

#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::backend {

// The XXH3 hash of node_path, a zero byte, plan and LimitId(limit). This runs for every applied
// limit of every request: when the bytes fit on the stack they are hashed in one call, which
// skips the streaming state's set-up and gives the same value (XXH3 hashes an input the same
// whether it gets it at once or in pieces).
uint64_t RuleLimitId(std::string_view node_path, std::string_view plan, const Limit& limit) {
  const uint64_t definition = LimitId(limit);
  char bytes[256];
  const size_t size = node_path.size() + 1 + plan.size() + sizeof definition;
  if (size <= sizeof bytes) {
    char* out = std::copy(node_path.begin(), node_path.end(), bytes);
    *out++ = '\0';
    out = std::copy(plan.begin(), plan.end(), out);
    std::memcpy(out, &definition, sizeof definition);
    return XXH3_64bits(bytes, size);
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, node_path.data(), node_path.size());
  XXH3_64bits_update(&state, "\0", 1);
  XXH3_64bits_update(&state, plan.data(), plan.size());
  XXH3_64bits_update(&state, &definition, sizeof definition);
  return XXH3_64bits_digest(&state);
}

}  // namespace sluice::backend
