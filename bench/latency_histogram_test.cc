#include "latency_histogram.h"

#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace sluice::bench {
namespace {

constexpr int64_t kUs = 1000;

using H = LatencyHistogram;

TEST(LatencyHistogram, UniformMicrosecondsGiveTheirPercentilesWithinOnePercent) {
  H h;
  for (int64_t us = 1; us <= 10'000; ++us) h.Record(us * kUs);
  EXPECT_EQ(h.count(), 10'000);
  EXPECT_NEAR(h.ValueAtPercentile(50), 5'000 * kUs, 50 * kUs);
  EXPECT_NEAR(h.ValueAtPercentile(90), 9'000 * kUs, 90 * kUs);
  EXPECT_NEAR(h.ValueAtPercentile(99), 9'900 * kUs, 99 * kUs);
  EXPECT_NEAR(h.ValueAtPercentile(99.9), 9'990 * kUs, 100 * kUs);
  EXPECT_EQ(h.ValueAtPercentile(100), 10'000 * kUs);  // the exact maximum
  EXPECT_EQ(h.ValueAtPercentile(0), 1 * kUs);         // the exact minimum
  EXPECT_EQ(h.max_ns(), 10'000 * kUs);
  EXPECT_EQ(h.min_ns(), 1 * kUs);
  EXPECT_NEAR(h.mean_ns(), 5'000.5 * kUs, 1.0);
}

TEST(LatencyHistogram, PercentilesAreNearestRankNotInterpolated) {
  // 999 fast answers and one stall: the stall is the 1000th value, above p99.9 of 1000 values.
  H h;
  for (int i = 0; i < 999; ++i) h.Record(100 * kUs);
  h.Record(300'000 * kUs);
  EXPECT_NEAR(h.ValueAtPercentile(99.9), 100 * kUs, 1 * kUs);
  EXPECT_EQ(h.ValueAtPercentile(99.95), 300'000 * kUs);
  EXPECT_EQ(h.max_ns(), 300'000 * kUs);
}

TEST(LatencyHistogram, EveryValueFallsInABucketNoWiderThanOneHundredTwentyEighthOfIt) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> exponent(0, H::kMaxExponent - 1);
  for (int i = 0; i < 100'000; ++i) {
    const int64_t v = static_cast<int64_t>(rng() >> (64 - exponent(rng) - 1)) & H::kMaxNs;
    const int b = H::BucketOf(v);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, H::kBuckets);
    ASSERT_LE(H::LowestOf(b), v);
    ASSERT_LT(v, H::LowestOf(b) + H::WidthOf(b));
    ASSERT_LE(H::WidthOf(b), std::max<int64_t>(1, H::LowestOf(b) / H::kSubBuckets));
  }
  EXPECT_EQ(H::BucketOf(H::kMaxNs), H::kBuckets - 1);
}

TEST(LatencyHistogram, BucketsTileTheRangeWithoutGaps) {
  EXPECT_EQ(H::LowestOf(0), 0);
  for (int b = 0; b + 1 < H::kBuckets; ++b) {
    ASSERT_EQ(H::LowestOf(b) + H::WidthOf(b), H::LowestOf(b + 1)) << "bucket " << b;
    ASSERT_EQ(H::BucketOf(H::LowestOf(b)), b);
  }
  EXPECT_EQ(H::LowestOf(H::kBuckets - 1) + H::WidthOf(H::kBuckets - 1) - 1, H::kMaxNs);
}

TEST(LatencyHistogram, MergeIsTheSameAsRecordingEverythingInOne) {
  H all, even, odd;
  for (int64_t us = 1; us <= 5'000; ++us) {
    all.Record(us * kUs);
    (us % 2 == 0 ? even : odd).Record(us * kUs);
  }
  even.Merge(odd);
  EXPECT_EQ(even.count(), all.count());
  EXPECT_EQ(even.min_ns(), all.min_ns());
  EXPECT_EQ(even.max_ns(), all.max_ns());
  for (const double p : {1.0, 50.0, 90.0, 99.0, 99.9}) {
    EXPECT_EQ(even.ValueAtPercentile(p), all.ValueAtPercentile(p)) << p;
  }
}

TEST(LatencyHistogram, ValuesPastTheRangeAreCountedAndTheMaximumStaysExact) {
  H h;
  h.Record(100'000'000 * kUs);  // 100 s
  EXPECT_EQ(h.count(), 1);
  EXPECT_EQ(h.max_ns(), 100'000'000 * kUs);
  EXPECT_EQ(h.ValueAtPercentile(50), 100'000'000 * kUs);  // clamped to the exact min and max
}

TEST(LatencyHistogram, NegativeValuesCountAsZeroAndAnEmptyHistogramReadsZero) {
  H h;
  EXPECT_EQ(h.ValueAtPercentile(99), 0);
  EXPECT_EQ(h.max_ns(), 0);
  EXPECT_EQ(h.mean_ns(), 0);
  h.Record(-5);
  EXPECT_EQ(h.count(), 1);
  EXPECT_EQ(h.max_ns(), 0);
  EXPECT_EQ(h.ValueAtPercentile(50), 0);
}

}  // namespace
}  // namespace sluice::bench
