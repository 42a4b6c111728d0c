#include "cli/serve.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "cli/default_config.h"
#include "cli/envoy_env.h"
#include "cli/rls_json_endpoint.h"
#include "fmt/format.h"
#include "http/server.h"
#include "http/service.h"
#include "metrics/registry.h"
#include "metrics/server_metrics.h"
#include "redis/client.h"
#include "redis/eviction_policy.h"
#include "redis/redis_store.h"
#include "rls/grpc_server.h"
#include "rules/config_manager.h"
#include "spdlog/spdlog.h"
#include "store/memory_store.h"

namespace sluice::cli {
namespace {

// The admin listener's own connection cap: a flood on the data plane never locks operators and
// scrapers out, and the admin port cannot be used to exhaust the process either.
constexpr size_t kAdminMaxConnections = 128;

// The Redis backend of `sluice serve`: client, store and the engine's view of it. The client
// is declared last so that it goes first: its destructor fails the calls still in flight (a
// background refund, say), whose callbacks use the store, which must still be there.
struct RedisBackend {
  std::unique_ptr<redis::RedisStore> store;
  std::unique_ptr<redis::RedisEngineStore> engine_store;
  std::unique_ptr<redis::Client> client;
  std::string where;  // for messages: the URL's host:port or "cluster (N seeds)"
};

// Connects to Redis as the settings say (`url`, or a cluster's `nodes`), waiting a moment for
// the connection so that a wrong password is a start-up error; an unreachable Redis is not (its
// domains' failure_mode answers until it comes).
absl::StatusOr<RedisBackend> StartRedis(const rules::Settings& settings,
                                        const std::optional<std::string>& url_flag) {
  redis::Client::Options options;
  options.cluster = settings.redis_cluster;
  std::vector<std::string> urls;
  if (url_flag) {
    urls = {*url_flag};
  } else if (!settings.redis_nodes.empty()) {
    urls = settings.redis_nodes;
  } else if (!settings.redis_url.empty()) {
    urls = {settings.redis_url};
  } else {
    return absl::InvalidArgumentError(
        "backend: redis needs redis.url (or redis.nodes with cluster: true), or --redis URL");
  }
  for (const std::string& url : urls) {
    auto endpoint = redis::ParseUrl(url);
    if (!endpoint.ok()) return endpoint.status();
    options.seeds.push_back(*endpoint);
  }
  options.connection.timeout = std::chrono::microseconds(settings.redis_timeout_us);
  RedisBackend backend;
  backend.where = options.cluster ? fmt::format("redis cluster via {}", options.seeds[0].Address())
                                  : fmt::format("redis {}", options.seeds[0].Address());
  auto client = redis::Client::Create(options);
  if (!client.ok()) return client.status();
  backend.client = *std::move(client);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!backend.client->Ready() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!backend.client->Ready()) {
    const std::string why = backend.client->last_error();
    if (why.find("login to") != std::string::npos) {
      return absl::PermissionDeniedError(fmt::format("{}: {}", backend.where, why));
    }
    spdlog::warn("{} not reachable yet ({}); failure_mode answers until it is", backend.where, why);
  }
  // Redis's own eviction would drop live states (each a reset limit): warn unless noeviction.
  redis::ReadMaxmemoryPolicy(
      *backend.client, settings.redis_key_prefix,
      [where = backend.where](absl::StatusOr<std::string> policy) {
        if (!policy.ok()) {
          spdlog::warn(
              "{}: could not read maxmemory-policy ({}); exact limits need noeviction "
              "(docs/redis.md)",
              where, std::string(policy.status().message()));
        } else if (auto warning = redis::EvictionPolicyWarning(*policy)) {
          spdlog::warn("{}: {}", where, *warning);
        }
      });
  redis::RedisStore::Options store_options;
  store_options.key_prefix = settings.redis_key_prefix;
  store_options.buckets = settings.redis_buckets;
  backend.store = std::make_unique<redis::RedisStore>(backend.client.get(), store_options);
  backend.engine_store = std::make_unique<redis::RedisEngineStore>(backend.store.get());
  return backend;
}

// A few requests to try against the embedded default config, with the real ports.
void PrintTryIt(const std::string& data_host, int data_port, const std::string& admin_host,
                int admin_port) {
  // A wildcard address is reached on loopback.
  const auto reach = [](const std::string& h) {
    return h.empty() || h == "0.0.0.0" ? std::string("127.0.0.1") : h == "[::]" ? "[::1]" : h;
  };
  const std::string data = fmt::format("http://{}:{}", reach(data_host), data_port);
  const std::string admin = fmt::format("http://{}:{}", reach(admin_host), admin_port);
  std::cout << "sluice: try it (domain \"default\": 100 r/s per client IP, 10 r/s per API key on "
               "the free plan):\n"
            << "  curl -si " << data
            << "/v1/check -d '{\"domain\":\"default\",\"descriptors\":"
               "[{\"entries\":[{\"key\":\"api_key\",\"value\":\"k1\"}]}]}'\n"
            << "  curl -si " << data << "/v1/auth -H 'X-Api-Key: k1'\n"
            << "  curl -s " << admin << "/metrics | grep sluice_decisions_total\n"
            << std::flush;
}

// Registers the backend's families on /metrics.
absl::Status RegisterRedisMetrics(metrics::Registry& registry, const RedisBackend& backend) {
  redis::RedisStore* store = backend.store.get();
  using Stats = redis::RedisStore::Stats;
  const std::pair<const char*, const char*> counters[] = {
      {"sluice_backend_calls_total", "decisions asked of the backend"},
      {"sluice_backend_script_calls_total", "script calls sent to Redis (a batch counts once)"},
      {"sluice_backend_errors_total", "backend calls that failed (timeouts included)"},
      {"sluice_backend_timeouts_total", "backend calls that timed out"},
      {"sluice_backend_noscript_reloads_total", "NOSCRIPT answers, the script reloaded"},
      {"sluice_backend_refused_total", "calls refused at once by the open circuit breaker"},
      {"sluice_backend_breaker_opened_total", "times the circuit breaker opened"},
      {"sluice_backend_late_refunds_total",
       "requests admitted by a script call whose reply came after they were answered, refunded"}};
  uint64_t Stats::*const fields[] = {
      &Stats::calls,          &Stats::script_calls,     &Stats::errors,
      &Stats::timeouts,       &Stats::noscript_reloads, &Stats::refused,
      &Stats::breaker_opened, &Stats::late_refunds};
  for (size_t i = 0; i < std::size(counters); ++i) {
    auto status = registry.AddCallbackCounter(
        counters[i].first, counters[i].second,
        [store, field = fields[i]] { return static_cast<double>(store->GetStats().*field); });
    if (!status.ok()) return status;
  }
  if (auto s = registry.AddCallbackGauge("sluice_backend_up",
                                         "1 when the backend can decide: connected, breaker "
                                         "closed, no call failed in the last second",
                                         [store] { return store->GetHealth().up ? 1.0 : 0.0; });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackGauge("sluice_backend_breaker_state",
                                         "circuit breaker: 0 closed, 1 open, 2 half-open",
                                         [store] {
                                           switch (store->GetStats().breaker) {
                                             case redis::Breaker::State::kOpen:
                                               return 1.0;
                                             case redis::Breaker::State::kHalfOpen:
                                               return 2.0;
                                             default:
                                               return 0.0;
                                           }
                                         });
      !s.ok()) {
    return s;
  }
  redis::RedisEngineStore* engine_store = backend.engine_store.get();
  return registry.AddCallback(
      {.name = "sluice_backend_fallback_requests_total",
       .help = "requests answered by their domain's failure_mode while the backend failed",
       .label_names = {"policy"}},
      metrics::MetricType::kCounter, [engine_store] {
        using engine::BackendState;
        return std::vector<metrics::CallbackSample>{
            {{"open"}, static_cast<double>(engine_store->fallbacks(BackendState::kFailedOpen))},
            {{"local"}, static_cast<double>(engine_store->fallbacks(BackendState::kLocal))},
            {{"closed"},
             static_cast<double>(engine_store->fallbacks(BackendState::kFailedClosed))}};
      });
}

bool IsLoopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address.rfind("[::1]", 0) == 0 ||
         address.rfind("localhost:", 0) == 0;
}

