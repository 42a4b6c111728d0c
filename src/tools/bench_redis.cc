#include "tools/bench_redis.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "fmt/compile.h"
#include "fmt/format.h"
#include "redis/client.h"
#include "redis/redis_store.h"
#include "spdlog/spdlog.h"
#include "tools/redis_stats.h"

namespace sluice::tools {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int64_t Percentile(std::vector<uint32_t>& samples, double p) {
  if (samples.empty()) return 0;
  const size_t k =
      std::min(samples.size() - 1, static_cast<size_t>(p * static_cast<double>(samples.size())));
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(k),
                   samples.end());
  return samples[k];
}

}  // namespace

int RunBenchRedis(const BenchRedisOptions& o, std::ostream& out, std::ostream& err) {
  if (o.mode != "sluice" && o.mode != "seed" && o.mode != "zset") {
    err << "bench redis: --mode is sluice, seed or zset\n";
    return 2;
  }
  if (o.mode == "sluice") {
    if (auto s = redis::CheckExactRange(o.limit); !s.ok()) {
      err << "bench redis: " << s.message() << "\n";
      return 2;
    }
  }
  std::string script;
  if (o.mode != "sluice") {
    std::ifstream file(o.script);
    std::stringstream text;
    text << file.rdbuf();
    script = text.str();
    if (!file || script.empty()) {
      err << "bench redis: --mode " << o.mode << " needs --script FILE (the anchor's Lua)\n";
      return 2;
    }
  }
  auto endpoint = redis::ParseUrl(o.redis);
  if (!endpoint.ok()) {
    err << "bench redis: " << endpoint.status().message() << "\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  redis::Client::Options client_options;
  client_options.seeds = {*endpoint};
  client_options.cluster = o.cluster;
  client_options.connections_per_node = std::max(1, o.connections);
  client_options.connection.timeout = 1s;
  client_options.connection.max_pending = 1000000;
  auto client = redis::Client::Create(client_options);
  if (!client.ok()) {
    err << "bench redis: " << client.status().message() << "\n";
    return 2;
  }
  const auto connect_deadline = Clock::now() + 5s;
  while (!(*client)->Ready() && Clock::now() < connect_deadline) std::this_thread::sleep_for(10ms);
  if (!(*client)->Ready()) {
    err << "bench redis: cannot reach " << o.redis << ": " << (*client)->last_error() << "\n";
    return 1;
  }
  const auto stats_clients = RedisStatsClients(**client, client_options);

  std::string sha;
  if (o.mode != "sluice") {
    auto loaded = CallRedis(**client, "", {"SCRIPT", "LOAD", script});
    if (!loaded.ok() || loaded->type != redis::Reply::Type::kString) {
      err << "bench redis: SCRIPT LOAD failed: "
          << (loaded.ok() ? loaded->str : std::string(loaded.status().message())) << "\n";
      return 1;
    }
    sha = loaded->str;
  }
  redis::RedisStore store(client->get(), {.key_prefix = "bench:",
                                          .breaker = {.failures_to_open = 1000000},
                                          .buckets = o.buckets,
                                          .batch_cluster = o.cluster_batch});

  // Closed loop: `inflight` chains, each starting its next request when the last one answers.
  struct Shared {
    absl::Mutex mu;
    int running ABSL_GUARDED_BY(mu) = 0;
    std::vector<uint32_t> latencies ABSL_GUARDED_BY(mu);  // µs (appended in batches)
  } shared;
  std::atomic<uint64_t> decisions{0}, allowed{0}, errors{0};
  const auto start = Clock::now();
  const auto stop_at =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  const std::string limit_text = std::to_string(o.limit.requests);
  const std::string window_ms = std::to_string(std::max<int64_t>(1, o.limit.window_us / 1000));
  const std::string window_s = std::to_string(std::max<int64_t>(1, o.limit.window_us / 1000000));
  constexpr size_t kMaxSamples = 20000000;

  struct Chain : std::enable_shared_from_this<Chain> {
    std::mt19937_64 rng;
    std::vector<uint32_t> local;
    std::function<void()> next;
  };
  std::vector<std::shared_ptr<Chain>> chains;
  for (int c = 0; c < std::max(1, o.inflight); ++c) {
    auto chain = std::make_shared<Chain>();
    chain->rng.seed(static_cast<uint64_t>(c) * 7919 + 1);
    std::weak_ptr<Chain> weak = chain;
    chain->next = [&, weak] {
      auto self = weak.lock();
      if (!self) return;
      if (Clock::now() >= stop_at) {
        absl::MutexLock lock(&shared.mu);
        const size_t room = kMaxSamples - std::min(kMaxSamples, shared.latencies.size());
        shared.latencies.insert(
            shared.latencies.end(), self->local.begin(),
            self->local.begin() + static_cast<std::ptrdiff_t>(std::min(room, self->local.size())));
        self->local.clear();
        --shared.running;  // the Await below sees it reach 0
        return;
      }
      const std::string key = fmt::format(FMT_COMPILE("k{}"), self->rng() % o.keys);
      const auto t0 = Clock::now();
      auto finish = [&, self, t0](bool ok, bool admitted) {
        const auto us =
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
        if (self->local.size() < kMaxSamples / 64) self->local.push_back(static_cast<uint32_t>(us));
        decisions.fetch_add(1, std::memory_order_relaxed);
        if (!ok) errors.fetch_add(1, std::memory_order_relaxed);
        if (admitted) allowed.fetch_add(1, std::memory_order_relaxed);
        self->next();
      };
      if (o.mode == "sluice") {
        const backend::Item item{.limit = &o.limit, .limit_id = 1, .key = key, .cost = 1};
        store.DecideAll(std::span(&item, 1), [finish](absl::StatusOr<redis::DecideResult> r) {
          finish(r.ok(), r.ok() && r->allowed);
        });
        return;
      }
      std::string command;
      const std::string redis_key = "anchor:" + key;
      if (o.mode == "seed") {
        const std::string now_ms =
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
        redis::AppendCommand(&command,
                             {"EVALSHA", sha, "1", redis_key, limit_text, window_s, now_ms});
      } else {
        redis::AppendCommand(&command, {"EVALSHA", sha, "1", redis_key, limit_text, window_ms});
      }
      (*client)->Send(redis_key, std::move(command), [finish](absl::StatusOr<redis::Reply> r) {
        const bool ok = r.ok() && r->type == redis::Reply::Type::kArray && !r->elements.empty();
        finish(ok, ok && r->elements[0].integer == 1);
      });
    };
    chains.push_back(std::move(chain));
  }
  const RedisSnapshot before = TakeRedisSnapshot(stats_clients);
  {
    absl::MutexLock lock(&shared.mu);
    shared.running = static_cast<int>(chains.size());
  }
  for (auto& chain : chains) chain->next();
  {
    absl::MutexLock lock(&shared.mu);
    shared.mu.AwaitWithTimeout(absl::Condition(
                                   +[](int* running) { return *running == 0; }, &shared.running),
                               absl::Seconds(o.seconds) + absl::Seconds(15));
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const RedisSnapshot after = TakeRedisSnapshot(stats_clients);
  const RedisExecuted executed = RedisExecutedBetween(before, after);
  std::vector<uint32_t> latencies;
  {
    absl::MutexLock lock(&shared.mu);
    latencies.swap(shared.latencies);
  }
  const uint64_t n = decisions.load();
  const double per = n == 0 ? 0 : 1.0 / static_cast<double>(n);
  out << fmt::format(
             "{{\"mode\":\"{}\",\"algorithm\":\"{}\",\"limit\":\"{}\",\"keys\":{},\"connections\":{"
             "},"
             "\"inflight\":{},\"seconds\":{:.2f},\"decisions\":{},\"decisions_per_sec\":{:.0f},"
             "\"allowed\":{},\"errors\":{},\"redis_commands_per_decision\":{:.2f},"
             "\"script_calls_per_decision\":{:.2f},\"redis_us_per_decision\":{:.2f},"
             "\"redis_cpu_us_per_decision\":{:.2f},\"p50_us\":{},"
             "\"p99_us\":{}}}",
             o.mode,
             o.mode == "sluice"
                 ? AlgorithmName(o.limit.algorithm)
                 : (o.mode == "seed" ? "sliding_window_counter" : "sliding_log_zset"),
             DescribeLimit(o.limit), o.keys, o.connections, o.inflight, elapsed, n,
             static_cast<double>(n) / elapsed, allowed.load(), errors.load(),
             static_cast<double>(executed.commands) * per,
             static_cast<double>(executed.script_calls) * per,
             static_cast<double>(executed.script_usec) * per, executed.cpu_seconds * 1e6 * per,
             Percentile(latencies, 0.50), Percentile(latencies, 0.99))
      << std::endl;
  for (auto& chain : chains) chain->next = nullptr;
  return errors.load() == 0 ? 0 : 1;
}

}  // namespace sluice::tools
