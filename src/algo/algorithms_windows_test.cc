// The window algorithms of algo/algorithms.h, fixed_window, sliding_log and sliding_window: the
// worked examples of docs/algorithms.md, "Worked examples" (cited by heading), windows aligned to
// the epoch, where counting restarts, retries and what each remembers. Times are µs from kT0
// (algorithms_testing.h); window tests align their start explicitly.

#include <cstdint>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "algo/algorithms.h"
#include "algo/algorithms_testing.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"

namespace sluice::algo {
namespace {

using test::AlignDown;
using test::Allow;
using test::Decide;
using test::Deny;
using test::KeyState;
using test::kMinute;
using test::kMs;
using test::kNever;
using test::kSecond;
using test::kT0;
using testing::MakeLimit;

// ============================================================================================
// fixed_window
// ============================================================================================

TEST(FixedWindow, WindowsAreAlignedToTheEpoch) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100, kMinute);
  // "Fixed window: 100 per minute": t = 1700000000 s → start 1699999980 s, reset after 40 s.
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(99, 40 * kSecond));
  EXPECT_EQ(s.compact.idle_at_us, int64_t{1700000040} * kSecond);
}

TEST(FixedWindow, AdmitsNPerWindowThenDeniesUntilTheWindowEnd) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100, kMinute);
  const int64_t start = AlignDown(kT0, kMinute);
  KeyState s;
  for (int i = 1; i <= 100; ++i) {
    EXPECT_EQ(Decide(s, start + 20 * kSecond, limit, 1), Allow(100 - i, 40 * kSecond));
  }
  EXPECT_EQ(Decide(s, start + 20 * kSecond, limit, 1), Deny(0, 40 * kSecond, 40 * kSecond));
  EXPECT_EQ(Decide(s, start + kMinute - 1, limit, 1), Deny(0, 1, 1));
}

TEST(FixedWindow, CountingRestartsExactlyAtTheWindowEnd) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 3, kMinute);
  const int64_t end = AlignDown(kT0, kMinute) + kMinute;
  KeyState s;
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Decide(s, end - 1, limit, 1), Allow(3 - i, 1));
  EXPECT_EQ(Decide(s, end - 1, limit, 1), Deny(0, 1, 1));
  EXPECT_TRUE(s.IsIdle(limit, end));
  // "Fixed window: 100 per minute", the boundary burst: 2N admitted within 2 µs.
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Decide(s, end, limit, 1), Allow(3 - i, kMinute));
  EXPECT_EQ(Decide(s, end, limit, 1), Deny(0, kMinute, kMinute));
}

TEST(FixedWindow, CostAboveOneMustFitInWhatIsLeft) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 10, kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs, limit, 7), Allow(3, 900 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 200 * kMs, limit, 4), Deny(3, 800 * kMs, 800 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 200 * kMs, limit, 3), Allow(0, 800 * kMs));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 10), Allow(0, kSecond));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 11), Deny(0, kNever, kSecond));
}

// ============================================================================================
// fixed_window over calendar windows (Limit::calendar)
// ============================================================================================

int64_t UtcMicros(int y, int mo, int d, int h = 0, int mi = 0) {
  return absl::ToUnixMicros(
      absl::FromCivil(absl::CivilSecond(y, mo, d, h, mi, 0), absl::UTCTimeZone()));
}

Limit Quota(uint64_t n, const char* unit, const char* zone) {
  return CalendarLimit(n, *Calendar::Make(unit, zone));
}

