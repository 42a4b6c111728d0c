// The metrics' reads (a counter's and a histogram's stripes summed) and the threads' stripes
// handed out in turn.
#include <atomic>
#include <cstdint>
#include <vector>

#include "metrics/registry.h"

namespace sluice::metrics {

size_t internal::NextStripe() {
  static std::atomic<size_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) % kStripes;
}

uint64_t Counter::Value() const {
  uint64_t n = 0;
  for (const Stripe& stripe : stripes_) n += stripe.value.load(std::memory_order_relaxed);
  return n;
}

uint64_t Histogram::Count() const {
  uint64_t n = 0;
  for (const uint64_t count : BucketCounts()) n += count;
  return n;
}

uint64_t Histogram::Sum() const {
  uint64_t n = 0;
  for (const Stripe& stripe : stripes_) n += stripe.sum.load(std::memory_order_relaxed);
  return n;
}

std::vector<uint64_t> Histogram::BucketCounts() const {
  std::vector<uint64_t> counts(bounds_.size() + 1);
  for (const Stripe& stripe : stripes_) {
    for (size_t i = 0; i < counts.size(); ++i) {
      counts[i] += stripe.counts[i].load(std::memory_order_relaxed);
    }
  }
  return counts;
}

}  // namespace sluice::metrics
