// The sluice command line: serve, replay, check-config, explain, bench store, bench redis, sim.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/bench/bench_redis.h"
#include "cli/bench/bench_store.h"
#include "cli/replay.h"
#include "cli/rules_commands.h"
#include "cli/serve.h"
#include "rules/loader.h"
#include "sim/sim.h"
#include "sluice/limit.h"

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

// `sluice serve`.
struct ServeCommand {
  CLI::App* app = nullptr;
  std::string config_path, listen, admin, grpc_listen, redis_url;
  int threads = 0;
  int top_keys = ServeFlags{}.top_keys;
  int top_keys_sample = ServeFlags{}.top_keys_sample;
  bool envoy_env = false;

  void Add(CLI::App& parent) {
    app = parent.add_subcommand("serve", "run the rate limit service");
    auto* config_option =
        app->add_option("--config", config_path, "settings file or rules directory");
    app->add_option("--listen", listen, "data plane address");
    app->add_option("--admin", admin, "admin address");
    app->add_option("--grpc", grpc_listen, "gRPC (Envoy RLS) address; 0 disables it");
    app->add_option("--threads", threads, "worker threads");
    app->add_option("--top-keys", top_keys,
                    "keys per domain and minute counted for GET /v1/top (the most denied and "
                    "busiest keys); 0 turns it off")
        ->check(CLI::Range(0, 100000));
    app->add_option("--top-keys-sample", top_keys_sample,
                    "record one decision in N for GET /v1/top, counted N times; 1 records each")
        ->check(CLI::Range(1, 1000));
    auto* redis_option =
        app->add_option("--redis", redis_url,
                        "decide on Redis at redis://[user:pass@]host:port[/db] (backend: redis); "
                        "rediss:// for TLS (redis.tls in the settings file)");
    app->add_flag("--envoy-env", envoy_env,
                  "settings and rules from envoyproxy/ratelimit's environment variables "
                  "(docs/integration/envoy.md)")
        ->excludes(config_option)
        ->excludes(redis_option);
  }
  int Run() const {
    ServeFlags flags;
    flags.config = config_path;
    if (app->count("--listen") > 0) flags.listen = listen;
    if (app->count("--admin") > 0) flags.admin = admin;
    if (app->count("--grpc") > 0) flags.grpc = grpc_listen;
    if (app->count("--threads") > 0) flags.threads = threads;
    flags.top_keys = top_keys;
    flags.top_keys_sample = top_keys_sample;
    if (app->count("--redis") > 0) flags.redis = redis_url;
    flags.envoy_env = envoy_env;
    return RunServe(flags);
  }
};

// `sluice replay`: one limit (--algorithm/--limit/--window) or a rules config (--config, --domain)
// over a trace.
struct ReplayCommand {
  CLI::App* app = nullptr;
  LimitFlags limit;
  std::string input, config, domain;

  void Add(CLI::App& parent) {
    app = parent.add_subcommand("replay", "run a limit or a rules config over a trace");
    limit.Add(app, /*required=*/false);
    app->add_option("--input", input, "trace file (default: stdin)");
    app->add_option("--config", config, "rules: a file or directory (instead of a limit)");
    app->add_option("--domain", domain, "the domain of the rules to use, with --config");
  }
  int Run() const {
    if (!config.empty()) {
      if (domain.empty()) {
        std::cerr << "replay: --config needs --domain\n";
        return kUsageError;
      }
      auto loaded = LoadRules(config, "replay");
      if (!loaded) return kUsageError;
      return WithInput([&](std::istream& in) {
        return RunRulesReplay(*loaded, domain, in, std::cout, std::cerr);
      });
    }
    if (limit.algorithm.empty() || limit.window.empty() || app->count("--limit") == 0) {
      std::cerr << "replay: give --algorithm, --limit and --window, or --config and --domain\n";
      return kUsageError;
    }
    auto parsed = limit.ToLimit("replay");
    if (!parsed) return kUsageError;
    return WithInput(
        [&](std::istream& in) { return RunReplay(*parsed, in, std::cout, std::cerr); });
  }
  // `replay` on the trace: --input, else stdin.
  template <typename F>
  int WithInput(F replay) const {
    if (input.empty()) return replay(std::cin);
    std::ifstream file;
    if (!OpenInput(input, &file)) return kUsageError;
    return replay(file);
  }
};

