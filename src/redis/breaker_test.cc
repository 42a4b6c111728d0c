// Tests for the circuit breaker (breaker.h), on a manual clock: it opens after enough failures
// in a row, refuses for exactly `open_for` of the clock's monotonic time, then lets one probe
// through at a time.

#include "redis/breaker.h"

#include <chrono>
#include <cstdint>

#include "gtest/gtest.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kMs = 1000;  // µs

class BreakerTest : public ::testing::Test {
 protected:
  // Opens the breaker: `failures_to_open` failed calls in a row.
  void Open() {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(breaker_.Allow());
      breaker_.Failed();
    }
    ASSERT_EQ(breaker_.state(), Breaker::State::kOpen);
  }

  ManualClock clock_{int64_t{1700000000} * 1000000};
  Breaker breaker_{{.failures_to_open = 3, .open_for = 500ms}, &clock_};
};

TEST_F(BreakerTest, OpensAfterFailuresInARowOnly) {
  breaker_.Failed();
  breaker_.Failed();
  breaker_.Succeeded();  // the run is broken
  breaker_.Failed();
  breaker_.Failed();
  EXPECT_EQ(breaker_.state(), Breaker::State::kClosed);
  EXPECT_FALSE(breaker_.Healthy());  // closed, but the last call failed
  breaker_.Failed();
  EXPECT_EQ(breaker_.state(), Breaker::State::kOpen);
  EXPECT_EQ(breaker_.opened(), 1u);
}

TEST_F(BreakerTest, RefusesForOpenForThenLetsOneProbeThrough) {
  Open();
  clock_.Advance(500 * kMs - 1);
  EXPECT_FALSE(breaker_.Allow());
  EXPECT_EQ(breaker_.state(), Breaker::State::kOpen);
  clock_.Advance(1);
  EXPECT_TRUE(breaker_.Allow());  // the probe
  EXPECT_EQ(breaker_.state(), Breaker::State::kHalfOpen);
  EXPECT_FALSE(breaker_.Allow());  // one at a time
  breaker_.Succeeded();
  EXPECT_EQ(breaker_.state(), Breaker::State::kClosed);
  EXPECT_TRUE(breaker_.Healthy());
  EXPECT_TRUE(breaker_.Allow());
}

TEST_F(BreakerTest, AFailedProbeOpensItForAnotherOpenFor) {
  Open();
  clock_.Advance(500 * kMs);
  ASSERT_TRUE(breaker_.Allow());
  clock_.Advance(100 * kMs);
  breaker_.Failed();  // the probe failed: open again, counted from now
  EXPECT_EQ(breaker_.state(), Breaker::State::kOpen);
  EXPECT_EQ(breaker_.opened(), 1u);  // a re-open after a probe is the same outage
  clock_.Advance(500 * kMs - 1);
  EXPECT_FALSE(breaker_.Allow());
  clock_.Advance(1);
  EXPECT_TRUE(breaker_.Allow());
}

TEST_F(BreakerTest, AStepOfTheWallClockDoesNotEndTheWait) {
  Open();
  clock_.Set(clock_.NowMicros() + int64_t{3600} * 1000000);  // NTP steps the wall clock an hour
  EXPECT_FALSE(breaker_.Allow());
  clock_.Advance(500 * kMs);
  EXPECT_TRUE(breaker_.Allow());
}

}  // namespace
}  // namespace sluice::redis
