// What counting a request costs when every thread counts into the same series (issue 23: false
// and true sharing in the metrics on many cores). Each request of the server counts its status,
// its decision and observes the decision's duration, into children all threads share.
//
//   build/release/metrics_benchmark --benchmark_repetitions=5 --benchmark_report_aggregates_only
//
// `OneLine` is an atomic counter on one cache line, as every child was before its stripes; the
// others are metrics::Counter and metrics::Histogram. Compare the rows at 1 and N threads: time
// per operation that grows with the threads is the line moving between cores.

#include <atomic>
#include <cstdint>

#include "benchmark/benchmark.h"
#include "metrics/registry.h"

namespace sluice {
namespace {

struct alignas(64) OneLine {
  std::atomic<uint64_t> value{0};
};

void BM_OneLine(benchmark::State& state) {
  static OneLine counter;
  for (auto _ : state) counter.value.fetch_add(1, std::memory_order_relaxed);
}
BENCHMARK(BM_OneLine)->ThreadRange(1, 16)->UseRealTime();

void BM_Counter(benchmark::State& state) {
  static metrics::Counter counter;
  for (auto _ : state) counter.Inc();
  if (state.thread_index() == 0) benchmark::DoNotOptimize(counter.Value());
}
BENCHMARK(BM_Counter)->ThreadRange(1, 16)->UseRealTime();

void BM_Histogram(benchmark::State& state) {
  static const int64_t bounds[] = {10, 50, 100, 500, 1000, 5000};
  static metrics::Histogram histogram(bounds);
  int64_t v = state.thread_index();
  for (auto _ : state) histogram.Observe(v++ & 1023);
  if (state.thread_index() == 0) benchmark::DoNotOptimize(histogram.Count());
}
BENCHMARK(BM_Histogram)->ThreadRange(1, 16)->UseRealTime();

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
