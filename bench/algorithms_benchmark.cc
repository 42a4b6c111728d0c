// Microbenchmarks of the pure decide functions (src/algo/) and of MemoryStore::DecideAt.
//
// Build and run: see bench/README.md. Every benchmark reports an `allowed` counter, the fraction
// of its decisions that were allowed, so that each one visibly measures the path its name says
// (allow = 1, deny = 0).
//
// Time is synthetic: `now_us` advances by a fixed step per decision, chosen so that a hot key
// stays on the allow path (the step is at least the emission interval W/N), or stays still on the
// deny path (denied requests change nothing, so the state stays denied).

#include <benchmark/benchmark.h>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "algo/algorithms.h"
#include "backend/memory/memory_store.h"
#include "sluice/clock.h"
#include "sluice/limit.h"

namespace sluice {
namespace {

__extension__ using u128 = unsigned __int128;

constexpr int64_t kMsUs = 1000;
constexpr int64_t kSecondUs = 1000 * kMsUs;
constexpr int64_t kMinuteUs = 60 * kSecondUs;
// A realistic unix time (2023-11-14) in µs, so windows are epoch-aligned as in production.
constexpr int64_t kStartUs = int64_t{1700000000} * kSecondUs;

Limit MakeLimit(Algorithm algorithm, uint64_t requests, int64_t window_us,
                std::optional<uint64_t> burst = std::nullopt) {
  return Limit{
      .algorithm = algorithm, .requests = requests, .window_us = window_us, .burst = burst};
}

using CompactDecide = Decision (*)(algo::CompactState&, int64_t, const Limit&, uint64_t);

// One key decided over and over, `step_us` apart.
void RunCompact(benchmark::State& state, CompactDecide decide, const Limit& limit, int64_t step_us,
                int prefill) {
  algo::CompactState key_state;
  int64_t now_us = kStartUs;
  for (int i = 0; i < prefill; ++i) decide(key_state, now_us, limit, 1);
  int64_t allowed = 0;
  for (auto _ : state) {
    const Decision d = decide(key_state, now_us, limit, 1);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
    now_us += step_us;
  }
  state.counters["allowed"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(state.iterations()));
}

// --- token_bucket ---
// Allow: 1000/s (T = 1 ms), one request per ms. Deny: an empty bucket at a fixed instant.
// Non-integral: 7 per minute (T = 8571428.57 µs), one request every 8571429 µs.
void BM_TokenBucket_Allow(benchmark::State& state) {
  RunCompact(state, algo::DecideTokenBucket, MakeLimit(Algorithm::kTokenBucket, 1000, kSecondUs),
             kMsUs, 0);
}
void BM_TokenBucket_Deny(benchmark::State& state) {
  RunCompact(state, algo::DecideTokenBucket, MakeLimit(Algorithm::kTokenBucket, 1000, kSecondUs), 0,
             1000);
}
void BM_TokenBucket_NonIntegralRate(benchmark::State& state) {
  RunCompact(state, algo::DecideTokenBucket, MakeLimit(Algorithm::kTokenBucket, 7, kMinuteUs),
             8571429, 0);
}
BENCHMARK(BM_TokenBucket_Allow);
BENCHMARK(BM_TokenBucket_Deny);
BENCHMARK(BM_TokenBucket_NonIntegralRate);

// --- leaky_bucket --- queue depth 10; the same rates as token_bucket.
void BM_LeakyBucket_Allow(benchmark::State& state) {
  RunCompact(state, algo::DecideLeakyBucket,
             MakeLimit(Algorithm::kLeakyBucket, 1000, kSecondUs, 10), kMsUs, 0);
}
void BM_LeakyBucket_Deny(benchmark::State& state) {
  RunCompact(state, algo::DecideLeakyBucket,
             MakeLimit(Algorithm::kLeakyBucket, 1000, kSecondUs, 10), 0, 11);
}
void BM_LeakyBucket_NonIntegralRate(benchmark::State& state) {
  RunCompact(state, algo::DecideLeakyBucket, MakeLimit(Algorithm::kLeakyBucket, 7, kMinuteUs, 10),
             8571429, 0);
}
BENCHMARK(BM_LeakyBucket_Allow);
BENCHMARK(BM_LeakyBucket_Deny);
BENCHMARK(BM_LeakyBucket_NonIntegralRate);

// --- fixed_window --- Allow: 1000 per 1 ms window, one request per µs (exactly N per window,
// crossing a window boundary every 1000 decisions). Deny: a full window at a fixed instant.
void BM_FixedWindow_Allow(benchmark::State& state) {
  RunCompact(state, algo::DecideFixedWindow, MakeLimit(Algorithm::kFixedWindow, 1000, kMsUs), 1, 0);
}
void BM_FixedWindow_Deny(benchmark::State& state) {
  RunCompact(state, algo::DecideFixedWindow, MakeLimit(Algorithm::kFixedWindow, 1000, kMsUs), 0,
             1000);
}
BENCHMARK(BM_FixedWindow_Allow);
BENCHMARK(BM_FixedWindow_Deny);

// --- sliding_window --- Allow: 1000 per 1 ms, one request every 2 µs (estimate ~ 500).
// Deny: a full window at a fixed instant (retry_after computed every time).
// Non-integral: 7 per minute, one request every 10 s (the estimate peaks at exactly 7).
void BM_SlidingWindow_Allow(benchmark::State& state) {
  RunCompact(state, algo::DecideSlidingWindow, MakeLimit(Algorithm::kSlidingWindow, 1000, kMsUs), 2,
             0);
}
void BM_SlidingWindow_Deny(benchmark::State& state) {
  RunCompact(state, algo::DecideSlidingWindow, MakeLimit(Algorithm::kSlidingWindow, 1000, kMsUs), 0,
             1000);
}
void BM_SlidingWindow_NonIntegralRate(benchmark::State& state) {
  RunCompact(state, algo::DecideSlidingWindow, MakeLimit(Algorithm::kSlidingWindow, 7, kMinuteUs),
             10 * kSecondUs, 0);
}
BENCHMARK(BM_SlidingWindow_Allow);
BENCHMARK(BM_SlidingWindow_Deny);
BENCHMARK(BM_SlidingWindow_NonIntegralRate);

// --- sliding_log --- Allow: 1000 per 1 ms, one request per µs: every decision appends one entry
// and expires one (a steady log of 1000 entries). Deny: 100 entries 1 µs apart, then a fixed
// instant.
void BM_SlidingLog_Allow(benchmark::State& state) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 1000, kMsUs);
  algo::LogState log;
  int64_t now_us = kStartUs;
  int64_t allowed = 0;
  for (auto _ : state) {
    const Decision d = algo::DecideSlidingLog(log, now_us, limit, 1);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
    ++now_us;
  }
  state.counters["allowed"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(state.iterations()));
}
void BM_SlidingLog_Deny(benchmark::State& state) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 100, kMsUs);
  algo::LogState log;
  int64_t now_us = kStartUs;
  for (int i = 0; i < 100; ++i) algo::DecideSlidingLog(log, now_us++, limit, 1);
  int64_t allowed = 0;
  for (auto _ : state) {
    const Decision d = algo::DecideSlidingLog(log, now_us, limit, 1);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  state.counters["allowed"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(state.iterations()));
}
void BM_SlidingLog_NonIntegralRate(benchmark::State& state) {
  // 7 per minute, one request every 8571429 µs: the log holds 7 entries, one expires per request.
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 7, kMinuteUs);
  algo::LogState log;
  int64_t now_us = kStartUs;
  int64_t allowed = 0;
  for (auto _ : state) {
    const Decision d = algo::DecideSlidingLog(log, now_us, limit, 1);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
    now_us += 8571429;
  }
  state.counters["allowed"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(state.iterations()));
}
BENCHMARK(BM_SlidingLog_Allow);
BENCHMARK(BM_SlidingLog_Deny);
BENCHMARK(BM_SlidingLog_NonIntegralRate);