TEST(CalendarFixedWindow, AMonthlyQuotaResetsAtLocalMidnightOnTheFirst) {
  // 3 a month in New York (UTC-5 in winter): January ends at 05:00 UTC on February 1st.
  const Limit limit = Quota(3, "calendar_month", "America/New_York");
  const int64_t feb1 = UtcMicros(2024, 2, 1, 5);
  KeyState s;
  EXPECT_EQ(Decide(s, UtcMicros(2024, 1, 3), limit, 1), Allow(2, feb1 - UtcMicros(2024, 1, 3)));
  EXPECT_EQ(Decide(s, UtcMicros(2024, 1, 20), limit, 2), Allow(0, feb1 - UtcMicros(2024, 1, 20)));
  const int64_t late = feb1 - kMinute;  // 23:59 on January 31st, local
  EXPECT_EQ(Decide(s, late, limit, 1), Deny(0, kMinute, kMinute));
  const Decision next = Decide(s, feb1, limit, 1);
  EXPECT_TRUE(next.allowed);
  EXPECT_EQ(next.remaining, 2);
  EXPECT_EQ(next.reset_after_us, UtcMicros(2024, 3, 1, 5) - feb1);  // February's 29 days
}

TEST(CalendarFixedWindow, ADayAcrossTheSpringChangeIs23Hours) {
  // Berlin, 31 March 2024: midnight is 23:00 UTC the day before; the day ends at 22:00 UTC.
  const Limit limit = Quota(1, "calendar_day", "Europe/Berlin");
  KeyState s;
  const Decision first = Decide(s, UtcMicros(2024, 3, 30, 23), limit, 1);
  EXPECT_EQ(first, Allow(0, 23 * 60 * kMinute));
  EXPECT_EQ(Decide(s, UtcMicros(2024, 3, 31, 21, 59), limit, 1), Deny(0, kMinute, kMinute));
  EXPECT_TRUE(Decide(s, UtcMicros(2024, 3, 31, 22), limit, 1).allowed);
}

TEST(CalendarFixedWindow, RefundsChargesAndOverdraftsKeepToTheCalendarWindow) {
  const Limit limit = Quota(2, "calendar_day", "Asia/Kolkata");  // midnight is 18:30 UTC
  const int64_t before = UtcMicros(2024, 5, 16, 18, 0), after = UtcMicros(2024, 5, 16, 19, 0);
  KeyState s;
  EXPECT_TRUE(Decide(s, before, limit, 2).allowed);
  // A refund after the local midnight gives nothing back to the new day.
  RefundCompact(s.compact, before, after, limit, 2);
  EXPECT_EQ(s.compact.idle_at_us, UtcMicros(2024, 5, 16, 18, 30));
  EXPECT_TRUE(Decide(s, after, limit, 2).allowed);
  EXPECT_FALSE(Decide(s, after, limit, 1).allowed);
  // Within the day it does.
  RefundCompact(s.compact, after, after + kMinute, limit, 1);
  EXPECT_TRUE(Decide(s, after + kMinute, limit, 1).allowed);
  // A charge counted in the day before is not charged to this one; one counted today is.
  ChargeCompact(s.compact, before, after + kMinute, limit, 5);
  EXPECT_EQ(s.compact.aux, 2u);
  ChargeCompact(s.compact, after, after + kMinute, limit, 5);
  EXPECT_EQ(s.compact.aux, 7u);
  // count_denied records past N, and ends with the local day.
  KeyState t;
  EXPECT_FALSE(DecideCompactCountingDenied(t.compact, after, limit, 3).allowed);
  EXPECT_EQ(t.compact, (CompactState{UtcMicros(2024, 5, 17, 18, 30), 3}));
}

// ============================================================================================
// sliding_log
// ============================================================================================

// "Sliding log: 3 per 10 s": L = 3, W = 10 s.
TEST(SlidingLog, WorkedExampleFromAlgorithmsDoc) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 3, 10 * kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(2, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 1), Allow(1, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 2 * kSecond, limit, 1), Allow(0, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 5 * kSecond, limit, 1), Deny(0, 5 * kSecond, 7 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 10500 * kMs, limit, 1), Allow(0, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 11 * kSecond, limit, 1), Allow(0, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 11500 * kMs, limit, 1), Deny(0, 500 * kMs, 9500 * kMs));
}

TEST(SlidingLog, EntryStopsCountingExactlyOneWindowAfterIt) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 1, 10 * kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(0, 10 * kSecond));
  // t - s == W - 1 still counts; t - s == W does not.
  EXPECT_EQ(Decide(s, kT0 + 10 * kSecond - 1, limit, 1), Deny(0, 1, 1));
  EXPECT_TRUE(s.IsIdle(limit, kT0 + 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 10 * kSecond, limit, 1), Allow(0, 10 * kSecond));
}

