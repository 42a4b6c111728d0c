// Helpers shared by the memory store's tests: key names built without allocating, and the state
// a pure-function model keeps for one key (what the store must answer for a key it tracks).

#ifndef SLUICE_BACKEND_MEMORY_STORE_TESTING_H_
#define SLUICE_BACKEND_MEMORY_STORE_TESTING_H_

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "algo/algorithms.h"
#include "sluice/limit.h"

namespace sluice::store::test {

// Builds "<prefix><n>" in a buffer it owns, without allocating; the view lives until the next call.
class KeyName {
 public:
  std::string_view operator()(std::string_view prefix, uint64_t n) {
    std::copy(prefix.begin(), prefix.end(), buf_);
    char* end = std::to_chars(buf_ + prefix.size(), buf_ + sizeof buf_, n).ptr;
    return std::string_view(buf_, static_cast<size_t>(end - buf_));
  }

 private:
  char buf_[64];
};

// The state a pure-function model keeps for one key, whatever the algorithm.
struct ModelState {
  algo::CompactState compact;
  algo::LogState log;
};

inline Decision ModelDecide(ModelState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  if (limit.algorithm == Algorithm::kSlidingLog) {
    return algo::DecideSlidingLog(state.log, now_us, limit, cost);
  }
  return algo::DecideCompact(state.compact, now_us, limit, cost);
}

}  // namespace sluice::store::test

#endif  // SLUICE_BACKEND_MEMORY_STORE_TESTING_H_
