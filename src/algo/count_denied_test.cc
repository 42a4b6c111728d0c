// count_denied (algo::DecideCompactCountingDenied, algo::DecideSlidingLogCountingDenied): a
// request's cost is recorded even when it does not fit, and the answer is still a denial. Per
// algorithm: the overdraft is recorded, later requests wait for it, a look (cost 0) denies while
// it lasts and allows after; a sliding_log stays within N + 1 entries; the caps hold. Then the
// long run of an AI-Gateway-shaped exchange (a look at request time, a report of N tokens after
// it): every report is recorded, and what is recorded keeps the limit's long-run rate.

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "algo/algorithms.h"
#include "algo/algorithms_testing.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"

namespace sluice::algo::test {
namespace {

// A decision with count_denied on `state`, whatever the algorithm.
Decision DecideCounting(KeyState& state, int64_t now_us, const Limit& limit, uint64_t cost) {
  if (limit.algorithm == Algorithm::kSlidingLog) {
    return DecideSlidingLogCountingDenied(state.log, now_us, limit, cost);
  }
  return DecideCompactCountingDenied(state.compact, now_us, limit, cost);
}

// A look (cost 0) that leaves `state` as it was.
Decision Look(KeyState& state, int64_t now_us, const Limit& limit) {
  KeyState before = state;
  const Decision d = Decide(state, now_us, limit, 0);
  EXPECT_TRUE(SameState(before, state, limit, now_us)) << "a look changed the state";
  return d;
}

// What the state holds recorded at now_us, in units: a bucket's debt (rounded up), a window's
// count in now's window (with what an overdraft carries into it: N for each window before the
// last one it reaches, as algorithms.h describes the states), a log's sum.
uint64_t Held(const KeyState& s, int64_t now_us, const Limit& limit) {
  const int64_t w = limit.window_us;
  const uint64_t n = limit.requests;
  const CompactState& c = s.compact;
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket: {
      if (c.IsIdle(now_us)) return 0;
      const int64_t floor_tat = c.idle_at_us - (c.aux != 0 ? 1 : 0);
      const __int128 debt =
          static_cast<__int128>(floor_tat - now_us) * n + static_cast<__int128>(c.aux);
      return static_cast<uint64_t>((debt + w - 1) / w);
    }
    case Algorithm::kFixedWindow: {
      if (c.IsIdle(now_us)) return 0;
      const int64_t end = AlignDown(now_us, w) + w;
      return c.aux + static_cast<uint64_t>((c.idle_at_us - end) / w) * n;
    }
    case Algorithm::kSlidingWindow: {
      if (c.IsIdle(now_us)) return 0;
      const uint64_t cur = c.aux & 0xFFFFFFFFu;
      const int64_t start = (cur > 0 ? c.idle_at_us - w : c.idle_at_us) - w;
      const int64_t current = AlignDown(now_us, w);
      if (start > current) return cur + static_cast<uint64_t>((start - current) / w) * n;
      return start == current ? cur : 0;
    }
    case Algorithm::kSlidingLog: {
      uint64_t sum = 0;
      for (const auto& [at, cost] : CountingEntries(s.log, now_us, w)) sum += cost;
      return sum;
    }
  }
  return 0;
}

class CountDeniedTest : public EveryAlgorithm {};

INSTANTIATE_TEST_SUITE_P(Algorithms, CountDeniedTest, ::testing::ValuesIn(kAllAlgorithms),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

// 5 per second, capacity 5, all taken at t0; then 5 more with count_denied: denied, recorded.
TEST_P(CountDeniedTest, AnOverdraftIsRecordedAndTheAnswerIsStillADenial) {
  const Limit limit = Standard();
  KeyState s;
  ASSERT_TRUE(DecideCounting(s, kT0, limit, 5).allowed);
  const KeyState full = s;
  const Decision d = DecideCounting(s, kT0, limit, 5);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_FALSE(SameState(full, s, limit, kT0)) << "nothing was recorded";
  EXPECT_EQ(Held(s, kT0, limit), 10u);
  // When a request of the same cost would fit again: a bucket once its 10 units of debt are
  // repaid (2 s); a fixed window (upstream's counter) or the log when the t0 units stop counting
  // (1 s); a sliding window once nothing weighs in its estimate: the 5 past the limit carried
  // into the next window, and counting in the estimate of the one after (3 s).
  int64_t retry = 2 * kSecond;
  if (algorithm() == Algorithm::kSlidingLog || algorithm() == Algorithm::kFixedWindow) {
    retry = kSecond;
  }
  if (algorithm() == Algorithm::kSlidingWindow) retry = 3 * kSecond;
  EXPECT_EQ(d.retry_after_us, retry);
  EXPECT_GT(d.reset_after_us, 0);
  // The request it tells to retry is indeed admitted then, not a microsecond before.
  KeyState early = s, on_time = s;
  EXPECT_FALSE(Decide(early, kT0 + d.retry_after_us - 1, limit, 5).allowed);
  EXPECT_TRUE(Decide(on_time, kT0 + d.retry_after_us, limit, 5).allowed);
}

TEST_P(CountDeniedTest, LaterRequestsWaitUntilTheOverdraftIsRepaid) {
  const Limit limit = Standard();
  KeyState s;
  ASSERT_TRUE(DecideCounting(s, kT0, limit, 5).allowed);
  ASSERT_FALSE(DecideCounting(s, kT0, limit, 5).allowed);
  // One unit fits again: a bucket when 6 of its 10 units are repaid (1.2 s; 0.2 s without the
  // overdraft); a fixed window or the log when the t0 units stop counting (1 s); a sliding
  // window in the window after the carried one, once the 5 carried weigh 5 * (W - e) / W + 1 <= 5
  // (e = 0.2 W: 2.2 s, 1 s later than 5 without an overdraft would).
  int64_t open_at = 0;
  switch (algorithm()) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      open_at = kT0 + 1200 * kMs;
      break;
    case Algorithm::kSlidingLog:
    case Algorithm::kFixedWindow:
      open_at = kT0 + kSecond;
      break;
    case Algorithm::kSlidingWindow:
      open_at = kT0 + 2200 * kMs;
      break;
  }
  for (int64_t t = kT0 + 100 * kMs; t < open_at; t += 100 * kMs) {
    KeyState copy = s;
    EXPECT_FALSE(Decide(copy, t, limit, 1).allowed) << (t - kT0) / kMs << " ms";
  }
  KeyState before = s;
  EXPECT_FALSE(Decide(before, open_at - 1, limit, 1).allowed);
  EXPECT_TRUE(Decide(s, open_at, limit, 1).allowed);
}

TEST_P(CountDeniedTest, ALookDeniesWhileTheOverdraftLastsAndAllowsAfter) {
  const Limit limit = Standard();
  KeyState s;
  ASSERT_TRUE(DecideCounting(s, kT0, limit, 5).allowed);
  // At the limit but not past it: a look is allowed (as upstream: over means count > limit).
  EXPECT_TRUE(Look(s, kT0, limit).allowed);
  ASSERT_FALSE(DecideCounting(s, kT0 + 1, limit, 5).allowed);
  EXPECT_FALSE(Look(s, kT0 + 1, limit).allowed);
  EXPECT_FALSE(DecideCounting(s, kT0 + 2, limit, 0).allowed);  // a look records nothing
  EXPECT_EQ(Held(s, kT0 + 2, limit), 10u);
  // The overdraft is over when the state is back at the limit: a bucket (TAT t0 + 2 s) once 5
  // units are repaid, a fixed window or the log when the t0 units stop counting, a sliding window
  // once the 5 carried into the next window weigh no more (its estimate is 5 * (W - e) / W + 5
  // there).
  const int64_t over_at =
      algorithm() == Algorithm::kSlidingWindow ? kT0 + 2 * kSecond : kT0 + kSecond;
  EXPECT_FALSE(Look(s, over_at - 1, limit).allowed);
  EXPECT_TRUE(Look(s, over_at, limit).allowed);
}

TEST_P(CountDeniedTest, CostsAboveTheCapacityAreRecordedToo) {
  const Limit limit = Standard();
  KeyState s;
  const Decision d = DecideCounting(s, kT0, limit, 12);  // upstream records any hits_addend
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, kNever);
  EXPECT_EQ(Held(s, kT0, limit), 12u);
  EXPECT_FALSE(Look(s, kT0 + 500 * kMs, limit).allowed);
}