// `sluice explain`.
struct ExplainCommand {
  CLI::App* app = nullptr;
  std::string config, domain, descriptors;

  void Add(CLI::App& parent) {
    app = parent.add_subcommand("explain", "show which rules and limits a request matches");
    app->add_option("--config", config, "rules: a file or directory")->required();
    app->add_option("--domain", domain, "the domain")->required();
    app->add_option("descriptors", descriptors, "k=v,k=v;k=v")->required();
  }
  int Run() const {
    auto loaded = LoadRules(config, "explain");
    if (!loaded) return kUsageError;
    return RunExplain(*loaded, domain, descriptors, std::cout, std::cerr);
  }
};

// `sluice bench store`.
struct BenchStoreCommand {
  CLI::App* app = nullptr;
  LimitFlags limit{.algorithm = "token_bucket", .requests = 1000, .window = "1d", .burst = {}};
  tools::BenchStoreOptions options;

  void Add(CLI::App& bench) {
    app = bench.add_subcommand("store", "decisions/s and bytes/key of the memory store");
    limit.Add(app, /*required=*/false);
    app->add_option("--keys", options.keys, "distinct keys K")->required();
    app->add_option("--threads", options.threads, "threads T")->required();
    app->add_option("--seconds", options.seconds, "duration S")->required();
    app->add_option("--distribution", options.distribution, "uniform or zipf");
    app->add_option("--clock-every", options.clock_every,
                    "read the clock once per this many decisions (default 1)");
    app->add_option("--prefetch", options.prefetch,
                    "prefetch the state this many decisions ahead (default 0 = off)");
    app->add_option(
        "--through", options.through,
        "store (default), backend (the store as the server's engine asks it) or "
        "local_over_limit_cache (the memory-only server: per-thread kept denials in front) or "
        "local_leases (per-thread leases of hot keys in front of that)");
  }
  int Run() {
    auto parsed = limit.ToLimit("bench store");
    if (!parsed) return kUsageError;
    options.limit = *parsed;
    return tools::RunBenchStore(options, std::cout, std::cerr);
  }
};

// `sluice bench redis`.
struct BenchRedisCommand {
  CLI::App* app = nullptr;
  LimitFlags limit{.algorithm = "sliding_window", .requests = 100, .window = "10s", .burst = {}};
  tools::BenchRedisOptions options;

  void Add(CLI::App& bench) {
    app = bench.add_subcommand(
        "redis", "decisions/s, latency and Redis commands per decision against a Redis server");
    limit.Add(app, /*required=*/false);
    app->add_option("--redis", options.redis, "redis://host:port, or rediss:// for TLS")
        ->required();
    app->add_flag("--cluster", options.cluster, "the URL is a Redis Cluster seed node");
    app->add_option("--tls-ca", options.tls_ca_file,
                    "rediss://: the CA file (default: the system's CAs)");
    app->add_option("--tls-cert", options.tls_cert_file,
                    "rediss://: the client certificate, for mutual TLS");
    app->add_option("--tls-key", options.tls_key_file, "rediss://: the client certificate's key");
    app->add_option("--keys", options.keys, "distinct keys K (default 100000)");
    app->add_option("--connections", options.connections, "connections per Redis node (default 2)");
    app->add_option("--inflight", options.inflight, "requests in flight at once (default 64)");
    app->add_option("--seconds", options.seconds, "duration S (default 5)");
    app->add_option("--buckets", options.buckets,
                    "sluice: pack the states into this many hashes (default 0 = a key per state)");
    app->add_option("--cluster-batch", options.cluster_batch,
                    "sluice on a cluster: batch the requests headed to one node (default 1)");
    app->add_option("--mode", options.mode,
                    "sluice (default), seed (the seed design's script), zset (a ZSET sliding "
                    "log) or holds (a concurrency limit's acquire and release, --limit at once)");
    app->add_option("--script", options.script, "the Lua file for --mode seed or zset");
  }
  int Run() {
    auto parsed = limit.ToLimit("bench redis");
    if (!parsed) return kUsageError;
    options.limit = *parsed;
    return tools::RunBenchRedis(options, std::cout, std::cerr);
  }
};

