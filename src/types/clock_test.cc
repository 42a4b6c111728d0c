// Tests for sluice/clock.h: the manual clock moves its two readings the way real time does, and
// the system's monotonic reading never goes back.

#include "sluice/clock.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace sluice {
namespace {

constexpr int64_t kT0 = int64_t{1700000000} * 1000000;

TEST(ManualClock, AdvanceMovesWallAndMonotonicTimeTogether) {
  ManualClock clock(kT0);
  const int64_t monotonic = clock.MonotonicMicros();
  clock.Advance(1500);
  EXPECT_EQ(clock.NowMicros(), kT0 + 1500);
  EXPECT_EQ(clock.MonotonicMicros(), monotonic + 1500);
}

TEST(ManualClock, SetStepsWallTimeOnly) {
  ManualClock clock(kT0, /*monotonic_us=*/42);
  clock.Set(kT0 - 60000000);  // the wall clock is stepped back a minute
  EXPECT_EQ(clock.NowMicros(), kT0 - 60000000);
  EXPECT_EQ(clock.MonotonicMicros(), 42);
}

TEST(ManualClock, MonotonicTimeStartsWellAfterZero) {
  // Code that takes a zero reading for "never" must see a start long after it.
  EXPECT_EQ(ManualClock().MonotonicMicros(), ManualClock::kMonotonicStartMicros);
  EXPECT_GT(ManualClock::kMonotonicStartMicros, int64_t{3600} * 1000000);
}

TEST(SystemClock, MonotonicTimeNeverGoesBack) {
  const Clock& clock = *SystemClock::Get();
  int64_t last = clock.MonotonicMicros();
  EXPECT_GT(last, 0);
  for (int i = 0; i < 1000; ++i) {
    const int64_t now = clock.MonotonicMicros();
    ASSERT_GE(now, last);
    last = now;
  }
}

}  // namespace
}  // namespace sluice
