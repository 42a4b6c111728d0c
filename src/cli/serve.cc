#include "cli/serve.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "cli/default_config.h"
#include "cli/envoy_env.h"
#include "cli/rls_json_endpoint.h"
#include "cli/serve_tls.h"
#include "cli/serve_tracing.h"
#include "engine/configured_limits.h"
#include "engine/engine.h"
#include "engine/holds.h"
#include "engine/top_keys.h"
#include "fmt/format.h"
#include "http/service.h"
#include "http/transport/server.h"
#include "metrics/registry.h"
#include "metrics/server_metrics.h"
#include "rls/grpc_server.h"
#include "rules/admin_access.h"
#include "rules/config_manager.h"
#include "spdlog/spdlog.h"
#include "stack/stack.h"
#include "util/log.h"
#include "xds/xds_client.h"

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

// Where the rules come from: the flags, or envoyproxy/ratelimit's environment variables
// (--envoy-env). False, after saying why, when serve must not start.
struct ConfigSource {
  std::vector<std::string> paths;  // empty: the embedded default
  std::string name;                // for the start-up line
  rules::LoadOptions load_options;
  // --envoy-env's USE_PROMETHEUS: /metrics also on this address, at this path (empty: not).
  std::string prometheus_listen, prometheus_path;
};
bool ResolveConfigSource(const ServeFlags& flags, ConfigSource& source) {
  if (!flags.config.empty()) source.paths = {flags.config};
  source.name = flags.config.empty() ? "<embedded default>" : flags.config;
  // --redis: the limits must be within what Redis decides exactly (a settings file's
  // `backend: redis` says so itself).
  source.load_options.redis = flags.redis.has_value();
  if (!flags.envoy_env) return true;
  const EnvoyEnv env = ReadEnvoyEnv(ProcessEnvironment());
  for (const EnvoyEnvMessage& m : env.messages) {
    std::cerr << "serve: envoy-env: " << m.ToString() << "\n";
  }
  if (!env.ok()) {
    std::cerr << "serve: envoy-env: not starting: the errors above would change decisions or "
                 "the deployment (docs/integration/envoy.md)\n";
    return false;
  }
  spdlog::set_level(spdlog::level::from_str(env.log_level));
  source.paths.clear();
  if (!env.rules_path.empty()) source.paths = {env.rules_path};  // none: the rules come over xDS
  const auto& xds = env.load.settings->xds;
  source.name = xds ? "xDS " + xds->server_url : env.rules_path;
  source.load_options = env.load;
  source.load_options.redis = flags.redis.has_value();
  // As upstream, a runtime directory that is not there is no rules (every request OK) rather
  // than a refusal to start: an image runs with RUNTIME_ROOT on no volume. It is read when it
  // comes (a reload: SIGHUP, POST /v1/reload, or a change the watch sees).
  source.load_options.missing_is_empty = true;
  if (std::error_code ec; !env.rules_path.empty() && !std::filesystem::exists(env.rules_path, ec)) {
    std::cerr << "serve: envoy-env: warning: RUNTIME_ROOT: " << env.rules_path
              << " does not exist: serving without rules (every request is OK) until it does\n";
  }
  source.prometheus_listen = env.prometheus_listen;
  source.prometheus_path = env.prometheus_path;
  return true;
}

// config_source.xds: the rules from a management server, applied through `manager` (the loader
// and reload path files take); refused rule sets are NACKed with the loader's errors.
std::unique_ptr<xds::XdsClient> StartXds(const rules::Settings& settings,
                                         rules::ConfigManager& manager) {
  if (!settings.xds) return nullptr;
  auto client = std::make_unique<xds::XdsClient>(*settings.xds, &manager);
  client->Start();
  return client;
}

// Without force_start, serve listens only once the first rule set has come over xDS (as
// upstream without FORCE_START_WITHOUT_INITIAL_CONFIG). False when a stop signal came first.
bool AwaitFirstRules(const rules::Settings& settings, const rules::ConfigManager& manager,
                     const sigset_t& stop_signals) {
  if (!settings.xds || settings.xds->force_start) return true;
  util::Log().info("xds: waiting for the first rule set from {}", settings.xds->server_url);
  while (manager.awaiting_remote()) {
    const timespec slice{0, 50L * 1000 * 1000};
    if (sigtimedwait(&stop_signals, nullptr, &slice) > 0) return false;
  }
  return true;
}