TEST(SlidingLog, RetryWaitsUntilEnoughOfTheOldestEntriesStopCounting) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 10, 10 * kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 2), Allow(8, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 3), Allow(5, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 2 * kSecond, limit, 4), Allow(1, 10 * kSecond));
  // Sum 9 at 3 s. Cost 3 waits for the entry at 0 s to stop counting (at 10 s), cost 6 also
  // for the one at 1 s (at 11 s), cost 10 for all three (at 12 s).
  EXPECT_EQ(Decide(s, kT0 + 3 * kSecond, limit, 3), Deny(1, 7 * kSecond, 9 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 3 * kSecond, limit, 6), Deny(1, 8 * kSecond, 9 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 3 * kSecond, limit, 10), Deny(1, 9 * kSecond, 9 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 3 * kSecond, limit, 11), Deny(1, kNever, 9 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 10 * kSecond, limit, 3), Allow(0, 10 * kSecond));
}

TEST(SlidingLog, TimeGoingBackwardsIsClampedToTheNewestEntry) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 2, 10 * kSecond);
  KeyState s;
  EXPECT_TRUE(Decide(s, kT0 + 5 * kSecond, limit, 1).allowed);
  // Decided as if at kT0 + 5 s: the entry counts, reset is a whole window.
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(0, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, 10 * kSecond, 10 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 15 * kSecond, limit, 2), Allow(0, 10 * kSecond));
}

TEST(SlidingLog, RequestsOfTheSameMicrosecondShareOneEntry) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 1000, kSecond);
  KeyState s;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(Decide(s, kT0, limit, 1).allowed);
  EXPECT_EQ(s.log.LiveEntries(), 1u);
  EXPECT_EQ(s.log.sum, 1000u);
}

TEST(SlidingLog, MemoryStaysBoundedByTheLiveEntries) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 50, kSecond);
  KeyState s;
  int64_t t = kT0;
  for (int i = 0; i < 100000; ++i) {
    Decide(s, t, limit, 1);
    EXPECT_LE(s.log.LiveEntries(), 50u);
    ASSERT_LE(s.log.entries.size(), 2 * 50u + 64) << "at request " << i;
    t += 7 * kMs;
  }
}

// ============================================================================================
// sliding_window
// ============================================================================================

// "Sliding window: Cloudflare's example": 42 requests in the previous minute, 18 in the first
// 15 s of this one, L = 50. The estimate 42*45/60 + 18 = 49.5; one more is denied at e = 15 s,
// allowed at 20 s.
TEST(SlidingWindow, CloudflareWorkedExample) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 50, kMinute);
  const int64_t start = AlignDown(kT0, kMinute) + kMinute;  // the current window
  KeyState s;
  EXPECT_EQ(Decide(s, start - kMinute, limit, 42), Allow(8, 2 * kMinute));
  for (int i = 0; i < 18; ++i) {
    // estimate = 31.5 + (i + 1); remaining = floor(50 - estimate).
    EXPECT_EQ(Decide(s, start + 15 * kSecond, limit, 1), Allow(17 - i, 105 * kSecond))
        << "request #" << i + 1;
  }
  // 42*45 + 19*60 = 3030 > 3000. The estimate reaches 49 after 30/42 s: 714285.71 µs.
  EXPECT_EQ(Decide(s, start + 15 * kSecond, limit, 1), Deny(0, 714286, 105 * kSecond));
  EXPECT_FALSE(Decide(s, start + 15 * kSecond + 714285, limit, 1).allowed);
  {
    KeyState copy = s;
    EXPECT_TRUE(Decide(copy, start + 15 * kSecond + 714286, limit, 1).allowed);
  }
  // At e = 20 s: 42*40 + 19*60 = 2820 <= 3000; estimate 28 + 19 = 47.
  EXPECT_EQ(Decide(s, start + 20 * kSecond, limit, 1), Allow(3, 100 * kSecond));
}

