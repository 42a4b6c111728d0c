// Helpers shared by the memory store's tests: key names built without allocating, the state a
// pure-function model keeps for one key (what the store must answer for a key it tracks), and
// calls through the backend::Backend interface of a memory-side backend, which answers inline.

#ifndef SLUICE_BACKEND_MEMORY_STORE_TESTING_H_
#define SLUICE_BACKEND_MEMORY_STORE_TESTING_H_

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "algo/algorithms.h"
#include "backend/backend.h"
#include "gtest/gtest.h"
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

// A backend's answer to one Decide: the outcome and a decision per item.
struct Answer {
  bool allowed = false;
  int64_t decided_at_us = 0;
  std::vector<Decision> out;
};

// Asks `backend` to decide `items` at now_us; a memory-side backend answers before it returns.
inline Answer Ask(backend::Backend& backend, std::span<const backend::Item> items, int64_t now_us) {
  Answer a;
  a.out.resize(items.size());
  bool ran = false;
  backend.Decide(items, now_us, a.out, [&](const backend::Outcome& o) {
    ran = true;
    a.allowed = o.allowed;
    a.decided_at_us = o.decided_at_us;
  });
  EXPECT_TRUE(ran);
  return a;
}
inline Answer Ask(backend::Backend& backend, const backend::Item& item, int64_t now_us) {
  return Ask(backend, std::span(&item, 1), now_us);
}

// Resets `items` through `backend`, not waiting for the count it answers.
inline void ResetThrough(backend::Backend& backend, std::span<const backend::Item> items) {
  backend.Reset(items, [](absl::StatusOr<size_t>) {});
}
inline void ResetThrough(backend::Backend& backend, const backend::Item& item) {
  ResetThrough(backend, std::span(&item, 1));
}

}  // namespace sluice::store::test

#endif  // SLUICE_BACKEND_MEMORY_STORE_TESTING_H_