// With Redis: /readyz and gRPC health follow it (not the connection alone: a hung Redis keeps
// it while every decision times out). Returns gRPC's serving test: SERVING while Redis
// decides, or while no domain fails closed without it; unset with memory (always serving).
std::function<bool()> FollowBackendHealth(const stack::Stack& backends, http::Service& service,
                                          rules::ConfigManager& manager) {
  if (!backends.remote()) return {};
  backend::Backend* backend = &backends.backend();
  service.SetBackendHealth([backend, where = backends.where()] {
    const backend::Backend::Health health = backend->GetHealth();
    return http::Service::BackendHealth{health.up, where + ": " + health.detail};
  });
  return [backend, &manager] {
    if (backend->GetHealth().up) return true;
    return manager.Current()->FirstFailingClosed() == nullptr;
  };
}

// /metrics: the registry with sluice's families, the backend's and the listeners' TLS, brought up
// to date with the server's connection counts on each scrape.
struct Observability {
  metrics::Registry registry;
  std::optional<metrics::ServerMetrics> server_metrics;
  absl::Mutex scrape_mu;  // one catch-up at a time (the counters are read, then raised)
};
// sluice_limit's samples: the limits of the configuration in force, worked out once per version
// (keeping the version, not the config: an old config is freed by the reload, not by a scrape).
// The concurrency limits' holds in use, by domain and limit name (summed over the rules of one
// name), when the store can count them (the memory store).
std::function<std::vector<metrics::ServerMetrics::HoldsSample>()> HoldsSamples(
    rules::ConfigManager& manager, const stack::Stack& backends) {
  return [&manager, &backends] {
    std::vector<metrics::ServerMetrics::HoldsSample> out;
    const std::shared_ptr<const rules::Config> current = manager.Current();
    if (current == nullptr) return out;
    const auto live = backends.holds().LiveByLimit(SystemClock::Get()->NowMicros());
    if (!live) return out;
    std::map<std::pair<std::string, std::string>, double> sums;
    for (engine::ConfiguredHold& h : engine::ConfiguredConcurrency(*current)) {
      const auto it = live->find(h.limit_id);
      sums[{std::move(h.domain), std::move(h.name)}] +=
          it == live->end() ? 0 : static_cast<double>(it->second);
    }
    for (auto& [labels, holds] : sums) out.push_back({labels.first, labels.second, holds});
    return out;
  };
}

std::function<std::vector<metrics::ServerMetrics::LimitSample>()> LimitSamples(
    rules::ConfigManager& manager) {
  struct Cache {
    absl::Mutex mu;
    std::string version ABSL_GUARDED_BY(mu);
    std::vector<metrics::ServerMetrics::LimitSample> samples ABSL_GUARDED_BY(mu);
  };
  auto cache = std::make_shared<Cache>();
  return [&manager, cache] {
    const std::shared_ptr<const rules::Config> current = manager.Current();
    absl::MutexLock lock(&cache->mu);
    if (current != nullptr && current->version != cache->version) {
      cache->samples.clear();
      for (engine::ConfiguredLimit& l : engine::ConfiguredLimits(*current)) {
        cache->samples.push_back({std::move(l.domain), std::move(l.label),
                                  static_cast<double>(l.requests),
                                  static_cast<double>(l.window_us) / 1e6});
      }
      cache->version = current->version;
    }
    return cache->samples;
  };
}

