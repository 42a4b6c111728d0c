#include "sim/admission.h"

#include <random>

#include "gtest/gtest.h"
#include "tests/support/limits.h"

namespace sluice::sim {
namespace {

constexpr int64_t kW = 1000;  // µs

using testing::MakeLimit;

std::vector<Admission> At(std::initializer_list<int64_t> times) {
  std::vector<Admission> out;
  for (const int64_t t : times) out.push_back({.t_us = t, .cost = 1});
  return out;
}

TEST(SimAdmission, WindowsPerAlgorithm) {
  const WindowRule fixed = WindowRuleFor(MakeLimit(Algorithm::kFixedWindow, 5, kW));
  EXPECT_TRUE(fixed.aligned);
  EXPECT_EQ(fixed.allowance, 5u);
  EXPECT_TRUE(WindowRuleFor(MakeLimit(Algorithm::kSlidingWindow, 5, kW)).aligned);
  const WindowRule log = WindowRuleFor(MakeLimit(Algorithm::kSlidingLog, 5, kW));
  EXPECT_FALSE(log.aligned);
  EXPECT_EQ(log.allowance, 5u);
  Limit bucket = MakeLimit(Algorithm::kTokenBucket, 5, kW);
  bucket.burst = 8;
  EXPECT_EQ(WindowRuleFor(bucket).allowance, 12u);  // C + N - 1
  Limit leaky = MakeLimit(Algorithm::kLeakyBucket, 5, kW);
  leaky.burst = 2;
  EXPECT_EQ(WindowRuleFor(leaky).allowance, 7u);  // (B + 1) + N - 1
  EXPECT_EQ(WindowRuleFor(MakeLimit(Algorithm::kTokenBucket, 0, kW)).allowance, 0u);
}

// By hand, N = 2, W = 1000 µs, admissions at 0, 500, 999, 1000, 1500:
//   aligned windows: [0, 1000) holds 0, 500, 999: 3, one over; [1000, 2000) holds 2.
//   spans of length W: ending at 999, (−1, 999] holds 3; at 1000, (0, 1000] holds 500, 999,
//   1000: 3; at 1500, (500, 1500] holds 999, 1000, 1500: 3. Each of those three admissions
//   brought its span one over: max 1, total 3.
TEST(SimAdmission, HandComputedOverAdmission) {
  const auto admissions = At({0, 500, 999, 1000, 1500});
  const OverAdmission aligned =
      MeasureOverAdmission(admissions, WindowRuleFor(MakeLimit(Algorithm::kFixedWindow, 2, kW)));
  EXPECT_EQ(aligned.max, 1u);
  EXPECT_EQ(aligned.total, 1u);
  const OverAdmission spans =
      MeasureOverAdmission(admissions, WindowRuleFor(MakeLimit(Algorithm::kSlidingLog, 2, kW)));
  EXPECT_EQ(spans.max, 1u);
  EXPECT_EQ(spans.total, 3u);
}

// N = 2: five admissions in one window are 3 over (max 3, total 3); a span that ends exactly W
// after an admission no longer holds it.
TEST(SimAdmission, MaxAndTotalWithinOneWindowAndAtTheSpanEdge) {
  const OverAdmission burst = MeasureOverAdmission(
      At({10, 10, 10, 20, 30}), WindowRuleFor(MakeLimit(Algorithm::kFixedWindow, 2, kW)));
  EXPECT_EQ(burst.max, 3u);
  EXPECT_EQ(burst.total, 3u);
  const OverAdmission edge = MeasureOverAdmission(
      At({0, 0, 1000, 1000}), WindowRuleFor(MakeLimit(Algorithm::kSlidingLog, 2, kW)));
  EXPECT_EQ(edge.max, 0u);
  EXPECT_EQ(edge.total, 0u);
}

TEST(SimAdmission, CostCountsInUnits) {
  const std::vector<Admission> admissions = {{.t_us = 0, .cost = 3}, {.t_us = 5, .cost = 4}};
  const OverAdmission over =
      MeasureOverAdmission(admissions, WindowRuleFor(MakeLimit(Algorithm::kFixedWindow, 5, kW)));
  EXPECT_EQ(over.max, 2u);    // 7 in a window of 5
  EXPECT_EQ(over.total, 2u);  // of the second's 4 units, 2 over
}

// By hand, one key, fixed_window 2 per 1000 µs starting at a window boundary, arrivals at 0,
// 100, 200 and 1000: the exact model admits the first two and the fourth (3 units). The
// instances admitted the first and the third (at 0 and 250, the backend's clock) and the fourth
// (at 1010): 3 admitted, none over, none under. Had they admitted only the first two, 1 under
// (33.3 %).
TEST(SimAdmission, JudgeAgainstTheExactModelByHand) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 2, kW);
  Trace trace{.keys = {"a"},
              .arrivals = {{.t_us = 0}, {.t_us = 100}, {.t_us = 200}, {.t_us = 1000}}};
  const int64_t start = 50 * kW;
  auto exact = RunExactModel(limit, trace, start);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(*exact, (std::vector<bool>{true, true, false, true}));

  std::vector<int64_t> admitted_at = {start, kNotAdmitted, start + 250, start + 1010};
  Judgement j = Judge(limit, trace, admitted_at, *exact);
  EXPECT_EQ(j.admitted, 3u);
  EXPECT_EQ(j.exact_admitted, 3u);
  EXPECT_EQ(j.over.max, 0u);
  EXPECT_EQ(j.under, 0u);

