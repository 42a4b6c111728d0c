#include "cli/bench/bench_store.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/memory/local_leases.h"
#include "backend/memory/local_over_limit_cache.h"
#include "backend/memory/memory_store.h"
#include "fmt/format.h"
#include "sluice/clock.h"

namespace sluice::tools {
namespace {

// Resident set size of this process, from /proc/self/statm.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return resident_pages * sysconf(_SC_PAGESIZE);
}

// splitmix64: a small, fast generator; each thread has its own.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform01() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  uint64_t Below(uint64_t n) {
    __extension__ using u128 = unsigned __int128;
    return static_cast<uint64_t>((static_cast<u128>(Next()) * n) >> 64);
  }
};

// Zipf(exponent) over ranks 1..n without tables: rejection-inversion sampling (Hörmann and
// Derflinger, "Rejection-inversion to generate variates from monotone discrete distributions").
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double exponent) : n_(static_cast<double>(n)), s_(exponent) {
    h_integral_x1_ = HIntegral(1.5) - 1.0;
    h_integral_n_ = HIntegral(n_ + 0.5);
    threshold_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
  }

  // A rank in [0, n).
  uint64_t Sample(Rng& rng) const {
    for (;;) {
      const double u = h_integral_n_ + rng.Uniform01() * (h_integral_x1_ - h_integral_n_);
      const double x = HIntegralInverse(u);
      double k = std::floor(x + 0.5);
      k = std::clamp(k, 1.0, n_);
      if (k - x <= threshold_ || u >= HIntegral(k + 0.5) - H(k)) {
        return static_cast<uint64_t>(k) - 1;
      }
    }
  }

 private:
  static double Helper1(double x) {  // log1p(x) / x
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double Helper2(double x) {  // expm1(x) / x
    return std::abs(x) > 1e-8 ? std::expm1(x) / x
                              : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
  }
  double H(double x) const { return std::exp(-s_ * std::log(x)); }
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1.0 - s_) * log_x) * log_x;
  }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;
    return std::exp(Helper1(t) * x);
  }

  double n_, s_;
  double h_integral_x1_, h_integral_n_, threshold_;
};

// Keys are made on the fly ("key:<n>") so that nothing outside the store grows with K.
struct KeyBuffer {
  char data[32] = {'k', 'e', 'y', ':'};
  std::string_view Make(uint64_t n) {
    const auto r = std::to_chars(data + 4, data + sizeof data, n);
    return {data, static_cast<size_t>(r.ptr - data)};
  }
};

constexpr int kMaxPrefetch = 64;

// Whether the options make sense; if not, says why on `err`.
bool ValidOptions(const BenchStoreOptions& options, std::ostream& err) {
  if (options.keys == 0 || options.threads < 1 || !(options.seconds > 0)) {
    err << "bench store: --keys and --threads must be at least 1 and --seconds positive\n";
    return false;
  }
  if (options.prefetch < 0 || options.prefetch > kMaxPrefetch) {
    err << "bench store: --prefetch must be between 0 and " << kMaxPrefetch << "\n";
    return false;
  }
  if (options.clock_every < 1) {
    err << "bench store: --clock-every must be at least 1\n";
    return false;
  }
  if (options.through != "store" && options.through != "backend" &&
      options.through != "local_over_limit_cache" && options.through != "local_leases") {
    err << "bench store: --through must be store, backend, local_over_limit_cache or "
           "local_leases\n";
    return false;
  }
  if (options.distribution != "uniform" && options.distribution != "zipf") {
    err << "bench store: --distribution must be uniform or zipf\n";
    return false;
  }
  return true;
}

// Phase 1: every key once, split over the threads.
void Warmup(store::MemoryStore& store, const Limit& limit, uint64_t limit_id, uint64_t keys,
            int threads) {
  {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        KeyBuffer key;
        for (uint64_t k = static_cast<uint64_t>(t); k < keys; k += static_cast<uint64_t>(threads)) {
          store.Decide(limit, limit_id, key.Make(k), 1);
        }
      });
    }
    for (auto& w : workers) w.join();
  }
}