absl::Status StartMetrics(Observability& o, const stack::Stack& backends,
                          rules::ConfigManager& manager, http::HttpServer& server,
                          http::Service& service, ServeTls& tls, xds::XdsClient* xds,
                          Tracing* tracing) {
  auto registered = metrics::ServerMetrics::Register(
      &o.registry, {.store = [&backends] { return backends.StoreStats(); },
                    .config =
                        [&manager] {
                          const auto current = manager.Current();
                          return metrics::ServerMetrics::ConfigStats{
                              current ? current->version : "",
                              static_cast<double>(manager.reload_successes()),
                              static_cast<double>(manager.reload_failures())};
                        },
                    .limits = LimitSamples(manager),
                    .holds = HoldsSamples(manager, backends),
                    .now_us = [] { return SystemClock::Get()->NowMicros(); },
                    .start_time_us = SystemClock::Get()->NowMicros(),
                    .max_decision_series = 10000});
  if (!registered.ok()) return registered.status();
  o.server_metrics = *std::move(registered);
  if (auto s = backends.RegisterBackendMetrics(o.registry); !s.ok()) return s;
  if (auto s = tls.RegisterMetrics(o.registry); !s.ok()) return s;
  if (xds != nullptr) {
    if (auto s = xds->RegisterMetrics(o.registry); !s.ok()) return s;
  }
  if (tracing != nullptr) {
    if (auto s = tracing->RegisterMetrics(o.registry); !s.ok()) return s;
  }
  metrics::ServerMetrics* m = &*o.server_metrics;
  service.SetMetrics(&o.registry, m, [&o, m, &server] {
    const auto catch_up = [](metrics::Counter* counter, uint64_t total) {
      if (total > counter->Value()) counter->Inc(total - counter->Value());
    };
    absl::MutexLock lock(&o.scrape_mu);
    const http::ServerStats& st = server.stats();
    m->http_open_connections->Set(static_cast<double>(st.connections_open.load()));
    catch_up(m->http_connections, st.connections_total.load());
    catch_up(m->http_connections_rejected, st.connections_rejected.load());
  });
  return absl::OkStatus();
}

// The HTTP listeners' bound ports.
struct HttpPorts {
  int data = 0, admin = 0;
  std::string prometheus;   // --envoy-env's USE_PROMETHEUS listener's address; empty: none
  int prometheus_port = 0;  // its bound port
};

// The data plane and the admin listeners (with their TLS, if any), and with --envoy-env's
// USE_PROMETHEUS (`source`) the metrics alone on a listener of their own, at its path, with the
// admin port's connection cap; their bound ports.
absl::StatusOr<HttpPorts> ListenHttp(http::HttpServer& server, http::Service& service,
                                     const std::string& listen, const std::string& admin,
                                     const ServeTls& tls, const ConfigSource& source) {
  auto data_port = server.Listen(
      listen,
      [&service](http::HttpRequest& req, const std::string& peer, http::HttpResponse& res,
                 http::Deferral& deferral) { service.HandleData(req, peer, res, deferral); },
      0, [&service](const http::HttpRequest& header) { return service.StreamsBody(header); },
      [&service](unsigned status) { service.CountStatus(status); }, tls.data());
  if (!data_port.ok()) return data_port.status();
  auto admin_port = server.Listen(
      admin,
      [&service](http::HttpRequest& req, const std::string& peer, http::HttpResponse& res,
                 http::Deferral& deferral) { service.HandleAdmin(req, peer, res, deferral); },
      kAdminMaxConnections, nullptr, nullptr, tls.admin());
  if (!admin_port.ok()) return admin_port.status();
  HttpPorts ports{.data = *data_port, .admin = *admin_port, .prometheus = source.prometheus_listen};
  if (ports.prometheus.empty()) return ports;
  auto prometheus_port = server.Listen(
      ports.prometheus,
      [&service, path = source.prometheus_path](http::HttpRequest& req, const std::string&,
                                                http::HttpResponse& res, http::Deferral&) {
        service.HandleMetrics(req, path, res);
      },
      kAdminMaxConnections);
  if (!prometheus_port.ok()) {
    return absl::Status(prometheus_port.status().code(),
                        "PROMETHEUS_ADDR: " + std::string(prometheus_port.status().message()));
  }
  ports.prometheus_port = *prometheus_port;
  return ports;
}

// After the HTTP side has drained: the calls still in flight on the gRPC port (if on) get what
// is left of the deadline (in the clock's monotonic time); gRPC cancels those still running then.
void ShutdownGrpc(rls::GrpcServer* grpc_server, int64_t deadline_us, const Clock* clock) {
  if (grpc_server == nullptr) return;
  const int64_t left_us = deadline_us - clock->MonotonicMicros();
  grpc_server->Shutdown(std::chrono::milliseconds(std::max<int64_t>(0, left_us / 1000)));
}