TEST(SlidingWindow, CurrentCountBecomesPreviousExactlyAtTheWindowEnd) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 10, 10 * kSecond);
  const int64_t start = AlignDown(kT0, 10 * kSecond);
  const int64_t next = start + 10 * kSecond;
  KeyState s;
  EXPECT_EQ(Decide(s, next - 1, limit, 10), Allow(0, 10 * kSecond + 1));
  EXPECT_EQ(Decide(s, next - 1, limit, 1), Deny(0, 1 + kSecond, 10 * kSecond + 1));
  // e = 0 of the next window: estimate 10 * 10/10 + 0 = 10, falling by 1 per second.
  EXPECT_EQ(Decide(s, next, limit, 1), Deny(0, kSecond, 10 * kSecond));
  EXPECT_EQ(Decide(s, next + kSecond - 1, limit, 1).allowed, false);
  EXPECT_EQ(Decide(s, next + kSecond, limit, 1), Allow(0, 19 * kSecond));
}

TEST(SlidingWindow, RetryCanLandInTheNextWindow) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 10, 10 * kSecond);
  const int64_t start = AlignDown(kT0, 10 * kSecond);
  KeyState s;
  // No previous window; 10 in this one at e = 5 s. The estimate stays 10 until the window
  // ends, then falls as 10 * (W - e') / W: 9 at e' = 1 s.
  EXPECT_EQ(Decide(s, start + 5 * kSecond, limit, 10), Allow(0, 15 * kSecond));
  EXPECT_EQ(Decide(s, start + 5 * kSecond, limit, 1), Deny(0, 6 * kSecond, 15 * kSecond));
  // A cost of 10 needs the estimate at 0: the end of the next window.
  EXPECT_EQ(Decide(s, start + 5 * kSecond, limit, 10), Deny(0, 15 * kSecond, 15 * kSecond));
  EXPECT_EQ(Decide(s, start + 11 * kSecond - 1, limit, 1).allowed, false);
  EXPECT_EQ(Decide(s, start + 11 * kSecond, limit, 1), Allow(0, 19 * kSecond));
}

TEST(SlidingWindow, EstimateReachesZeroAtTheEndOfTheNextWindow) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 4, kSecond);
  const int64_t start = AlignDown(kT0, kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, start + 250 * kMs, limit, 4), Allow(0, 1750 * kMs));
  EXPECT_FALSE(s.IsIdle(limit, start + 2 * kSecond - 1));
  // The estimate is 4 * 1/1000000 > 0: remaining 3, a cost of 4 waits 1 µs.
  EXPECT_EQ(Decide(s, start + 2 * kSecond - 1, limit, 4), Deny(3, 1, 1));
  EXPECT_TRUE(s.IsIdle(limit, start + 2 * kSecond));
  EXPECT_EQ(Decide(s, start + 2 * kSecond, limit, 4), Allow(0, 2 * kSecond));
}

TEST(SlidingWindow, TwoWindowsLaterEverythingIsForgotten) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 4, kSecond);
  const int64_t start = AlignDown(kT0, kSecond);
  KeyState s;
  EXPECT_TRUE(Decide(s, start, limit, 4).allowed);
  EXPECT_TRUE(Decide(s, start + kSecond + 999 * kMs, limit, 3).allowed);  // est 0.004 + 0
  // Two windows after the second request's window: both counts are gone.
  EXPECT_EQ(Decide(s, start + 3 * kSecond, limit, 4), Allow(0, 2 * kSecond));
}

TEST(SlidingWindow, RemainingIsTheFloorOfNMinusTheEstimate) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 10, kSecond);
  const int64_t start = AlignDown(kT0, kSecond);
  KeyState s;
  EXPECT_TRUE(Decide(s, start, limit, 3).allowed);
  // At e = 100 ms of the next window: estimate 3 * 0.9 + 1 = 3.7, remaining 6.
  EXPECT_EQ(Decide(s, start + 1100 * kMs, limit, 1), Allow(6, 1900 * kMs));
}

}  // namespace
}  // namespace sluice::algo