// --- MemoryStore::DecideAt ---
// The whole store path: monotonic clamp, hashing the key, one shard lock, table lookup, decide.
// Argument: the algorithm (its enum value). The limit is 2000 per second (leaky_bucket: queue
// depth 10) and time advances 1 ms per decision on the hot key, 1 µs on the random keys, so
// every decision is on the allow path: the store's own cost, not the deny path, is measured.

Limit StoreLimit(int64_t algorithm) {
  const auto a = static_cast<Algorithm>(algorithm);
  return MakeLimit(a, 2000, kSecondUs,
                   a == Algorithm::kLeakyBucket ? std::optional<uint64_t>(10) : std::nullopt);
}

void StoreArgs(benchmark::internal::Benchmark* b) {
  b->ArgName("algo");
  for (Algorithm a : {Algorithm::kTokenBucket, Algorithm::kLeakyBucket, Algorithm::kFixedWindow,
                      Algorithm::kSlidingWindow, Algorithm::kSlidingLog}) {
    b->Arg(static_cast<int64_t>(a));
  }
}

void BM_MemoryStore_HotKey(benchmark::State& state) {
  const Limit limit = StoreLimit(state.range(0));
  const uint64_t limit_id = LimitId(limit);
  ManualClock clock;
  store::MemoryStore store(store::MemoryStore::Options{}, &clock);
  int64_t now_us = kStartUs;
  int64_t allowed = 0;
  for (auto _ : state) {
    const Decision d = store.DecideAt(limit, limit_id, "user:1234567", 1, now_us);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
    now_us += kMsUs;
  }
  state.SetLabel(std::string(AlgorithmName(limit.algorithm)));
  state.counters["allowed"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(state.iterations()));
}
BENCHMARK(BM_MemoryStore_HotKey)->Apply(StoreArgs);