// The admin token from `admin.token_file`: its first line, without surrounding white space.
std::optional<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  if (!in || !std::getline(in, token)) return std::nullopt;
  while (!token.empty() && isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  while (!token.empty() && isspace(static_cast<unsigned char>(token.front()))) token.erase(0, 1);
  if (token.empty()) return std::nullopt;
  return token;
}

// The process environment as a map, for ReadEnvoyEnv.
std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const size_t equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return env;
}

}  // namespace

int RunServe(const ServeFlags& flags) {
  // Debian's abseil checks every Mutex acquisition for lock-order cycles (a debug aid), which
  // gRPC pays for on each call; a server has no use for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<std::string> paths;
  if (!flags.config.empty()) paths = {flags.config};
  std::string config_name = flags.config.empty() ? "<embedded default>" : flags.config;
  rules::LoadOptions load_options;
  if (flags.envoy_env) {
    const EnvoyEnv env = ReadEnvoyEnv(ProcessEnvironment());
    for (const EnvoyEnvMessage& m : env.messages) {
      std::cerr << "serve: envoy-env: " << m.ToString() << "\n";
    }
    if (!env.ok()) {
      std::cerr << "serve: envoy-env: not starting: the errors above would change decisions or "
                   "the deployment (docs/integration/envoy.md)\n";
      return 1;
    }
    spdlog::set_level(spdlog::level::from_str(env.log_level));
    paths = {env.rules_path};
    config_name = env.rules_path;
    load_options = env.load;
  }
  rules::ConfigManager manager(paths, std::string(kDefaultConfig), load_options);
  const rules::ConfigManager::ReloadOutcome loaded = manager.Reload();
  if (!loaded.errors.empty()) {
    for (const auto& e : loaded.errors) std::cerr << "serve: " << e.ToString() << "\n";
    return 1;
  }
  const rules::Settings settings = manager.Current()->settings;
  const std::string listen = flags.listen.value_or(settings.listen);
  const std::string admin = flags.admin.value_or(settings.admin_listen);
  const std::string grpc = flags.grpc.value_or(settings.grpc_listen);
  const bool grpc_enabled = !grpc.empty() && grpc != "0";
  int threads = flags.threads.value_or(settings.threads);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  std::string token;
  if (!settings.admin_token_file.empty()) {
    auto t = ReadToken(settings.admin_token_file);
    if (!t) {
      std::cerr << "serve: cannot read an admin token from " << settings.admin_token_file << "\n";
      return 1;
    }
    token = *t;
  }
  if (token.empty() && !IsLoopback(admin)) {
    std::cerr << "serve: refusing to serve the admin API on " << admin
              << " without a token: set admin.token_file in the settings file, or bind it to "
                 "127.0.0.1\n";
    return 1;
  }

  // SIGTERM and SIGINT are taken by one thread with sigwait: blocked here, before any other
  // thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  store::MemoryStore store(
      {.max_entries = settings.max_entries, .shards = 64, .on_full = settings.on_full},
      SystemClock::Get());
  std::optional<RedisBackend> redis_backend;
  if (flags.redis || settings.backend == "redis") {
    auto started = StartRedis(settings, flags.redis);
    if (!started.ok()) {
      std::cerr << "serve: " << started.status().message() << "\n";
      return 1;
    }
    redis_backend = *std::move(started);
  }
  engine::RemoteStore* remote = redis_backend ? redis_backend->engine_store.get() : nullptr;
  http::Service service(&manager, &store, SystemClock::Get(), token, remote);
  service.SetJsonEndpoint(RlsJsonEndpoint());
  std::function<bool()> backend_serving;
  if (redis_backend) {
    redis::RedisStore* redis_store = redis_backend->store.get();
    const std::string where = redis_backend->where;
    // Not the connection alone: a hung Redis keeps it while every decision times out.
    service.SetBackendHealth([redis_store, where] {
      const redis::RedisStore::Health health = redis_store->GetHealth();
      return http::Service::BackendHealth{health.up, where + ": " + health.detail};
    });
    // gRPC health: SERVING while Redis decides, or while no domain fails closed without it.
    backend_serving = [redis_store, &manager] {
      if (redis_store->GetHealth().up) return true;
      const auto config = manager.Current();
      return config->FirstFailingClosed() == nullptr;
    };
  }
  http::HttpServer server(
      {.threads = threads,
       .max_header_bytes = settings.max_header_bytes,
       .max_body_bytes = settings.max_body_bytes,
       .header_timeout = std::chrono::milliseconds(settings.header_timeout_us / 1000),
       .idle_timeout = std::chrono::milliseconds(settings.idle_timeout_us / 1000),
       .max_connections = settings.max_connections,
       .shutdown_timeout = std::chrono::milliseconds(settings.shutdown_timeout_us / 1000)});
  const int64_t start_us = SystemClock::Get()->NowMicros();
  metrics::Registry registry;
  auto metrics = metrics::ServerMetrics::Register(
      &registry, {.store =
                      [&store] {
                        const auto st = store.GetStats();
                        return metrics::ServerMetrics::StoreStats{
                            .entries = static_cast<double>(st.entries),
                            .memory_bytes = static_cast<double>(st.memory_bytes),
                            .reclaimed = static_cast<double>(st.reclaimed),
                            .overflow_states = static_cast<double>(st.overflow_states),
                            .on_full = std::string(OnFullName(st.on_full)),
                            .no_room_allowed = static_cast<double>(st.no_room_allowed),
                            .no_room_denied = static_cast<double>(st.no_room_denied)};
                      },
                  .config =
                      [&manager] {
                        const auto current = manager.Current();
                        return metrics::ServerMetrics::ConfigStats{
                            current ? current->version : "",
                            static_cast<double>(manager.reload_successes()),
                            static_cast<double>(manager.reload_failures())};
                      },
                  .now_us = [] { return SystemClock::Get()->NowMicros(); },
                  .start_time_us = start_us,
                  .max_decision_series = 10000});
  if (!metrics.ok()) {
    std::cerr << "serve: metrics: " << metrics.status().message() << "\n";
    return 1;
  }
  if (redis_backend) {
    if (auto s = RegisterRedisMetrics(registry, *redis_backend); !s.ok()) {
      std::cerr << "serve: metrics: " << s.message() << "\n";
      return 1;
    }
  }
  // The server counts connections itself; each scrape brings the metrics up to date.
  std::mutex scrape_mu;
  const auto catch_up = [](metrics::Counter* counter, uint64_t total) {
    if (total > counter->Value()) counter->Inc(total - counter->Value());
  };
  service.SetMetrics(&registry, &*metrics, [&] {
    std::lock_guard<std::mutex> lock(scrape_mu);
    const http::ServerStats& st = server.stats();
    metrics->http_open_connections->Set(static_cast<double>(st.connections_open.load()));
    catch_up(metrics->http_connections, st.connections_total.load());
    catch_up(metrics->http_connections_rejected, st.connections_rejected.load());
  });
  auto data_port = server.Listen(
      listen,
      [&](http::HttpRequest& req, const std::string& peer, http::HttpResponse& res,
          http::Deferral& deferral) { service.HandleData(req, peer, res, deferral); },
      0, [&](const http::HttpRequest& header) { return service.StreamsBody(header); },
      [&](unsigned status) { service.CountStatus(status); });
  if (!data_port.ok()) {
    std::cerr << "serve: " << data_port.status().message() << "\n";
    return 1;
  }
  auto admin_port = server.Listen(
      admin,
      [&](http::HttpRequest& req, const std::string& peer, http::HttpResponse& res,
          http::Deferral& deferral) { service.HandleAdmin(req, peer, res, deferral); },
      kAdminMaxConnections);
  if (!admin_port.ok()) {
    std::cerr << "serve: " << admin_port.status().message() << "\n";
    return 1;
  }
  std::unique_ptr<rls::GrpcServer> grpc_server;
  if (grpc_enabled) {
    auto started = rls::GrpcServer::Start(
        {.address = grpc,
         .max_message_bytes = static_cast<int>(std::min<size_t>(
             settings.max_body_bytes, static_cast<size_t>(std::numeric_limits<int>::max()))),
         .remote = remote,
         .backend_serving = backend_serving,
         .on_decision = [&service](std::string_view domain, const engine::Response& decision,
                                   int64_t us) { service.RecordDecision(domain, decision, us); },
         .threads = settings.grpc_threads},
        &manager, &store, SystemClock::Get());
    if (!started.ok()) {
      std::cerr << "serve: " << started.status().message() << "\n";
      return 1;
    }
    grpc_server = *std::move(started);
  }
  if (auto s = manager.StartWatching(); !s.ok()) {
    spdlog::warn("config: not watching for changes: {}", std::string(s.message()));
  }
  manager.ReloadOnSighup();

  // Shutdown is bounded by one deadline, http.shutdown_timeout after the signal: requests in
  // flight get until then, the reverse proxy's upstream exchanges still pending are then
  // cancelled (their clients answered 503), and the gRPC calls in flight get what is left of it.
  using SteadyClock = std::chrono::steady_clock;
  const auto shutdown_timeout = std::chrono::milliseconds(settings.shutdown_timeout_us / 1000);
  std::atomic<SteadyClock::time_point> shutdown_deadline{SteadyClock::time_point::max()};
  server.OnShutdownDeadline([&service] { service.CancelUpstreams(); });
  std::thread signal_waiter([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    spdlog::info("sluice: signal {}, shutting down", signal);
    shutdown_deadline.store(SteadyClock::now() + shutdown_timeout);
    if (grpc_server) grpc_server->StartDraining();
    server.Stop();
  });
  signal_waiter.detach();

  const auto host = [](const std::string& address) {
    return address.substr(0, address.rfind(':'));
  };
  // Machine-readable start-up lines (tests and scripts read the ports from them).
  std::cout << "sluice: data plane listening on " << host(listen) << ":" << *data_port << "\n"
            << "sluice: admin listening on " << host(admin) << ":" << *admin_port << "\n";
  if (grpc_server) {
    std::cout << "sluice: grpc listening on " << host(grpc) << ":" << grpc_server->port() << "\n";
  }
  std::cout << "sluice: config " << config_name << " version " << loaded.version << ", " << threads
            << " threads, backend "
            << (redis_backend ? redis_backend->where : std::string("memory")) << std::endl;
  if (paths.empty()) PrintTryIt(host(listen), *data_port, host(admin), *admin_port);  // the default
  server.Run();              // returns once Stop() ran and the connections are closed
  service.CloseUpstreams();  // pooled connections live on the server's io_contexts
  // The HTTP side has drained; calls still in flight on the gRPC port get what is left of the
  // deadline (gRPC cancels those still running then).
  if (grpc_server) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        shutdown_deadline.load() - SteadyClock::now());
    grpc_server->Shutdown(std::max(left, std::chrono::milliseconds(0)));
  }
  manager.StopWatching();
  spdlog::info("sluice: stopped");
  return 0;
}

}  // namespace sluice::cli