TEST_P(CountDeniedTest, WithoutCountDeniedADenialRecordsNothing) {
  const Limit limit = Standard();
  KeyState s;
  ASSERT_TRUE(Decide(s, kT0, limit, 5).allowed);
  const KeyState full = s;
  EXPECT_FALSE(Decide(s, kT0, limit, 5).allowed);
  EXPECT_TRUE(SameState(full, s, limit, kT0));
  EXPECT_TRUE(Look(s, kT0, limit).allowed);
}

// A flood of recorded denials, each in a microsecond of its own, keeps a log of at most N + 1
// entries: while over the limit, a recorded cost joins the newest entry.
TEST(CountDeniedLogTest, AnOverdraftKeepsTheLogWithinNPlusOneEntries) {
  const Limit limit = sluice::testing::MakeLimit(Algorithm::kSlidingLog, 10, kSecond);
  LogState log;
  uint64_t recorded = 0;
  std::mt19937_64 rng(36);
  for (int64_t t = kT0; t < kT0 + 5 * kSecond; t += 1 + static_cast<int64_t>(rng() % 500)) {
    const uint64_t cost = 1 + rng() % 3;
    DecideSlidingLogCountingDenied(log, t, limit, cost);
    recorded += cost;
    ASSERT_LE(log.LiveEntries(), limit.requests + 1) << (t - kT0) << " µs";
  }
  // Nothing recorded was dropped: what the log holds now is all that was recorded within the
  // last window, or more (a merged entry counts from its newest cost).
  EXPECT_GT(recorded, 5 * limit.requests);
  EXPECT_GE(log.sum, limit.requests);
}

