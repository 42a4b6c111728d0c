// LatencyHistogram: a fixed-size log-linear histogram of latencies, in the manner of
// HdrHistogram, for the load generators in bench/.
//
// Values are integer nanoseconds. Below 2 * kSubBuckets ns every value has its own bucket; above,
// each power-of-two range [2^e, 2^(e+1)) is cut into kSubBuckets equal buckets, so a bucket is
// never wider than 1/kSubBuckets (0.78 %) of the values in it, and a percentile read back (the
// middle of its bucket) is within 0.4 % of a value that was recorded. Values past kMaxNs (about
// 69 s) are counted in the last bucket; the exact largest and smallest values are kept beside the
// buckets. Recording is one bit scan and one increment; the histogram is 31 KiB and never grows.
//
// Not thread-safe: one per thread, then Merge.

#ifndef SLUICE_BENCH_LATENCY_HISTOGRAM_H_
#define SLUICE_BENCH_LATENCY_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace sluice::bench {

class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 7;
  static constexpr int64_t kSubBuckets = int64_t{1} << kSubBucketBits;  // 128
  static constexpr int kMaxExponent = 36;                               // 2^36 ns: 68.7 s
  static constexpr int64_t kMaxNs = (int64_t{1} << kMaxExponent) - 1;

  // Counts one value; negative values count as 0.
  void Record(int64_t value_ns) {
    value_ns = std::max<int64_t>(value_ns, 0);
    ++counts_[BucketOf(std::min(value_ns, kMaxNs))];
    ++count_;
    sum_ns_ += static_cast<double>(value_ns);
    min_ns_ = std::min(min_ns_, value_ns);
    max_ns_ = std::max(max_ns_, value_ns);
  }

  void Merge(const LatencyHistogram& other) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ns_ += other.sum_ns_;
    min_ns_ = std::min(min_ns_, other.min_ns_);
    max_ns_ = std::max(max_ns_, other.max_ns_);
  }

  int64_t count() const { return count_; }
  int64_t max_ns() const { return count_ == 0 ? 0 : max_ns_; }
  int64_t min_ns() const { return count_ == 0 ? 0 : min_ns_; }
  double mean_ns() const { return count_ == 0 ? 0 : sum_ns_ / static_cast<double>(count_); }

  // The value at `percentile` (0..100) by nearest rank: the smallest recorded value that at least
  // `percentile` % of the values are at or below, read back as the middle of its bucket (the
  // smallest and the largest value are exact). 0 when nothing was recorded.
  int64_t ValueAtPercentile(double percentile) const {
    if (count_ == 0) return 0;
    const double p = std::clamp(percentile, 0.0, 100.0);
    // The epsilon keeps 99.9 % of 1000 at rank 999 (99.9 / 100 * 1000 is 999.0000000000001).
    const int64_t rank = std::clamp<int64_t>(
        static_cast<int64_t>(std::ceil(p / 100.0 * static_cast<double>(count_) - 1e-9)), 1, count_);
    if (rank == count_) return max_ns_;
    if (rank == 1) return min_ns_;
    int64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        const int64_t low = LowestOf(static_cast<int>(i));
        const int64_t middle = low + (WidthOf(static_cast<int>(i)) - 1) / 2;
        return std::clamp(middle, min_ns_, max_ns_);
      }
    }
    return max_ns_;
  }

  // The bucket of a value in [0, kMaxNs], and the range of values a bucket holds: exposed for the
  // test.
  static int BucketOf(int64_t value_ns) {
    const auto v = static_cast<uint64_t>(value_ns);
    if (v < 2 * kSubBuckets) return static_cast<int>(v);
    const int exponent = std::bit_width(v) - 1;  // >= kSubBucketBits + 1
    const int shift = exponent - kSubBucketBits;
    return static_cast<int>(kSubBuckets * shift + static_cast<int64_t>(v >> shift));
  }
  static int64_t LowestOf(int bucket) {
    if (bucket < 2 * kSubBuckets) return bucket;
    const int shift = static_cast<int>(bucket / kSubBuckets) - 1;
    return (bucket - kSubBuckets * shift) << shift;
  }
  static int64_t WidthOf(int bucket) {
    return bucket < 2 * kSubBuckets ? 1 : int64_t{1} << (bucket / kSubBuckets - 1);
  }
  static constexpr int kBuckets = kSubBuckets * (kMaxExponent - kSubBucketBits + 1);

 private:
  std::array<int64_t, kBuckets> counts_{};
  int64_t count_ = 0;
  double sum_ns_ = 0;
  int64_t min_ns_ = std::numeric_limits<int64_t>::max();
  int64_t max_ns_ = 0;
};

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_LATENCY_HISTOGRAM_H_