// `sluice sim`: N instances against one Redis, a trace played in real time (docs/sim.md).
struct SimCommand {
  CLI::App* app = nullptr;
  std::string limit = "fixed_window:100/1s", mode = "exact", cache = "on", spread = "round-robin";
  std::vector<std::string> redis;
  int64_t timeout_ms = 1000;
  int64_t lease_interval_ms = 100;
  int64_t sync_interval_ms = 100;
  int64_t window_lease_life_ms = 60000;  // redis.window_lease_life's default
  sim::SimOptions options;

  void Add(CLI::App& parent) {
    app = parent.add_subcommand(
        "sim",
        "N instances against one Redis driven by a trace: Redis work per decision, "
        "over- and under-admission (one JSON line)");
    app->add_option("--instances", options.instances, "instances N (default 4)");
    app->add_option("--redis", redis,
                    "redis://host:port (with --cluster: seed URLs, the option repeated); "
                    "required but with --accuracy");
    app->add_flag("--cluster", options.instance.cluster, "the URLs are Redis Cluster seed nodes");
    app->add_option("--limit", limit, "ALGORITHM:N/WINDOW[:burst=B] (default fixed_window:100/1s)");
    app->add_option("--mode", mode, "exact (default), leased or eventual");
    app->add_flag("--accuracy", options.accuracy,
                  "no Redis: --limit's exact decisions on the trace judged against an exact log "
                  "of the same N per W (one JSON line)");
    app->add_option("--over-limit-cache", cache, "on (default) or off");
    app->add_option("--trace", options.trace_name,
                    "uniform, zipf (default), onoff, hot, boundary, or a file of T_MS KEY [COST] "
                    "lines");
    app->add_option("--keys", options.trace.keys, "distinct keys K (default 10000)");
    app->add_option("--zipf-s", options.trace.zipf_s, "zipf exponent s (default 1.0)");
    app->add_option("--rate", options.trace.rate,
                    "decisions per second, all instances together (default 50000)");
    app->add_option("--seconds", options.trace.seconds, "length of the run (default 5)");
    app->add_option("--warmup", options.warmup_seconds,
                    "also count Redis's work from S seconds into the run (steady_* fields)");
    app->add_option("--seed", options.trace.seed, "seed of the synthetic traces (default 1)");
    app->add_option("--spread", spread,
                    "arrivals to instances: round-robin (default) or hash (by key)");
    app->add_option("--timeout-ms", timeout_ms, "Redis timeout per decision (default 1000)");
    app->add_option("--lease-interval-ms", lease_interval_ms,
                    "leased: a lease's longest life (default 100)");
    app->add_option("--window-lease-life-ms", window_lease_life_ms,
                    "leased: a window lease's longest life (default 60000; 0: 10 lease intervals)");
    app->add_option("--sync-interval-ms", sync_interval_ms,
                    "eventual: how often each instance merges (default 100)");
    app->add_option("--cold-keys-rate", options.cold_keys_rate,
                    "eventual: keys under N decisions/s on an instance are decided from leases, "
                    "the others on copies (cold_keys: lease, hot_key_rate: N); 0 (default): "
                    "every key on copies");
    app->add_option("--csv", options.csv_dir, "write DIR/windows.csv (admitted per window)");
  }
  int Run() {
    options.trace_name = options.trace_name.empty() ? "zipf" : options.trace_name;
    options.trace.kind = sim::ParseTraceKind(options.trace_name);
    options.instance.redis_urls = redis;
    auto parsed_limit = sim::ParseLimitSpec(limit);
    auto parsed_mode = sim::ParseMode(mode);
    std::string error;
    if (!parsed_limit.ok()) error = std::string(parsed_limit.status().message());
    if (!parsed_mode.ok()) error = std::string(parsed_mode.status().message());

    if (cache != "on" && cache != "off") error = "--over-limit-cache is on or off";
    if (spread != "round-robin" && spread != "hash") error = "--spread is round-robin or hash";
    if (timeout_ms <= 0) error = "--timeout-ms must be positive";
    if (lease_interval_ms <= 0) error = "--lease-interval-ms must be positive";
    if (sync_interval_ms <= 0) error = "--sync-interval-ms must be positive";
    if (window_lease_life_ms < 0) error = "--window-lease-life-ms must not be negative";
    if (!error.empty()) {
      std::cerr << "sim: " << error << "\n";
      return kUsageError;
    }
    options.limit = *parsed_limit;
    options.instance.mode = *parsed_mode;
    options.instance.over_limit_cache = cache == "on";
    options.instance.timeout_us = timeout_ms * 1000;
    options.instance.lease_interval_us = lease_interval_ms * 1000;
    options.instance.sync_interval_us = sync_interval_ms * 1000;
    options.instance.window_lease_life_us = window_lease_life_ms * 1000;
    options.spread = spread == "hash" ? sim::Spread::kHash : sim::Spread::kRoundRobin;
    return sim::RunSim(options, std::cout, std::cerr);
  }
};

