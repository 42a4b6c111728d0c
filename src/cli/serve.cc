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
#include <thread>

#include "absl/synchronization/mutex.h"
#include "cli/default_config.h"
#include "cli/envoy_env.h"
#include "cli/rls_json_endpoint.h"
#include "engine/engine.h"
#include "fmt/format.h"
#include "http/server.h"
#include "http/service.h"
#include "metrics/registry.h"
#include "metrics/server_metrics.h"
#include "rls/grpc_server.h"
#include "rules/config_manager.h"
#include "spdlog/spdlog.h"
#include "stack/stack.h"

namespace sluice::cli {
namespace {

// The admin listener's own connection cap: a flood on the data plane never locks operators and
// scrapers out, and the admin port cannot be used to exhaust the process either.
constexpr size_t kAdminMaxConnections = 128;

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

  auto backends = stack::Stack::Build(settings, flags.redis, SystemClock::Get());
  if (!backends.ok()) {
    std::cerr << "serve: " << backends.status().message() << "\n";
    return 1;
  }
  // One engine over the backend stack, for every frontend.
  engine::Engine engine(&(*backends)->backend());
  http::Service service(&manager, &engine, SystemClock::Get(), token);
  service.SetJsonEndpoint(RlsJsonEndpoint());
  std::function<bool()> backend_serving;
  if ((*backends)->remote()) {
    backend::Backend* backend = &(*backends)->backend();
    const std::string where = (*backends)->where();
    // Not the connection alone: a hung Redis keeps it while every decision times out.
    service.SetBackendHealth([backend, where] {
      const backend::Backend::Health health = backend->GetHealth();
      return http::Service::BackendHealth{health.up, where + ": " + health.detail};
    });
    // gRPC health: SERVING while Redis decides, or while no domain fails closed without it.
    backend_serving = [backend, &manager] {
      if (backend->GetHealth().up) return true;
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
      &registry, {.store = [&backends] { return (*backends)->StoreStats(); },
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
  if (auto s = (*backends)->RegisterBackendMetrics(registry); !s.ok()) {
    std::cerr << "serve: metrics: " << s.message() << "\n";
    return 1;
  }
  // The server counts connections itself; each scrape brings the metrics up to date.
  absl::Mutex scrape_mu;  // one catch-up at a time (the counters are read, then raised)
  const auto catch_up = [](metrics::Counter* counter, uint64_t total) {
    if (total > counter->Value()) counter->Inc(total - counter->Value());
  };
  service.SetMetrics(&registry, &*metrics, [&] {
    absl::MutexLock lock(&scrape_mu);
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
         .backend_serving = backend_serving,
         .on_decision = [&service](std::string_view domain, const engine::Response& decision,
                                   int64_t us) { service.RecordDecision(domain, decision, us); },
         .threads = settings.grpc_threads},
        &manager, &engine, SystemClock::Get());
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
            << " threads, backend " << (*backends)->where() << std::endl;
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