// splitmix64: cheap, good enough to spread keys uniformly.
uint64_t NextRandom(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Writes "user:<n>" into buf and returns it: keys are generated on the fly, never stored outside
// the store.
std::string_view KeyFor(uint64_t n, char (&buf)[32]) {
  constexpr std::string_view kPrefix = "user:";
  kPrefix.copy(buf, kPrefix.size());
  const auto [end, ec] = std::to_chars(buf + kPrefix.size(), buf + sizeof buf, n);
  return std::string_view(buf, static_cast<size_t>(end - buf));
}

// 1M keys drawn uniformly at random; all touched once before timing, so the table is at its
// steady size. Each key is revisited about once per million decisions: mostly cache misses.
void BM_MemoryStore_RandomKeys(benchmark::State& state) {
  constexpr uint64_t kKeys = 1000000;
  const Limit limit = StoreLimit(state.range(0));
  const uint64_t limit_id = LimitId(limit);
  ManualClock clock;
  store::MemoryStore store(store::MemoryStore::Options{}, &clock);
  int64_t now_us = kStartUs;
  char buf[32];
  for (uint64_t k = 0; k < kKeys; ++k) store.DecideAt(limit, limit_id, KeyFor(k, buf), 1, now_us);
  uint64_t rng = 42;
  int64_t allowed = 0;
  for (auto _ : state) {
    // Multiply-shift maps 64 random bits to [0, kKeys) without a division.
    const uint64_t k = static_cast<uint64_t>((static_cast<u128>(NextRandom(rng)) * kKeys) >> 64);
    const Decision d = store.DecideAt(limit, limit_id, KeyFor(k, buf), 1, now_us);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
    ++now_us;
  }
  state.SetLabel(std::string(AlgorithmName(limit.algorithm)));
  state.counters["allowed"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(state.iterations()));
  state.counters["entries"] = static_cast<double>(store.GetStats().entries);
}
BENCHMARK(BM_MemoryStore_RandomKeys)->Apply(StoreArgs)->Unit(benchmark::kNanosecond);

// --- calendar windows (issue 37: within 10 % of a fixed window) ---
// 2000 a day: epoch-aligned days (calendar:0) or Berlin's calendar days (calendar:1). keys:0 one
// hot key, time 1 ms on per decision; keys:1 a key never seen before at each decision (its
// window's end is looked up every time: the thread's cache answers), time 1 µs on.
void BM_MemoryStore_DayQuota(benchmark::State& state) {
  const bool calendar = state.range(0) == 1, fresh_keys = state.range(1) == 1;
  const Limit limit = calendar
                          ? CalendarLimit(2000, *Calendar::Make("calendar_day", "Europe/Berlin"))
                          : MakeLimit(Algorithm::kFixedWindow, 2000, 86400 * kSecondUs);
  const uint64_t limit_id = LimitId(limit);
  ManualClock clock;
  store::MemoryStore store(store::MemoryStore::Options{}, &clock);
  int64_t now_us = kStartUs;
  char buf[32];
  uint64_t next_key = 0;
  int64_t allowed = 0;
  for (auto _ : state) {
    const std::string_view key = fresh_keys ? KeyFor(next_key++, buf) : "user:1234567";
    const Decision d = store.DecideAt(limit, limit_id, key, 1, now_us);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
    now_us += fresh_keys ? 1 : kMsUs;
  }
  state.SetLabel(calendar ? "calendar_day(Europe/Berlin)" : "fixed_window 1d");
  state.counters["allowed"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(state.iterations()));
}
BENCHMARK(BM_MemoryStore_DayQuota)
    ->ArgNames({"calendar", "keys"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
