#include "sim/trace.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "gtest/gtest.h"

namespace sluice::sim {
namespace {

TraceOptions Options(TraceKind kind) {
  return {.kind = kind, .keys = 10, .zipf_s = 1.0, .rate = 10000, .seconds = 1, .seed = 7};
}

std::vector<uint64_t> CountPerKey(const Trace& trace) {
  std::vector<uint64_t> counts(trace.keys.size());
  for (const Arrival& a : trace.arrivals) ++counts[a.key];
  return counts;
}

TEST(SimTrace, UniformHasRateTimesSecondsEvenlySpacedArrivalsOnEveryKey) {
  auto trace = GenerateTrace(Options(TraceKind::kUniform));
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->arrivals.size(), 10000u);
  ASSERT_EQ(trace->keys.size(), 10u);
  for (size_t i = 0; i < trace->arrivals.size(); ++i) {
    EXPECT_EQ(trace->arrivals[i].t_us, static_cast<int64_t>(i) * 100);  // 1 s / 10000
    EXPECT_EQ(trace->arrivals[i].cost, 1u);
  }
  // 1000 expected per key; a binomial's standard deviation is 30.
  for (const uint64_t c : CountPerKey(*trace)) {
    EXPECT_GT(c, 850u);
    EXPECT_LT(c, 1150u);
  }
}

TEST(SimTrace, PoissonHasExponentialGapsAtTheRate) {
  auto trace = GenerateTrace(Options(TraceKind::kPoisson));
  ASSERT_TRUE(trace.ok()) << trace.status();
  // 10000 expected in 1 s; a Poisson count's standard deviation is 100.
  const size_t n = trace->arrivals.size();
  EXPECT_GT(n, 9600u);
  EXPECT_LT(n, 10400u);
  // Exponential gaps of mean 100 µs: about e^-1 of them are longer than the mean, and a few
  // longer than 5 means (e^-5 = 0.67 %); evenly spaced arrivals would have none.
  size_t longer_than_mean = 0, longer_than_5 = 0;
  for (size_t i = 1; i < n; ++i) {
    const int64_t gap = trace->arrivals[i].t_us - trace->arrivals[i - 1].t_us;
    ASSERT_GE(gap, 0);
    longer_than_mean += gap > 100 ? 1 : 0;
    longer_than_5 += gap > 500 ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(longer_than_mean) / static_cast<double>(n), 0.368, 0.03);
  EXPECT_GT(longer_than_5, 30u);
  for (const uint64_t c : CountPerKey(*trace)) {
    EXPECT_GT(c, 850u);
    EXPECT_LT(c, 1150u);
  }
}

TEST(SimTrace, ZipfFrequenciesFallAsOneOverRank) {
  TraceOptions o = Options(TraceKind::kZipf);
  o.keys = 100;
  o.rate = 100000;
  auto trace = GenerateTrace(o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::vector<uint64_t> counts = CountPerKey(*trace);
  // P(rank 1) = 1 / H_100 = 0.1928; rank k has 1/k of rank 1's share.
  EXPECT_NEAR(static_cast<double>(counts[0]) / 100000, 0.1928, 0.01);
  EXPECT_NEAR(static_cast<double>(counts[1]) / static_cast<double>(counts[0]), 0.5, 0.05);
  EXPECT_NEAR(static_cast<double>(counts[9]) / static_cast<double>(counts[0]), 0.1, 0.02);
  EXPECT_GT(counts[0], counts[1]);
  EXPECT_GT(counts[1], counts[9]);
}

TEST(SimTrace, ZipfWithExponentZeroIsUniform) {
  const ZipfSampler zipf(4, 0.0);
  EXPECT_EQ(zipf.Rank(0.0), 0u);
  EXPECT_EQ(zipf.Rank(0.26), 1u);
  EXPECT_EQ(zipf.Rank(0.51), 2u);
  EXPECT_EQ(zipf.Rank(0.99), 3u);
}

TEST(SimTrace, SameSeedSameTraceOtherSeedOtherKeys) {
  TraceOptions o = Options(TraceKind::kZipf);
  auto a = GenerateTrace(o), b = GenerateTrace(o);
  o.seed = 8;
  auto c = GenerateTrace(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  size_t same_ab = 0, same_ac = 0;
  for (size_t i = 0; i < a->arrivals.size(); ++i) {
    same_ab += a->arrivals[i].key == b->arrivals[i].key;
    same_ac += a->arrivals[i].key == c->arrivals[i].key;
  }
  EXPECT_EQ(same_ab, a->arrivals.size());
  EXPECT_LT(same_ac, a->arrivals.size() / 2);
}

TEST(SimTrace, OnOffSendsFourTimesTheRateForATenthOfASecondThenNothing) {
  TraceOptions o = Options(TraceKind::kOnOff);
  o.seconds = 2;
  auto trace = GenerateTrace(o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->arrivals.size(), 20000u);  // R on average
  std::map<int64_t, uint64_t> per_period;
  for (const Arrival& a : trace->arrivals) {
    EXPECT_LT(a.t_us % 400000, 100000) << a.t_us;  // silent 300 ms of each 400
    ++per_period[a.t_us / 400000];
  }
  EXPECT_EQ(per_period.size(), 5u);
  for (const auto& [period, n] : per_period) EXPECT_EQ(n, 4000u) << period;  // 4R x 100 ms
}

TEST(SimTrace, HotIsOneKey) {
  auto trace = GenerateTrace(Options(TraceKind::kHot));
  ASSERT_TRUE(trace.ok());
  ASSERT_EQ(trace->keys, std::vector<std::string>{"hot"});
  EXPECT_EQ(trace->arrivals.size(), 10000u);
}

TEST(SimTrace, BoundaryBurstsStraddleEachEpochAlignedWindowEnd) {
  // W = 100 ms, the run starting 30 ms into a window: boundaries at 70, 170, ... ms of the run.
  TraceOptions o = Options(TraceKind::kBoundary);
  o.keys = 2;
  o.rate = 1000;  // 100 per window: 50 in the 10 ms before a boundary, 50 in the 10 ms after
  o.window_us = 100000;
  o.window_phase_us = 30000;
  auto trace = GenerateTrace(o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  // Boundaries at 70 + 100k ms with 10 ms on both sides inside [0, 1000): 70 ... 970.
  EXPECT_EQ(trace->arrivals.size(), 10u * 100);
  uint64_t before = 0, after = 0;
  for (const Arrival& a : trace->arrivals) {
    const int64_t to_boundary = (a.t_us + 30000) % 100000;  // time since the window's start
    if (to_boundary >= 90000) {
      ++before;
    } else {
      EXPECT_LT(to_boundary, 10000) << a.t_us;
      ++after;
    }
  }
  EXPECT_EQ(before, 500u);
  EXPECT_EQ(after, 500u);
  const std::vector<uint64_t> counts = CountPerKey(*trace);
  EXPECT_EQ(counts[0], 500u);
  EXPECT_EQ(counts[1], 500u);
}

TEST(SimTrace, BoundaryNeedsAWindowShorterThanTheRun) {
  TraceOptions o = Options(TraceKind::kBoundary);
  o.window_us = 10000000;  // 10 s, in a 1 s run
  EXPECT_FALSE(GenerateTrace(o).ok());
}

TEST(SimTrace, RefusesTooManyArrivalsAndNoKeys) {
  TraceOptions o = Options(TraceKind::kUniform);
  o.rate = 1e9;
  EXPECT_FALSE(GenerateTrace(o).ok());
  o = Options(TraceKind::kUniform);
  o.keys = 0;
  EXPECT_FALSE(GenerateTrace(o).ok());
}

TEST(SimTrace, ReadTraceMakesTimesRelativeSortsAndCutsAtTheEnd) {
  std::istringstream in(
      "# recorded\n"
      "1500 alice\n"
      "1000 bob 3\n"
      "\n"
      "1200 alice 2\n"
      "2600 bob\n");  // 1.6 s after the first: cut by a 1 s run
  TraceOptions o = Options(TraceKind::kFile);
  auto trace = ReadTrace(in, o);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->arrivals.size(), 3u);
  EXPECT_EQ(trace->keys[trace->arrivals[0].key], "bob");
  EXPECT_EQ(trace->arrivals[0].t_us, 0);
  EXPECT_EQ(trace->arrivals[0].cost, 3u);
  EXPECT_EQ(trace->keys[trace->arrivals[1].key], "alice");
  EXPECT_EQ(trace->arrivals[1].t_us, 200000);
  EXPECT_EQ(trace->arrivals[1].cost, 2u);
  EXPECT_EQ(trace->arrivals[2].t_us, 500000);
  EXPECT_EQ(trace->arrivals[1].key, trace->arrivals[2].key);
}

TEST(SimTrace, ReadTraceNamesTheBadLine) {
  std::istringstream in("0 a\n5 b 0\n");
  auto trace = ReadTrace(in, Options(TraceKind::kFile));
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().message(), "line 2: cost must be positive");
}

TEST(SimTrace, RoundRobinTakesTurnsAndHashKeepsAKeyOnOneInstance) {
  auto trace = GenerateTrace(Options(TraceKind::kUniform));
  ASSERT_TRUE(trace.ok());
  SpreadOverInstances(*trace, 4, Spread::kRoundRobin);
  for (size_t i = 0; i < trace->arrivals.size(); ++i) EXPECT_EQ(trace->arrivals[i].instance, i % 4);
  SpreadOverInstances(*trace, 4, Spread::kHash);
  std::map<uint32_t, std::set<uint32_t>> instances_of_key;
  for (const Arrival& a : trace->arrivals) instances_of_key[a.key].insert(a.instance);
  std::set<uint32_t> used;
  for (const auto& [key, instances] : instances_of_key) {
    EXPECT_EQ(instances.size(), 1u) << key;
    used.insert(*instances.begin());
  }
  EXPECT_GT(used.size(), 1u);
}

TEST(SimTrace, ParseTraceKindFallsBackToAFile) {
  EXPECT_EQ(ParseTraceKind("zipf"), TraceKind::kZipf);
  EXPECT_EQ(ParseTraceKind("boundary"), TraceKind::kBoundary);
  EXPECT_EQ(ParseTraceKind("traces/day1.txt"), TraceKind::kFile);
}

}  // namespace
}  // namespace sluice::sim