// CPU time the calling thread has used, in ns: on a machine shared with other work, decisions
// per CPU second move less than decisions per second (a thread waiting for a core costs none).
int64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct Timed {
  uint64_t decisions = 0, allowed = 0;
  int64_t cpu_ns = 0;         // the deciding threads' CPU time, all together
  uint64_t local_hits = 0;    // answered from LocalOverLimitCache' kept denials
  uint64_t lease_hits = 0;    // admitted from LocalLeases' leases
  uint64_t leases_taken = 0;  // leases LocalLeases took
  double seconds = 0;
};

// One decision, as --through says: on the store itself, or through `backend` (the store, or
// LocalOverLimitCache over it, or LocalLeases over that) as the server's engine asks it.
struct Decider {
  store::MemoryStore& store;
  backend::Backend* backend;  // null: the store's DecideAt
  const Limit& limit;
  uint64_t limit_id;

  bool Allows(std::string_view key, int64_t now) const {
    if (backend == nullptr) return store.DecideAt(limit, limit_id, key, 1, now).allowed;
    // Leased as `consistency: leased` asks (only LocalLeases reads it).
    const backend::Item item{.limit = &limit,
                             .limit_id = limit_id,
                             .key = key,
                             .cost = 1,
                             .sharing = {.consistency = backend::Consistency::kLeased}};
    Decision decision;
    bool allowed = false;
    backend->Decide(std::span(&item, 1), now, std::span(&decision, 1),
                    [&allowed](const backend::Outcome& outcome) { allowed = outcome.allowed; });
    return allowed;
  }
};

// Phase 2: timed decisions, on keys drawn as the options say.
Timed TimedDecisions(const BenchStoreOptions& options, const Decider& decider,
                     store::MemoryStore& store, uint64_t limit_id, const Clock* clock) {
  const uint64_t keys = options.keys;
  const int threads = options.threads;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> decisions{0}, allowed{0}, local_hits{0}, lease_hits{0}, leases_taken{0};
  std::atomic<int64_t> cpu_ns{0};
  const ZipfSampler zipf(keys, 0.99);
  const bool use_zipf = options.distribution == "zipf";
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Rng rng{0x5EEDull * static_cast<uint64_t>(t + 1)};
      // The next `prefetch` keys are drawn ahead (a small ring, not an array of all keys) so
      // their state can be prefetched while the current one is decided.
      const int ahead = options.prefetch;
      KeyBuffer ring[kMaxPrefetch + 1];
      std::string_view pending[kMaxPrefetch + 1];
      const auto draw = [&](KeyBuffer& buffer) {
        const uint64_t k = keys == 1 ? 0 : use_zipf ? zipf.Sample(rng) : rng.Below(keys);
        return buffer.Make(k);
      };
      for (int i = 0; i < ahead; ++i) pending[i] = draw(ring[i]);
      const int64_t cpu_before = ThreadCpuNanos();
      const uint64_t hits_before = store::LocalOverLimitCache::HitsOnThisThread();
      const store::LocalLeases::ThreadStats leases_before = store::LocalLeases::StatsOnThisThread();
      uint64_t local = 0, local_allowed = 0;
      int64_t now = clock->NowMicros();
      size_t slot = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 1024; ++i) {
          if (i % options.clock_every == 0) now = clock->NowMicros();
          std::string_view key;
          if (ahead == 0) {
            key = draw(ring[0]);
          } else {
            const size_t next = (slot + static_cast<size_t>(ahead)) % (ahead + 1);
            pending[next] = draw(ring[next]);
            store.Prefetch(limit_id, pending[next]);
            key = pending[slot];
            slot = (slot + 1) % (ahead + 1);
          }
          local_allowed += decider.Allows(key, now) ? 1 : 0;
        }
        local += 1024;
      }
      decisions.fetch_add(local);
      allowed.fetch_add(local_allowed);
      cpu_ns.fetch_add(ThreadCpuNanos() - cpu_before);
      local_hits.fetch_add(store::LocalOverLimitCache::HitsOnThisThread() - hits_before);
      const store::LocalLeases::ThreadStats leases_after = store::LocalLeases::StatsOnThisThread();
      lease_hits.fetch_add(leases_after.admitted - leases_before.admitted);
      leases_taken.fetch_add(leases_after.leases - leases_before.leases);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(options.seconds));
  stop.store(true);
  for (auto& w : workers) w.join();
  return {
      .decisions = decisions.load(),
      .allowed = allowed.load(),
      .cpu_ns = cpu_ns.load(),
      .local_hits = local_hits.load(),
      .lease_hits = lease_hits.load(),
      .leases_taken = leases_taken.load(),
      .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

}  // namespace

