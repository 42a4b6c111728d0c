// Helpers shared by the algorithms' tests (algorithms_*_test.cc): times in µs (t0 = 1 700 000 000
// s after the epoch, a whole number of seconds but not of minutes), expected decisions, the state
// of one key whatever the algorithm and a decision on it, comparisons of states, and the
// EveryAlgorithm fixture (a test per algorithm). Plain values and functions: a KeyState belongs to
// one test.

#ifndef SLUICE_ALGO_ALGORITHMS_TESTING_H_
#define SLUICE_ALGO_ALGORITHMS_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <utility>
#include <vector>

#include "algo/algorithms.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"
#include "tests/support/units.h"

namespace sluice {

// Readable failure messages.
inline void PrintTo(const Decision& d, std::ostream* os) {
  *os << fmt::format("{{{} remaining={} retry_after_us={} reset_after_us={} delay_us={}}}",
                     d.allowed ? "allow" : "deny", d.remaining, d.retry_after_us, d.reset_after_us,
                     d.delay_us);
}
inline void PrintTo(Algorithm a, std::ostream* os) { *os << AlgorithmName(a); }

namespace algo::test {

using sluice::testing::kMinute;
using sluice::testing::kMs;
using sluice::testing::kSecond;
using sluice::testing::kT0;
inline constexpr int64_t kWeek = 7 * sluice::testing::kDay;
inline constexpr int64_t kWholeMinute = int64_t{1700000040} * kSecond;  // starts a minute
inline constexpr int64_t kNever = Decision::kNever;

// The decisions a test expects.
inline Decision Allow(int64_t remaining, int64_t reset_after_us, int64_t delay_us = 0) {
  return Decision{.allowed = true,
                  .remaining = remaining,
                  .retry_after_us = 0,
                  .reset_after_us = reset_after_us,
                  .delay_us = delay_us};
}

inline Decision Deny(int64_t remaining, int64_t retry_after_us, int64_t reset_after_us) {
  return Decision{.allowed = false,
                  .remaining = remaining,
                  .retry_after_us = retry_after_us,
                  .reset_after_us = reset_after_us,
                  .delay_us = 0};
}

// The start of the window of `window_us` that holds `t`.
inline int64_t AlignDown(int64_t t, int64_t window_us) { return t - t % window_us; }

// The state of one key, whatever the algorithm.
struct KeyState {
  CompactState compact;
  LogState log;

  bool IsIdle(const Limit& limit, int64_t now_us) const {
    return limit.algorithm == Algorithm::kSlidingLog ? log.IsIdle(now_us) : compact.IsIdle(now_us);
  }
};

// A decision of `limit`'s algorithm on `state`.
inline Decision Decide(KeyState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  if (limit.algorithm == Algorithm::kSlidingLog) {
    return DecideSlidingLog(state.log, now_us, limit, cost);
  }
  return DecideCompact(state.compact, now_us, limit, cost);
}

// The log entries that still count at now_us, as (time, cost).
inline std::vector<std::pair<int64_t, uint64_t>> CountingEntries(const LogState& log,
                                                                 int64_t now_us,
                                                                 int64_t window_us) {
  std::vector<std::pair<int64_t, uint64_t>> live;
  for (size_t i = log.head; i < log.entries.size(); ++i) {
    if (now_us - log.entries[i].at_us < window_us) {
      live.emplace_back(log.entries[i].at_us, log.entries[i].cost);
    }
  }
  return live;
}

// Whether two states behave the same from now_us on. The compact states must be bit-identical
// (they change only when a request is admitted); the log may have forgotten expired entries.
inline ::testing::AssertionResult SameState(const KeyState& a, const KeyState& b,
                                            const Limit& limit, int64_t now_us) {
  if (limit.algorithm == Algorithm::kSlidingLog) {
    if (CountingEntries(a.log, now_us, limit.window_us) !=
        CountingEntries(b.log, now_us, limit.window_us)) {
      return ::testing::AssertionFailure() << "the log entries differ";
    }
    return ::testing::AssertionSuccess();
  }
  if (a.compact == b.compact) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << fmt::format("states differ: {{{}, {}}} vs {{{}, {}}}", a.compact.idle_at_us,
                        a.compact.aux, b.compact.idle_at_us, b.compact.aux);
}

// Whether `s` is a new key's state as far as `limit` can tell at now_us.
inline bool IsFresh(const KeyState& s, const Limit& limit, int64_t now_us) {
  return limit.algorithm == Algorithm::kSlidingLog
             ? CountingEntries(s.log, now_us, limit.window_us).empty()
             : s.compact == CompactState{};
}

// Every algorithm, for the tests of each (EveryAlgorithm and those derived from it).
inline constexpr Algorithm kAllAlgorithms[] = {Algorithm::kTokenBucket, Algorithm::kLeakyBucket,
                                               Algorithm::kFixedWindow, Algorithm::kSlidingLog,
                                               Algorithm::kSlidingWindow};

// A test per algorithm (INSTANTIATE_TEST_SUITE_P with kAllAlgorithms).
class EveryAlgorithm : public ::testing::TestWithParam<Algorithm> {
 protected:
  Algorithm algorithm() const { return GetParam(); }
  // 5 per second, capacity 5.
  Limit Standard() const { return sluice::testing::WithCapacity(algorithm(), 5, kSecond, 5); }
};

}  // namespace algo::test
}  // namespace sluice

#endif  // SLUICE_ALGO_ALGORITHMS_TESTING_H_
