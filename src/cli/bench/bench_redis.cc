#include "cli/bench/bench_redis.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backend/redis/redis_holds.h"
#include "backend/redis/redis_store.h"
#include "cli/bench/redis_stats.h"
#include "fmt/compile.h"
#include "fmt/format.h"
#include "redis/client.h"
#include "redis/tls.h"
#include "spdlog/spdlog.h"
#include "util/percentile.h"

namespace sluice::tools {
namespace {

using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Checks the options; reads the anchor's script for seed and zset into `script`. An exit
// status, or nullopt to go on.
std::optional<int> CheckOptions(const BenchRedisOptions& o, std::string* script,
                                std::ostream& err) {
  if (o.mode != "sluice" && o.mode != "seed" && o.mode != "zset" && o.mode != "holds") {
    err << "bench redis: --mode is sluice, seed, zset or holds\n";
    return 2;
  }
  if (o.mode == "holds") return std::nullopt;  // --limit N: the holds at once per key
  if (o.mode == "sluice") {
    if (auto s = redis::CheckExactRange(o.limit); !s.ok()) {
      err << "bench redis: " << s.message() << "\n";
      return 2;
    }
    return std::nullopt;
  }
  std::ifstream file(o.script);
  std::stringstream text;
  text << file.rdbuf();
  *script = text.str();
  if (!file || script->empty()) {
    err << "bench redis: --mode " << o.mode << " needs --script FILE (the anchor's Lua)\n";
    return 2;
  }
  return std::nullopt;
}

// Waits up to 5 s for the client's first connection; whether it came.
bool AwaitReady(const redis::Client& client) {
  const auto deadline = SteadyClock::now() + 5s;
  while (!client.Ready() && SteadyClock::now() < deadline) std::this_thread::sleep_for(10ms);
  return client.Ready();
}

// Sends one decision of the benchmarked kind for a key: sluice's (RedisStore::DecideAll), or
// an anchor script's (EVALSHA), and calls `finish(ok, admitted)` with its outcome.
class DecisionSender {
 public:
  using Finish = std::function<void(bool ok, bool admitted)>;

  DecisionSender(const BenchRedisOptions& o, redis::Client* client, redis::RedisStore* store,
                 redis::RedisHolds* holds, std::string sha)
      : o_(o),
        client_(client),
        store_(store),
        holds_(holds),
        sha_(std::move(sha)),
        limit_text_(std::to_string(o.limit.requests)),
        window_ms_(std::to_string(std::max<int64_t>(1, o.limit.window_us / 1000))),
        window_s_(std::to_string(std::max<int64_t>(1, o.limit.window_us / 1000000))) {}

  void Send(const std::string& key, Finish finish) const {
    if (o_.mode == "holds") {  // one acquisition and, when granted, its release
      const backend::HoldRequest request{
          .limit_id = 1, .key = key, .n = o_.limit.requests, .max_hold_us = 60'000'000};
      holds_->Acquire(std::span(&request, 1), 0, [this, finish](backend::Acquisition got) {
        if (!got.status.ok() || !got.ok) return finish(got.status.ok(), false);
        holds_->Release(got.holds, 0, [finish](absl::StatusOr<size_t> released) {
          finish(released.ok() && *released == 1, true);
        });
      });
      return;
    }
    if (o_.mode == "sluice") {
      const backend::Item item{.limit = &o_.limit, .limit_id = 1, .key = key, .cost = 1};
      store_->DecideAll(std::span(&item, 1), [finish](absl::StatusOr<redis::DecideResult> r) {
        finish(r.ok(), r.ok() && r->allowed);
      });
      return;
    }
    std::string command;
    const std::string redis_key = "anchor:" + key;
    if (o_.mode == "seed") {
      const std::string now_ms =
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count());
      redis::AppendCommand(&command,
                           {"EVALSHA", sha_, "1", redis_key, limit_text_, window_s_, now_ms});
    } else {
      redis::AppendCommand(&command, {"EVALSHA", sha_, "1", redis_key, limit_text_, window_ms_});
    }
    client_->Send(redis_key, std::move(command), [finish](absl::StatusOr<redis::Reply> r) {
      const bool ok = r.ok() && r->type == redis::Reply::Type::kArray && !r->elements.empty();
      finish(ok, ok && r->elements[0].integer == 1);
    });
  }