TEST(CountDeniedCapsTest, HugeCostsSaturateAtTheCaps) {
  for (const Algorithm a : kAllAlgorithms) {
    SCOPED_TRACE(AlgorithmName(a));
    const Limit limit = sluice::testing::MakeLimit(a, 100, kMinute);
    KeyState s;
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(DecideCounting(s, kT0, limit, UINT64_MAX).allowed);
    EXPECT_FALSE(Look(s, kT0 + kMinute / 2, limit).allowed);
    const uint64_t held = Held(s, kT0, limit);
    switch (a) {
      case Algorithm::kTokenBucket:
      case Algorithm::kLeakyBucket:
        EXPECT_EQ(held, static_cast<uint64_t>(MaxDebt(limit) / kMinute) + 1);
        break;
      case Algorithm::kSlidingWindow:
        EXPECT_EQ(held, MaxWindowCount(limit));
        break;
      case Algorithm::kFixedWindow:
      case Algorithm::kSlidingLog:
        EXPECT_EQ(held, kMaxRecorded);
        break;
    }
    // Carried at most 2^52 µs: free again then.
    EXPECT_TRUE(Look(s, kT0 + (int64_t{1} << 52) + 2 * kMinute, limit).allowed);
  }
  // A sliding window's cap: N * (1 + 2^52 / W), at most 2^53 - 1; a zero limit's; a fixed
  // window's (nothing carried).
  EXPECT_EQ(MaxWindowCount(sluice::testing::MakeLimit(Algorithm::kSlidingWindow, 100, kMinute)),
            100 * (1 + (uint64_t{1} << 52) / kMinute));
  EXPECT_EQ(MaxWindowCount(sluice::testing::MakeLimit(Algorithm::kSlidingWindow, 1u << 31, 1)),
            kMaxRecorded);
  EXPECT_EQ(MaxWindowCount(sluice::testing::MakeLimit(Algorithm::kSlidingWindow, 0, kMinute)), 0u);
  EXPECT_EQ(MaxWindowCount(sluice::testing::MakeLimit(Algorithm::kFixedWindow, 0, kMinute)),
            kMaxRecorded);
}