// Called as `ratelimit` (the image's /bin/ratelimit, a link to sluice: Envoy Gateway runs
// envoyproxy/ratelimit's image with the command /bin/ratelimit and no arguments), sluice is
// `sluice serve --envoy-env`: upstream's environment variables are the whole configuration.
bool CalledAsRatelimit(const char* argv0) {
  return argv0 != nullptr && std::filesystem::path(argv0).filename() == "ratelimit";
}

int Main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  if (argc >= 1 && CalledAsRatelimit(argv[0])) {
    if (argc > 1) {
      std::cerr << "ratelimit: takes no arguments (its settings are envoyproxy/ratelimit's "
                   "environment variables; `sluice serve --envoy-env`)\n";
      return kUsageError;
    }
    ServeFlags flags;
    flags.envoy_env = true;
    return RunServe(flags);
  }
  CLI::App app{"sluice: a rate limiter for HTTP APIs"};
  app.require_subcommand(1);
  ServeCommand serve;
  serve.Add(app);
  ReplayCommand replay;
  replay.Add(app);
  auto* check = app.add_subcommand("check-config", "validate configuration files");
  std::vector<std::string> check_paths;
  check->add_option("paths", check_paths, "files or directories")->required();
  ExplainCommand explain;
  explain.Add(app);
  auto* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  BenchStoreCommand bench_store;
  bench_store.Add(*bench);
  BenchRedisCommand bench_redis;
  bench_redis.Add(*bench);
  SimCommand sim;
  sim.Add(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kUsageError;
  }
  if (serve.app->parsed()) return serve.Run();
  if (check->parsed()) return RunCheckConfig(check_paths, std::cout);
  if (explain.app->parsed()) return explain.Run();
  if (replay.app->parsed()) return replay.Run();
  if (bench_redis.app->parsed()) return bench_redis.Run();
  if (bench_store.app->parsed()) return bench_store.Run();
  if (sim.app->parsed()) return sim.Run();
  return kUsageError;
}

}  // namespace
}  // namespace sluice::cli

int main(int argc, char** argv) { return sluice::cli::Main(argc, argv); }