  admitted_at = {start, start + 100, kNotAdmitted, kNotAdmitted};
  j = Judge(limit, trace, admitted_at, *exact);
  EXPECT_EQ(j.admitted, 2u);
  EXPECT_EQ(j.under, 1u);
  EXPECT_NEAR(j.under_pct, 100.0 / 3, 1e-9);

  // All four admitted, three in the window [start, start + W): one over.
  admitted_at = {start, start + 100, start + 200, start + 1000};
  j = Judge(limit, trace, admitted_at, *exact);
  EXPECT_EQ(j.over.max, 1u);
  EXPECT_EQ(j.over.total, 1u);
  EXPECT_EQ(j.under, 0u);
}

// The eventual bound by hand: fixed window of 2 per 1000 µs, spans of 300 µs. Instance 0 admits
// at 0, 100, 200 (3 in a span), instance 1 at 50, 500 (1 in a span), instance 2 nothing: the
// bound is 3 + 1 + 0 - 0 = 4; 5 admitted in the window is 3 over, within it. With instance 1
// admitting 2 more at 510, 520 (3 in a span), 7 in the window is 5 over, and the bound is 6.
// Squeezed to spans of 1 µs the bound is 1 + 1 + 0 - 0 = 2: 5 over is not within.
TEST(SimAdmission, EventualBoundByHand) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 2, kW);
  Trace trace{.keys = {"a"},
              .arrivals = {{.t_us = 0, .instance = 0},
                           {.t_us = 50, .instance = 1},
                           {.t_us = 100, .instance = 0},
                           {.t_us = 200, .instance = 0},
                           {.t_us = 500, .instance = 1},
                           {.t_us = 510, .instance = 1},
                           {.t_us = 520, .instance = 1}}};
  const int64_t start = 50 * kW;
  std::vector<int64_t> at = {start,       start + 50,   start + 100, start + 200,
                             start + 500, kNotAdmitted, kNotAdmitted};
  EventualBound b = CheckEventualBound(limit, trace, at, 300, 3);
  EXPECT_EQ(b.max_bound, 4u);
  EXPECT_TRUE(b.within);
  EXPECT_EQ(b.tightest_margin, 1u);
  at[5] = start + 510;
  at[6] = start + 520;
  b = CheckEventualBound(limit, trace, at, 300, 3);
  EXPECT_EQ(b.max_bound, 6u);
  EXPECT_TRUE(b.within);
  b = CheckEventualBound(limit, trace, at, 1, 3);
  EXPECT_EQ(b.max_bound, 2u);
  EXPECT_FALSE(b.within);
}

// The definition of a window is right for every algorithm: an exact single limiter, judged at
// its own decision times, is never over; and the allowance is reached (so it is not loose).
TEST(SimAdmission, TheExactModelIsNeverOverAndReachesTheAllowance) {
  for (const Algorithm algorithm :
       {Algorithm::kTokenBucket, Algorithm::kLeakyBucket, Algorithm::kFixedWindow,
        Algorithm::kSlidingLog, Algorithm::kSlidingWindow}) {
    Limit limit{.algorithm = algorithm, .requests = 7, .window_us = 10000, .burst = std::nullopt};
    if (algorithm == Algorithm::kLeakyBucket) limit.burst = 3;
    Trace trace{.keys = {"a", "b", "c"}, .arrivals = {}};
    std::mt19937_64 rng(42);
    int64_t t = 0;
    for (int i = 0; i < 20000; ++i) {
      t += static_cast<int64_t>(rng() % 700);  // ~2 units per key per 1000 µs: over N per W
      if (i % 400 == 0) t += 30000;            // and quiet spells, in which buckets fill up
      trace.arrivals.push_back(
          {.t_us = t, .key = static_cast<uint32_t>(rng() % 3), .cost = 1 + rng() % 2});
    }
    const int64_t start = 123456789;
    auto exact = RunExactModel(limit, trace, start);
    ASSERT_TRUE(exact.ok());
    std::vector<int64_t> admitted_at(trace.arrivals.size(), kNotAdmitted);
    for (size_t i = 0; i < trace.arrivals.size(); ++i) {
      if ((*exact)[i]) admitted_at[i] = start + trace.arrivals[i].t_us;
    }
    const Judgement j = Judge(limit, trace, admitted_at, *exact);
    EXPECT_EQ(j.over.max, 0u) << AlgorithmName(algorithm);
    EXPECT_EQ(j.over.total, 0u) << AlgorithmName(algorithm);
    EXPECT_EQ(j.under, 0u);
    EXPECT_GT(j.admitted, 0u);
    // One unit less of allowance would be exceeded: the bound is tight on this trace.
    WindowRule tighter = WindowRuleFor(limit);
    --tighter.allowance;
    std::vector<std::vector<Admission>> by_key(3);
    for (size_t i = 0; i < trace.arrivals.size(); ++i) {
      if (admitted_at[i] != kNotAdmitted)
        by_key[trace.arrivals[i].key].push_back({admitted_at[i], trace.arrivals[i].cost});
    }
    EXPECT_GT(MeasureOverAdmission(by_key, tighter).max, 0u) << AlgorithmName(algorithm);
  }
}

}  // namespace
}  // namespace sluice::sim