// The data plane's parts beside the engine: the runtime overrides, the holds and reservations of
// the backend stack, the /json endpoint, the tracer (`tracing` null: none).
void SetUpService(http::Service& service, stack::Stack& backends, rules::OverrideBook* overrides,
                  Tracing* tracing) {
  service.SetOverrideBook(overrides);
  service.SetHolds(&backends.holds());
  service.SetReservations(&backends.reservations());
  service.SetJsonEndpoint(RlsJsonEndpoint());
  service.SetTracer(Tracing::TracerOf(tracing));
}

// Whether the gRPC port is on (its address neither empty nor "0").
bool GrpcOn(const std::string& address) { return !address.empty() && address != "0"; }

// The gRPC (Envoy RLS) port on the same engine, its decisions counted with HTTP's; null when
// the port is off.
absl::StatusOr<std::unique_ptr<rls::GrpcServer>> StartGrpc(
    const std::string& address, const rules::Settings& settings,
    std::function<bool()> backend_serving, rules::ConfigManager& manager, engine::Engine& engine,
    http::Service& service, const ServeTls& tls, trace::Tracer* tracer) {
  if (!GrpcOn(address)) return nullptr;
  return rls::GrpcServer::Start(
      {.address = address,
       .max_message_bytes = static_cast<int>(std::min<size_t>(
           settings.max_body_bytes, static_cast<size_t>(std::numeric_limits<int>::max()))),
       .backend_serving = std::move(backend_serving),
       .on_decision = [&service](std::string_view domain, const engine::Response& decision,
                                 int64_t us) { service.RecordDecision(domain, decision, us); },
       .threads = settings.grpc_threads,
       .tls = tls.grpc_files(),
       .tracer = tracer},
      &manager, &engine, SystemClock::Get());
}

// SIGHUP: the rules and the listeners' certificates are read again. (Both only wake a thread:
// async-signal-safe.)
std::atomic<rules::ConfigManager*> g_sighup_rules{nullptr};
std::atomic<ServeTls*> g_sighup_tls{nullptr};
void OnSighup(int) {
  if (rules::ConfigManager* m = g_sighup_rules.load()) m->TriggerReload();
  if (ServeTls* t = g_sighup_tls.load()) t->TriggerReload();
}
// While it lives, SIGHUP reloads the rules of `manager` and the certificates of `tls`.
class ReloadOnSighup {
 public:
  ReloadOnSighup(rules::ConfigManager& manager, ServeTls& tls) {
    g_sighup_rules.store(&manager);
    g_sighup_tls.store(&tls);
    struct sigaction sa {};
    sa.sa_handler = OnSighup;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGHUP, &sa, nullptr);
  }
  ~ReloadOnSighup() {
    g_sighup_tls.store(nullptr);
    g_sighup_rules.store(nullptr);
  }
  ReloadOnSighup(const ReloadOnSighup&) = delete;
  ReloadOnSighup& operator=(const ReloadOnSighup&) = delete;
};

// "HOST:PORT" -> "HOST".
std::string HostOf(const std::string& address) { return address.substr(0, address.rfind(':')); }

// SIGTERM and SIGINT, blocked in this thread (and so in every thread it starts later).
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The HTTP server as the settings size it, its timeouts on `clock`.
http::ServerOptions ServerOptionsFrom(const rules::Settings& settings, int threads,
                                      const Clock* clock) {
  return {.threads = threads,
          .max_header_bytes = settings.max_header_bytes,
          .max_body_bytes = settings.max_body_bytes,
          .header_timeout = std::chrono::milliseconds(settings.header_timeout_us / 1000),
          .idle_timeout = std::chrono::milliseconds(settings.idle_timeout_us / 1000),
          .max_connections = settings.max_connections,
          .shutdown_timeout = std::chrono::milliseconds(settings.shutdown_timeout_us / 1000),
          .clock = clock};
}

// What serve prints once it listens.
struct Started {
  std::string listen, admin, grpc;
  HttpPorts http;
  int grpc_port = 0;  // 0: no gRPC port
  std::string config, version;
  int threads = 0;
  std::string backend;
  bool try_it = false;  // with the "try it" block (the embedded default config)
};