// --- The long run of an AI-Gateway-shaped exchange.
//
// Each request: a look (cost 0) at request time, with count_denied as the domain sets it; denied
// -> the request is not sent. Allowed -> a report of R tokens after the response (R random,
// sometimes far above the limit), with count_denied, whose answer is ignored. Every report must
// be recorded in full (a heavy user is never under-counted), and what is recorded keeps the
// limit's long-run rate (docs/algorithms.md, "Recorded overdrafts"):
//   buckets, sliding_window: over a run of T, recorded <= N * T / W + capacity (sliding_window:
//     N) + the largest report (an overdraft is a debt, repaid at the rate);
//   fixed_window (upstream's counter, which ends with its window): each window records at most
//     N + the largest report; sliding_log (whose entries count one window): any span of W.
class LongRunTest : public EveryAlgorithm {};

INSTANTIATE_TEST_SUITE_P(Algorithms, LongRunTest, ::testing::ValuesIn(kAllAlgorithms),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

TEST_P(LongRunTest, TheAIGatewayExchangeKeepsTheLongRunRate) {
  // 1000 tokens per minute (capacity 1000), reports of 1..300 tokens, one in 20 of 2000..5000.
  const Limit limit = sluice::testing::WithCapacity(algorithm(), 1000, kMinute, 1000);
  const bool per_window =
      algorithm() == Algorithm::kSlidingLog || algorithm() == Algorithm::kFixedWindow;
  std::mt19937_64 rng(20260036 + static_cast<int>(algorithm()));
  KeyState s;
  int64_t now = kT0;
  const int64_t end = kT0 + 2 * 60 * kMinute;  // two hours
  uint64_t recorded = 0, largest = 0, sent = 0, refused = 0;
  // Per window of W (aligned), what was recorded in it; the log: the reports, to check any span.
  std::vector<std::pair<int64_t, uint64_t>> reports;
  while (now < end) {
    now += 1 + static_cast<int64_t>(rng() % (200 * kMs));  // a request every ~100 ms
    if (!DecideCounting(s, now, limit, 0).allowed) {
      ++refused;
      continue;
    }
    ++sent;
    now += static_cast<int64_t>(rng() % (2 * kSecond));  // the response takes up to 2 s
    const uint64_t r = rng() % 20 == 0 ? 2000 + rng() % 3001 : 1 + rng() % 300;
    const uint64_t before = Held(s, now, limit);
    DecideCounting(s, now, limit, r);
    // Recorded in full: what the state holds grew by R (a window that rolled starts from 0).
    const uint64_t after = Held(s, now, limit);
    ASSERT_EQ(after, before + r) << "a report was under-counted at " << (now - kT0) << " µs";
    recorded += r;
    largest = std::max(largest, r);
    reports.emplace_back(now, r);
  }
  EXPECT_GT(sent, 100u);
  EXPECT_GT(refused, 1000u) << "the heavy user was never held back";
  if (!per_window) {
    const uint64_t allowance =
        static_cast<uint64_t>(limit.requests * (end - kT0) / limit.window_us) + limit.Capacity();
    EXPECT_LE(recorded, allowance + largest);
    // And not far below: the user wanted far more, and got about the rate.
    EXPECT_GE(recorded, allowance * 3 / 4);
    return;
  }
  // Each fixed window, or any span of W of the log, records at most N + the largest report.
  const bool fixed = algorithm() == Algorithm::kFixedWindow;
  uint64_t in_span = 0;
  size_t first = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    in_span += reports[i].second;
    while (fixed ? AlignDown(reports[first].first, limit.window_us) !=
                       AlignDown(reports[i].first, limit.window_us)
                 : reports[first].first + limit.window_us <= reports[i].first) {
      in_span -= reports[first].second;
      ++first;
    }
    ASSERT_LE(in_span, limit.requests + largest) << "at " << (reports[i].first - kT0) << " µs";
  }
  const uint64_t windows = static_cast<uint64_t>((end - kT0) / limit.window_us);
  EXPECT_LE(recorded, (windows + 2) * (limit.requests + largest));
  EXPECT_GE(recorded, windows * limit.requests / 2);
}

}  // namespace
}  // namespace sluice::algo::test