int RunBenchStore(const BenchStoreOptions& options, std::ostream& out, std::ostream& err) {
  if (!ValidOptions(options, err)) return 2;
  const uint64_t keys = options.keys;
  const int threads = options.threads;
  const Clock* clock = SystemClock::Get();
  store::MemoryStore::Options store_options;
  store_options.max_entries = std::max<size_t>(store_options.max_entries, keys + keys / 4);
  store::MemoryStore store(store_options, clock);
  const Limit& limit = options.limit;
  const uint64_t limit_id = LimitId(limit);

  // RSS growth per key over the warm-up.
  const int64_t rss_before = ResidentBytes();
  const auto warmup_start = std::chrono::steady_clock::now();
  Warmup(store, limit, limit_id, keys, threads);
  const int64_t rss_after = ResidentBytes();
  const double warmup_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - warmup_start).count();
  store::LocalOverLimitCache local_over_limit_cache(&store);
  store::LocalLeases local_leases(&local_over_limit_cache, &store, {});
  backend::Backend* backend = nullptr;
  if (options.through == "backend") backend = &store;
  if (options.through == "local_over_limit_cache") backend = &local_over_limit_cache;
  if (options.through == "local_leases") backend = &local_leases;
  const Timed timed =
      TimedDecisions(options, Decider{store, backend, limit, limit_id}, store, limit_id, clock);
  const double elapsed = timed.seconds;
  const uint64_t total = timed.decisions;
  const double per_sec = static_cast<double>(total) / elapsed;
  const int64_t rss_growth = std::max<int64_t>(0, rss_after - rss_before);
  out << fmt::format(
      "{{\"algorithm\":\"{}\",\"keys\":{},\"threads\":{},\"seconds\":{:.3f},\"decisions\":{},"
      "\"decisions_per_sec\":{:.0f},\"ns_per_decision\":{:.2f},\"rss_bytes\":{},"
      "\"bytes_per_key\":{:.2f},\"distribution\":\"{}\",\"limit\":\"{}\",\"allowed\":{},"
      "\"store_entries\":{},\"clock_every\":{},\"prefetch\":{},\"through\":\"{}\","
      "\"local_hits\":{},\"lease_hits\":{},\"leases\":{},\"cpu_ns_per_decision\":{:.2f},"
      "\"warmup_seconds\":{:.3f}}}\n",
      AlgorithmName(limit.algorithm), keys, threads, elapsed, total, per_sec,
      elapsed * 1e9 * threads / static_cast<double>(std::max<uint64_t>(total, 1)), ResidentBytes(),
      static_cast<double>(rss_growth) / static_cast<double>(keys), options.distribution,
      DescribeLimit(limit), timed.allowed, store.GetStats().entries, options.clock_every,
      options.prefetch, options.through, timed.local_hits, timed.lease_hits, timed.leases_taken,
      static_cast<double>(timed.cpu_ns) / static_cast<double>(std::max<uint64_t>(total, 1)),
      warmup_seconds);
  return 0;
}

}  // namespace sluice::tools
