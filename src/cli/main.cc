// The sluice command line: serve, replay, check-config, explain, bench store, bench redis.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/replay.h"
#include "cli/rules_commands.h"
#include "cli/serve.h"
#include "rules/loader.h"
#include "sluice/limit.h"
#include "tools/bench_redis.h"
#include "tools/bench_store.h"

namespace sluice::cli {
namespace {

constexpr int kUsageError = 2;

// The --algorithm/--limit/--window/--burst flags shared by replay and bench.
struct LimitFlags {
  std::string algorithm;
  uint64_t requests = 0;
  std::string window;
  std::optional<uint64_t> burst;

  void Add(CLI::App* app, bool required) {
    auto* a = app->add_option("--algorithm", algorithm,
                              "token_bucket (alias gcra), leaky_bucket, fixed_window, sliding_log, "
                              "sliding_window");
    auto* n = app->add_option("--limit", requests, "N: requests per window")
                  ->check(CLI::NonNegativeNumber);
    auto* w = app->add_option("--window", window, "W: a duration such as 250ms, 1s, 5m, 1h, 1d");
    app->add_option("--burst", burst,
                    "B: token_bucket capacity (default N); leaky_bucket queue depth (default 0)")
        ->check(CLI::NonNegativeNumber);
    if (required) {
      a->required();
      n->required();
      w->required();
    }
  }

  // The limit, or a message on stderr and nullopt.
  std::optional<Limit> ToLimit(std::string_view command) const {
    Limit limit;
    auto algo = ParseAlgorithm(algorithm);
    if (!algo.ok()) {
      std::cerr << command << ": " << algo.status().message() << "\n";
      return std::nullopt;
    }
    limit.algorithm = *algo;
    limit.requests = requests;
    auto w = ParseDuration(window);
    if (!w.ok()) {
      std::cerr << command << ": --window: " << w.status().message() << "\n";
      return std::nullopt;
    }
    limit.window_us = *w;
    limit.burst = burst;
    if (absl::Status s = ValidateLimit(limit); !s.ok()) {
      std::cerr << command << ": " << s.message() << "\n";
      return std::nullopt;
    }
    return limit;
  }
};

// Opens a trace file for replay; a message on stderr when it is not a readable file.
bool OpenInput(const std::string& path, std::ifstream* file) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::cerr << "replay: " << path << " is a directory\n";
    return false;
  }
  file->open(path);
  if (!*file) {
    std::cerr << "replay: cannot open " << path << "\n";
    return false;
  }
  return true;
}

// Loads a rules configuration for a one-shot command; errors to stderr.
std::shared_ptr<const rules::Config> LoadRules(const std::string& path, std::string_view command) {
  rules::LoadResult result = rules::LoadConfig({path});
  for (const auto& e : result.errors) std::cerr << command << ": " << e.ToString() << "\n";
  return result.config;
}