// Machine-readable start-up lines (tests and scripts read the ports from them).
void PrintStarted(const Started& s) {
  std::cout << "sluice: data plane listening on " << HostOf(s.listen) << ":" << s.http.data << "\n"
            << "sluice: admin listening on " << HostOf(s.admin) << ":" << s.http.admin << "\n";
  if (s.grpc_port != 0) {
    std::cout << "sluice: grpc listening on " << HostOf(s.grpc) << ":" << s.grpc_port << "\n";
  }
  if (s.http.prometheus_port != 0) {
    std::cout << "sluice: prometheus listening on " << HostOf(s.http.prometheus) << ":"
              << s.http.prometheus_port << "\n";
  }
  std::cout << "sluice: config " << s.config << " version " << s.version << ", " << s.threads
            << " threads, backend " << s.backend << std::endl;
  if (s.try_it) PrintTryIt(HostOf(s.listen), s.http.data, HostOf(s.admin), s.http.admin);
}

// Who is being limited (GET /v1/top), recorded by the engine; null with --top-keys 0.
// The runtime overrides' book: on Redis with the Redis backend, else in the state directory
// (`state_dir:`, else systemd's $STATE_DIRECTORY), else in memory only (said in the log).
absl::StatusOr<std::unique_ptr<rules::OverrideBook>> OpenOverrides(const rules::Settings& settings,
                                                                   const stack::Stack& backends,
                                                                   rules::ConfigManager& manager,
                                                                   const Clock* clock) {
  std::string state_dir = settings.state_dir;
  if (const char* systemd = std::getenv("STATE_DIRECTORY"); state_dir.empty() && systemd) {
    state_dir = systemd;
    state_dir = state_dir.substr(0, state_dir.find(':'));  // the first of several
  }
  auto book = backends.OpenOverrides(
      settings, state_dir, [&manager] { return manager.Current(); }, clock);
  if (book.ok()) {
    const size_t n = (*book)->Current() == nullptr ? 0 : (*book)->Current()->all().size();
    util::Log().info("overrides: {} in force, kept in {}", n, (*book)->where());
  }
  return book;
}

std::unique_ptr<engine::TopKeys> MakeTopKeys(const ServeFlags& flags) {
  if (flags.top_keys <= 0) return nullptr;
  return std::make_unique<engine::TopKeys>(
      engine::TopKeys::Options{.capacity = static_cast<size_t>(flags.top_keys),
                               .sample = static_cast<uint32_t>(flags.top_keys_sample)});
}

// A thread of its own that waits for SIGTERM or SIGINT (blocked in every thread: `stop_signals`),
// then sets `deadline_us` (shutdown_timeout_us from then, on the clock's monotonic time), drains
// the gRPC server and stops the HTTP server. Everything it is given outlives it: the process ends
// after the servers stop.
void WaitForStopSignal(const sigset_t& stop_signals, const Clock* clock,
                       int64_t shutdown_timeout_us, rls::GrpcServer* grpc_server,
                       http::HttpServer& server, std::atomic<int64_t>& deadline_us) {
  std::thread([&stop_signals, clock, shutdown_timeout_us, grpc_server, &server, &deadline_us] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    util::Log().info("sluice: signal {}, shutting down", signal);
    deadline_us.store(clock->MonotonicMicros() + shutdown_timeout_us);
    if (grpc_server != nullptr) grpc_server->StartDraining();
    server.Stop();
  }).detach();
}

}  // namespace