 private:
  const BenchRedisOptions& o_;
  redis::Client* client_;
  redis::RedisStore* store_;
  redis::RedisHolds* holds_;
  const std::string sha_;
  const std::string limit_text_, window_ms_, window_s_;
};

// What a run measured.
struct LoadResult {
  uint64_t decisions = 0, allowed = 0, errors = 0;
  std::vector<uint32_t> latencies;  // µs, of at most kMaxSamples decisions
  double seconds = 0;               // from the first request to the last answer
};

constexpr size_t kMaxSamples = 20000000;

// Closed loop: `inflight` chains, each starting its next request when the last one answers,
// until o.seconds have passed.
LoadResult RunClosedLoop(const BenchRedisOptions& o, const DecisionSender& sender) {
  struct Shared {
    absl::Mutex mu;
    int running ABSL_GUARDED_BY(mu) = 0;
    std::vector<uint32_t> latencies ABSL_GUARDED_BY(mu);  // µs (appended in batches)
  } shared;
  std::atomic<uint64_t> decisions{0}, allowed{0}, errors{0};
  struct Chain : std::enable_shared_from_this<Chain> {
    std::mt19937_64 rng;
    std::vector<uint32_t> local;
    std::function<void()> next;
  };
  std::vector<std::shared_ptr<Chain>> chains;
  const auto start = SteadyClock::now();
  const auto stop_at = start + std::chrono::duration_cast<SteadyClock::duration>(
                                   std::chrono::duration<double>(o.seconds));
  for (int c = 0; c < std::max(1, o.inflight); ++c) {
    auto chain = std::make_shared<Chain>();
    chain->rng.seed(static_cast<uint64_t>(c) * 7919 + 1);
    std::weak_ptr<Chain> weak = chain;
    chain->next = [&, weak] {
      auto self = weak.lock();
      if (!self) return;
      if (SteadyClock::now() >= stop_at) {
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
      const auto t0 = SteadyClock::now();
      sender.Send(key, [&, self, t0](bool ok, bool admitted) {
        const auto us =
            std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - t0).count();
        if (self->local.size() < kMaxSamples / 64) {
          self->local.push_back(static_cast<uint32_t>(us));
        }
        decisions.fetch_add(1, std::memory_order_relaxed);
        if (!ok) errors.fetch_add(1, std::memory_order_relaxed);
        if (admitted) allowed.fetch_add(1, std::memory_order_relaxed);
        self->next();
      });
    };
    chains.push_back(std::move(chain));
  }
  {
    absl::MutexLock lock(&shared.mu);
    shared.running = static_cast<int>(chains.size());
  }
  for (auto& chain : chains) chain->next();
  LoadResult result;
  {
    absl::MutexLock lock(&shared.mu);
    shared.mu.AwaitWithTimeout(absl::Condition(
                                   +[](int* running) { return *running == 0; }, &shared.running),
                               absl::Seconds(o.seconds) + absl::Seconds(15));
    result.seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
    result.latencies.swap(shared.latencies);
  }
  for (auto& chain : chains) chain->next = nullptr;
  result.decisions = decisions.load();
  result.allowed = allowed.load();
  result.errors = errors.load();
  return result;
}

// The JSON line of a run.
std::string ResultJson(const BenchRedisOptions& o, LoadResult& r, const RedisExecuted& executed) {
  const uint64_t n = r.decisions;
  const double per = n == 0 ? 0 : 1.0 / static_cast<double>(n);
  return fmt::format(
      "{{\"mode\":\"{}\",\"algorithm\":\"{}\",\"limit\":\"{}\",\"keys\":{},\"connections\":{},"
      "\"inflight\":{},\"seconds\":{:.2f},\"decisions\":{},\"decisions_per_sec\":{:.0f},"
      "\"allowed\":{},\"errors\":{},\"redis_commands_per_decision\":{:.2f},"
      "\"script_calls_per_decision\":{:.2f},\"redis_us_per_decision\":{:.2f},"
      "\"redis_cpu_us_per_decision\":{:.2f},\"p50_us\":{},"
      "\"p99_us\":{}}}",
      o.mode,
      o.mode == "sluice"  ? AlgorithmName(o.limit.algorithm)
      : o.mode == "holds" ? "concurrency"
      : o.mode == "seed"  ? "sliding_window_counter"
                          : "sliding_log_zset",
      o.mode == "holds" ? fmt::format("{} at once", o.limit.requests) : DescribeLimit(o.limit),
      o.keys, o.connections, o.inflight, r.seconds, n, static_cast<double>(n) / r.seconds,
      r.allowed, r.errors, static_cast<double>(executed.commands) * per,
      static_cast<double>(executed.script_calls) * per,
      static_cast<double>(executed.script_usec) * per, executed.cpu_seconds * 1e6 * per,
      util::Percentile(r.latencies, 0.50), util::Percentile(r.latencies, 0.99));
}

}  // namespace

int RunBenchRedis(const BenchRedisOptions& o, std::ostream& out, std::ostream& err) {
  std::string script;
  if (auto status = CheckOptions(o, &script, err)) return *status;
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
  if (!o.tls_ca_file.empty() || !o.tls_cert_file.empty() || !o.tls_key_file.empty()) {
    client_options.tls = redis::TlsOptions{};
    client_options.tls->ca_file = o.tls_ca_file;
    client_options.tls->cert_file = o.tls_cert_file;
    client_options.tls->key_file = o.tls_key_file;
  }
  auto client = redis::Client::Create(client_options);
  if (!client.ok()) {
    err << "bench redis: " << client.status().message() << "\n";
    return 2;
  }
  if (!AwaitReady(**client)) {
    err << "bench redis: cannot reach " << o.redis << ": " << (*client)->last_error() << "\n";
    return 1;
  }
  const auto stats_clients = RedisStatsClients(**client, client_options);

  std::string sha;
  if (o.mode == "seed" || o.mode == "zset") {
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
  redis::RedisHolds holds(client->get(), "bench:");
  const DecisionSender sender(o, client->get(), &store, &holds, std::move(sha));

  const RedisSnapshot before = TakeRedisSnapshot(stats_clients);
  LoadResult result = RunClosedLoop(o, sender);
  const RedisSnapshot after = TakeRedisSnapshot(stats_clients);
  out << ResultJson(o, result, RedisExecutedBetween(before, after)) << std::endl;
  return result.errors == 0 ? 0 : 1;
}

}  // namespace sluice::tools