int Main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  CLI::App app{"sluice: a rate limiter for HTTP APIs"};
  app.require_subcommand(1);

  auto* serve = app.add_subcommand("serve", "run the rate limit service");
  std::string config_path, listen, admin, grpc_listen, redis_url;
  int serve_threads = 0;
  auto* config_option =
      serve->add_option("--config", config_path, "settings file or rules directory");
  serve->add_option("--listen", listen, "data plane address");
  serve->add_option("--admin", admin, "admin address");
  serve->add_option("--grpc", grpc_listen, "gRPC (Envoy RLS) address; 0 disables it");
  serve->add_option("--threads", serve_threads, "worker threads");
  auto* redis_option =
      serve->add_option("--redis", redis_url,
                        "decide on Redis at redis://[user:pass@]host:port[/db] (backend: redis)");
  bool envoy_env = false;
  serve
      ->add_flag("--envoy-env", envoy_env,
                 "settings and rules from envoyproxy/ratelimit's environment variables "
                 "(docs/integration/envoy.md)")
      ->excludes(config_option)
      ->excludes(redis_option);

  auto* replay = app.add_subcommand("replay", "run a limit or a rules config over a trace");
  LimitFlags replay_flags;
  replay_flags.Add(replay, /*required=*/false);
  std::string input, replay_config, replay_domain;
  replay->add_option("--input", input, "trace file (default: stdin)");
  replay->add_option("--config", replay_config, "rules: a file or directory (instead of a limit)");
  replay->add_option("--domain", replay_domain, "the domain of the rules to use, with --config");

  auto* check = app.add_subcommand("check-config", "validate configuration files");
  std::vector<std::string> check_paths;
  check->add_option("paths", check_paths, "files or directories")->required();

  auto* explain = app.add_subcommand("explain", "show which rules and limits a request matches");
  std::string explain_config, explain_domain, explain_descriptors;
  explain->add_option("--config", explain_config, "rules: a file or directory")->required();
  explain->add_option("--domain", explain_domain, "the domain")->required();
  explain->add_option("descriptors", explain_descriptors, "k=v,k=v;k=v")->required();

  auto* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  auto* bench_store =
      bench->add_subcommand("store", "decisions/s and bytes/key of the memory store");
  LimitFlags bench_flags{
      .algorithm = "token_bucket", .requests = 1000, .window = "1d", .burst = {}};
  bench_flags.Add(bench_store, /*required=*/false);
  tools::BenchStoreOptions bench_options;
  bench_store->add_option("--keys", bench_options.keys, "distinct keys K")->required();
  bench_store->add_option("--threads", bench_options.threads, "threads T")->required();
  bench_store->add_option("--seconds", bench_options.seconds, "duration S")->required();
  bench_store->add_option("--distribution", bench_options.distribution, "uniform or zipf");
  bench_store->add_option("--clock-every", bench_options.clock_every,
                          "read the clock once per this many decisions (default 1)");
  bench_store->add_option("--prefetch", bench_options.prefetch,
                          "prefetch the state this many decisions ahead (default 0 = off)");

  auto* bench_redis = bench->add_subcommand(
      "redis", "decisions/s, latency and Redis commands per decision against a Redis server");
  LimitFlags redis_flags{
      .algorithm = "sliding_window", .requests = 100, .window = "10s", .burst = {}};
  redis_flags.Add(bench_redis, /*required=*/false);
  tools::BenchRedisOptions redis_options;
  bench_redis->add_option("--redis", redis_options.redis, "redis://host:port")->required();
  bench_redis->add_flag("--cluster", redis_options.cluster, "the URL is a Redis Cluster seed node");
  bench_redis->add_option("--keys", redis_options.keys, "distinct keys K (default 100000)");
  bench_redis->add_option("--connections", redis_options.connections,
                          "connections per Redis node (default 2)");
  bench_redis->add_option("--inflight", redis_options.inflight,
                          "requests in flight at once (default 64)");
  bench_redis->add_option("--seconds", redis_options.seconds, "duration S (default 5)");
  bench_redis->add_option(
      "--buckets", redis_options.buckets,
      "sluice: pack the states into this many hashes (default 0 = a key per state)");
  bench_redis->add_option("--cluster-batch", redis_options.cluster_batch,
                          "sluice on a cluster: batch the requests headed to one node (default 1)");
  bench_redis->add_option(
      "--mode", redis_options.mode,
      "sluice (default), seed (the seed design's script) or zset (a ZSET sliding log)");
  bench_redis->add_option("--script", redis_options.script, "the Lua file for --mode seed or zset");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kUsageError;
  }

  if (serve->parsed()) {
    ServeFlags flags;
    flags.config = config_path;
    if (serve->count("--listen") > 0) flags.listen = listen;
    if (serve->count("--admin") > 0) flags.admin = admin;
    if (serve->count("--grpc") > 0) flags.grpc = grpc_listen;
    if (serve->count("--threads") > 0) flags.threads = serve_threads;
    if (serve->count("--redis") > 0) flags.redis = redis_url;
    flags.envoy_env = envoy_env;
    return RunServe(flags);
  }
  if (check->parsed()) return RunCheckConfig(check_paths, std::cout);
  if (explain->parsed()) {
    auto loaded = LoadRules(explain_config, "explain");
    if (!loaded) return kUsageError;
    return RunExplain(*loaded, explain_domain, explain_descriptors, std::cout, std::cerr);
  }
  if (replay->parsed() && !replay_config.empty()) {
    if (replay_domain.empty()) {
      std::cerr << "replay: --config needs --domain\n";
      return kUsageError;
    }
    auto loaded = LoadRules(replay_config, "replay");
    if (!loaded) return kUsageError;
    if (input.empty())
      return RunRulesReplay(*loaded, replay_domain, std::cin, std::cout, std::cerr);
    std::ifstream file;
    if (!OpenInput(input, &file)) return kUsageError;
    return RunRulesReplay(*loaded, replay_domain, file, std::cout, std::cerr);
  }
  if (replay->parsed()) {
    if (replay_flags.algorithm.empty() || replay_flags.window.empty() ||
        replay->count("--limit") == 0) {
      std::cerr << "replay: give --algorithm, --limit and --window, or --config and --domain\n";
      return kUsageError;
    }
    auto limit = replay_flags.ToLimit("replay");
    if (!limit) return kUsageError;
    if (input.empty()) return RunReplay(*limit, std::cin, std::cout, std::cerr);
    std::ifstream file;
    if (!OpenInput(input, &file)) return kUsageError;
    return RunReplay(*limit, file, std::cout, std::cerr);
  }
  if (bench_redis->parsed()) {
    auto limit = redis_flags.ToLimit("bench redis");
    if (!limit) return kUsageError;
    redis_options.limit = *limit;
    return tools::RunBenchRedis(redis_options, std::cout, std::cerr);
  }
  if (bench_store->parsed()) {
    auto limit = bench_flags.ToLimit("bench store");
    if (!limit) return kUsageError;
    bench_options.limit = *limit;
    return tools::RunBenchStore(bench_options, std::cout, std::cerr);
  }
  return kUsageError;
}

}  // namespace
}  // namespace sluice::cli

int main(int argc, char** argv) { return sluice::cli::Main(argc, argv); }