int RunServe(const ServeFlags& flags) {
  // Debian's abseil checks every Mutex acquisition for lock-order cycles (a debug aid), which
  // gRPC pays for on each call; a server has no use for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const auto fail = [](std::string_view what, const absl::Status& status) {
    std::cerr << "serve: " << what << status.message() << "\n";
    return 1;
  };
  ConfigSource source;
  if (!ResolveConfigSource(flags, source)) return 1;
  // The clock that the backends, the HTTP server, the proxy, the config watcher and the
  // shutdown deadline read: the system's.
  const Clock* const clock = SystemClock::Get();
  rules::ConfigManager manager(source.paths, std::string(kDefaultConfig), source.load_options,
                               clock);
  const rules::ConfigManager::ReloadOutcome loaded = manager.Reload();
  if (!loaded.errors.empty()) {
    for (const auto& e : loaded.errors) std::cerr << "serve: " << e.ToString() << "\n";
    return 1;
  }
  const rules::Settings settings = manager.Current()->settings;
  const std::string listen = flags.listen.value_or(settings.listen);
  const std::string admin = flags.admin.value_or(settings.admin_listen);
  const std::string grpc = flags.grpc.value_or(settings.grpc_listen);
  int threads = flags.threads.value_or(settings.threads);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const absl::StatusOr<std::vector<rules::AdminToken>> tokens = rules::AdminTokens(settings, admin);
  if (!tokens.ok()) return fail("", tokens.status());

  // SIGTERM and SIGINT are taken by one thread with sigwait: blocked here, before any other
  // thread starts, so every thread inherits the mask.
  const sigset_t stop_signals = BlockStopSignals();
  const std::unique_ptr<xds::XdsClient> xds_client = StartXds(settings, manager);
  if (!AwaitFirstRules(settings, manager, stop_signals)) return 0;

  auto tracing = Tracing::Start(settings.tracing, clock);  // outlives all that ends spans
  if (!tracing.ok()) return fail("tracing: ", tracing.status());
  auto backends = stack::Stack::Build(settings, flags.redis, clock);
  if (!backends.ok()) return fail("", backends.status());
  // A reload gives every lease back: those of a changed limit would otherwise sit unused.
  (*backends)->ReturnLeasesOnChange([&manager] { return manager.reload_successes(); });
  const std::unique_ptr<engine::TopKeys> top_keys = MakeTopKeys(flags);
  auto overrides = OpenOverrides(settings, **backends, manager, clock);
  if (!overrides.ok()) return fail("overrides: ", overrides.status());
  // One engine over the backend stack, for every frontend.
  engine::Engine engine(&(*backends)->backend());
  engine.set_top_keys(top_keys.get());
  engine.set_overrides(overrides->get());
  http::Service service(&manager, &engine, clock, *tokens);
  SetUpService(service, **backends, overrides->get(), tracing->get());
  std::function<bool()> backend_serving = FollowBackendHealth(**backends, service, manager);
  auto tls = ServeTls::Load(settings, GrpcOn(grpc));
  if (!tls.ok()) return fail("", tls.status());
  http::HttpServer server(ServerOptionsFrom(settings, threads, clock));
  Observability observability;
  if (auto s = StartMetrics(observability, **backends, manager, server, service, **tls,
                            xds_client.get(), tracing->get());
      !s.ok()) {
    return fail("metrics: ", s);
  }
  const auto ports = ListenHttp(server, service, listen, admin, **tls, source);
  if (!ports.ok()) return fail("", ports.status());
  auto started = StartGrpc(grpc, settings, backend_serving, manager, engine, service, **tls,
                           Tracing::TracerOf(tracing->get()));
  if (!started.ok()) return fail("", started.status());
  const std::unique_ptr<rls::GrpcServer> grpc_server = *std::move(started);
  if (auto s = manager.StartWatching(); !s.ok()) {
    util::Log().warn("config: not watching for changes: {}", std::string(s.message()));
  }
  (*tls)->StartWatching();
  const ReloadOnSighup sighup(manager, **tls);

  // Shutdown is bounded by one deadline, http.shutdown_timeout after the signal: requests in
  // flight get until then, the reverse proxy's upstream exchanges still pending are then
  // cancelled (their clients answered 503), and the gRPC calls in flight get what is left of it.
  // (In the clock's monotonic time.)
  std::atomic<int64_t> shutdown_deadline_us{std::numeric_limits<int64_t>::max()};
  server.OnShutdownDeadline([&service] { service.CancelUpstreams(); });
  WaitForStopSignal(stop_signals, clock, settings.shutdown_timeout_us, grpc_server.get(), server,
                    shutdown_deadline_us);

  PrintStarted({.listen = listen,
                .admin = admin,
                .grpc = grpc,
                .http = *ports,
                .grpc_port = grpc_server ? grpc_server->port() : 0,
                .config = source.name,
                .version = manager.Current()->version,
                .threads = threads,
                .backend = (*backends)->where(),
                .try_it = source.paths.empty() && !settings.xds});  // the embedded default
  server.Run();              // returns once Stop() ran and the connections are closed
  service.CloseUpstreams();  // pooled connections live on the server's io_contexts
  ShutdownGrpc(grpc_server.get(), shutdown_deadline_us.load(), clock);
  if (xds_client) xds_client->Stop();
  // What this instance leased and did not spend goes back for the other instances.
  (*backends)->ReturnLeases(absl::Seconds(1));
  manager.StopWatching();
  util::Log().info("sluice: stopped");
  return 0;
}

}  // namespace sluice::cli
