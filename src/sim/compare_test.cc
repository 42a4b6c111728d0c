#include "sim/compare.h"

#include "gtest/gtest.h"
#include "tests/support/limits.h"

namespace sluice::sim {
namespace {

constexpr int64_t kWindow = 1000;  // µs
constexpr int64_t kStart = 50 * kWindow;

using testing::MakeLimit;

Trace OneKey(std::initializer_list<int64_t> times) {
  Trace trace{.keys = {"a"}, .arrivals = {}};
  for (const int64_t t : times) trace.arrivals.push_back({.t_us = t});
  return trace;
}

// A fixed window of 2 per 1000 µs, two requests at the end of a window and two at the start of
// the next: the window admits all four, the exact log (at most 2 in any 1000 µs) only the first
// two; the next window's third request is refused by both.
TEST(SimAccuracy, FixedWindowAcrossABoundaryByHand) {
  const auto a = MeasureAccuracy(MakeLimit(Algorithm::kFixedWindow, 2, kWindow),
                                 OneKey({900, 950, 1000, 1050, 1100}), kStart);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->decisions, 5u);
  EXPECT_EQ(a->admitted, 4u);
  EXPECT_EQ(a->false_allows, 2u);
  EXPECT_EQ(a->false_denies, 0u);
  EXPECT_EQ(a->most_in_window, 4u);
}

// The exact log itself is never wrong, and never holds more than N in a span of W.
TEST(SimAccuracy, TheExactLogIsNeverWrong) {
  const auto a = MeasureAccuracy(MakeLimit(Algorithm::kSlidingLog, 2, kWindow),
                                 OneKey({900, 950, 1000, 1050, 1900, 1950, 2000}), kStart);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->false_allows + a->false_denies, 0u);
  EXPECT_EQ(a->admitted, 4u);  // 900, 950, then 1900, 1950 (1000 µs after)
  EXPECT_EQ(a->most_in_window, 2u);
}

// A sliding window of 2 per 1000 µs weighs the window before as if its requests were spread
// evenly. Two at the very end of a window: half-way through the next the estimate is 2 x 1/2 + 1
// = 2, so a request is admitted, although the exact log still holds both (a false allow). Two
// at the very start of a window: 100 µs into the next the estimate is 2 x 9/10 + 1 > 2, so a
// request is refused, although the log has forgotten both (a false deny).
TEST(SimAccuracy, SlidingWindowAgainstTheLogByHand) {
  auto a = MeasureAccuracy(MakeLimit(Algorithm::kSlidingWindow, 2, kWindow),
                           OneKey({980, 990, 1000, 1500}), kStart);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->admitted, 3u);  // 980, 990, 1500
  EXPECT_EQ(a->false_allows, 1u);
  EXPECT_EQ(a->false_denies, 0u);
  a = MeasureAccuracy(MakeLimit(Algorithm::kSlidingWindow, 2, kWindow),
                      OneKey({1010, 1020, 2100, 2600}), kStart);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->admitted, 3u);  // 1010, 1020, 2600
  EXPECT_EQ(a->false_allows, 0u);
  EXPECT_EQ(a->false_denies, 1u);
}

}  // namespace
}  // namespace sluice::sim
