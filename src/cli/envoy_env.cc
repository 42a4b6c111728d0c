// `serve --envoy-env`: upstream's variables mapped onto sluice's settings (listeners, logs, the
// rules' source, Redis, decisions, stats), and what cannot be said there. The reading of values
// is envoy_env_reader.cc; the variables sluice does not map, envoy_env_names.cc.
#include "cli/envoy_env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string_view>

#include "cli/envoy_env_reader.h"
#include "cli/serve_tracing.h"
#include "fmt/format.h"

namespace sluice::cli {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool IsLoopbackHost(std::string_view host) {
  return host.starts_with("127.") || host == "::1" || host == "[::1]" || host == "localhost";
}

// "host:port" for sluice's listeners; an IPv6 host goes in brackets.
std::string Address(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && !host.starts_with('[')) {
    return fmt::format("[{}]:{}", host, port);
  }
  return fmt::format("{}:{}", host, port);
}

// "host:port" with a port from 1 to 65535 (upstream's REDIS_URL for a tcp socket).
bool IsHostPort(std::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view port = s.substr(colon + 1);
  int value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return ec == std::errc() && end == port.data() + port.size() && value >= 1 && value <= 65535;
}

}  // namespace

std::string EnvoyEnvMessage::ToString() const {
  const char* level_name = level == Level::kError     ? "error"
                           : level == Level::kWarning ? "warning"
                                                      : "info";
  if (variable.empty()) return fmt::format("{}: {}", level_name, text);
  return fmt::format("{}: {}: {}", level_name, variable, text);
}

bool EnvoyEnv::ok() const {
  return std::none_of(messages.begin(), messages.end(),
                      [](const EnvoyEnvMessage& m) { return m.level == Level::kError; });
}

namespace {

// GRPC_SERVER_USE_TLS=true: the gRPC port's TLS (grpc.tls) from upstream's variables, the files
// as given (relative to where sluice runs, as upstream reads them). As upstream: the server's
// certificate and key, and with GRPC_CLIENT_TLS_CACERT a client certificate signed by one of its
// CAs required of every client; the TLS variables do nothing without GRPC_SERVER_USE_TLS.
void ReadGrpcTls(EnvReader& r, rules::Settings& s) {
  const bool use_tls = r.Bool("GRPC_SERVER_USE_TLS", false);
  const auto cert = r.Get("GRPC_SERVER_TLS_CERT");
  const auto key = r.Get("GRPC_SERVER_TLS_KEY");
  const auto client_ca = r.Get("GRPC_CLIENT_TLS_CACERT");
  const auto san = r.Get("GRPC_CLIENT_TLS_SAN");
  if (!use_tls) {
    for (const char* name : {"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY",
                             "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"}) {
      if (r.Get(name)) r.Say(Level::kInfo, name, "no effect: only with GRPC_SERVER_USE_TLS=true");
    }
    return;
  }
  // Upstream would serve TLS without a certificate, and every handshake would fail.
  if (!cert) r.Say(Level::kError, "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_USE_TLS=true needs it");
  if (!key) r.Say(Level::kError, "GRPC_SERVER_TLS_KEY", "GRPC_SERVER_USE_TLS=true needs it");
  if (san && client_ca) {
    r.Say(Level::kError, "GRPC_CLIENT_TLS_SAN",
          fmt::format("checking the client certificate's name ({}) is not supported; sluice would "
                      "accept every certificate that GRPC_CLIENT_TLS_CACERT signed",
                      *san));
  } else if (san) {
    r.Say(Level::kInfo, "GRPC_CLIENT_TLS_SAN", "no effect: only with GRPC_CLIENT_TLS_CACERT");
  }
  rules::ListenerTlsSettings& t = s.grpc_tls.emplace();
  t.cert_file = cert.value_or("");
  t.key_file = key.value_or("");
  t.client_ca_file = client_ca.value_or("");
}

void ReadListeners(EnvReader& r, const std::map<std::string, std::string>& env, EnvoyEnv& out) {
  rules::Settings& s = *out.load.settings;
  // Listeners. Upstream's debug port serves pprof and its config read-only; sluice's admin API
  // can also reload, so without a token it stays on loopback.
  const std::string host = r.GetOr("HOST", "0.0.0.0");
  s.listen = Address(host, r.Port("PORT", 8080));
  s.grpc_listen = Address(r.GetOr("GRPC_HOST", "0.0.0.0"), r.Port("GRPC_PORT", 8081));
  const std::string debug_host = r.GetOr("DEBUG_HOST", "0.0.0.0");
  const int debug_port = r.Port("DEBUG_PORT", 6070);
  if (IsLoopbackHost(debug_host)) {
    s.admin_listen = Address(debug_host, debug_port);
  } else {
    s.admin_listen = Address("127.0.0.1", debug_port);
    r.Say(Level::kWarning, "DEBUG_HOST",
          fmt::format("{}{}: sluice's admin API (/metrics, /readyz, /v1/rules, /v1/reload) is "
                      "served without a token on loopback only; listening on {}",
                      debug_host, env.contains("DEBUG_HOST") ? "" : " (the default)",
                      s.admin_listen));
  }
  if (auto uds = r.Get("GRPC_UDS")) {
    r.Say(Level::kError, "GRPC_UDS",
          fmt::format("gRPC on a unix socket ({}) is not supported; unset it to listen on "
                      "GRPC_HOST:GRPC_PORT",
                      *uds));
  }
  ReadGrpcTls(r, s);
}

void ReadLogs(EnvReader& r, const std::map<std::string, std::string>& /*env*/, EnvoyEnv& out) {
  // Logs.
  const std::string level = Lower(r.GetOr("LOG_LEVEL", "warn"));
  if (level == "trace" || level == "debug" || level == "info" || level == "warn") {
    out.log_level = level;
  } else if (level == "warning") {
    out.log_level = "warn";
  } else if (level == "error") {
    out.log_level = "err";
  } else if (level == "fatal" || level == "panic") {
    out.log_level = "critical";
  } else {
    r.Say(Level::kError, "LOG_LEVEL",
          fmt::format("unknown level '{}' (trace, debug, info, warn, error, fatal, panic)", level));
  }
  if (auto format = r.Get("LOG_FORMAT"); format && Lower(*format) != "text") {
    r.Say(Level::kWarning, "LOG_FORMAT",
          fmt::format("'{}' is not supported: sluice logs text lines", *format));
  }
}

// "k1=v1,k2=v2" (CONFIG_GRPC_XDS_NODE_METADATA: entries without '=' are skipped, as upstream
// skips them) or "k1:v1,k2:v2" (envconfig's map form: CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
std::map<std::string, std::string> SplitPairs(std::string_view text, char separator) {
  std::map<std::string, std::string> out;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view entry = text.substr(0, comma);
    text.remove_prefix(comma == std::string_view::npos ? text.size() : comma + 1);
    const size_t at = entry.find(separator);
    if (at == std::string_view::npos) continue;
    out[std::string(entry.substr(0, at))] = std::string(entry.substr(at + 1));
  }
  return out;
}

// CONFIG_TYPE=GRPC_XDS_SOTW: the rules from a management server (config_source.xds), with
// upstream's variables and defaults (src/settings/settings.go).
void ReadXdsSource(EnvReader& r, EnvoyEnv& out) {
  rules::XdsSettings& x = out.load.settings->xds.emplace();
  out.load.remote_rules = true;
  x.server_url = r.GetOr("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000");
  x.node_id = r.GetOr("CONFIG_GRPC_XDS_NODE_ID", "default");
  x.node_metadata = SplitPairs(r.GetOr("CONFIG_GRPC_XDS_NODE_METADATA", ""), '=');
  x.headers = SplitPairs(r.GetOr("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", ""), ':');
  x.force_start = r.Bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false);
  const auto duration = [&r](const char* name, int64_t def) {
    return r.Duration(name, def, 1000, "a duration of at least 1ms");
  };
  x.connect_retry_interval_us =
      duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", x.connect_retry_interval_us);
  x.backoff_initial_us = duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", x.backoff_initial_us);
  x.backoff_max_us = duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", x.backoff_max_us);
  if (auto factor = r.Get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")) {
    char* end = nullptr;
    const double value = std::strtod(factor->c_str(), &end);
    if (end != factor->c_str() + factor->size() || !(value >= 0 && value <= 100)) {
      r.Say(Level::kError, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            fmt::format("'{}' is not a number from 0 to 100", *factor));
    } else {
      x.backoff_factor = value;
    }
  }
  x.backoff_jitter = r.Bool("XDS_CLIENT_BACKOFF_JITTER", true);
  if (auto size = r.Get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")) {
    uint64_t bytes = 0;
    const auto [end, ec] = std::from_chars(size->data(), size->data() + size->size(), bytes);
    if (ec != std::errc() || end != size->data() + size->size() || bytes > (uint64_t{1} << 30)) {
      r.Say(Level::kError, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            fmt::format("'{}' is not a size in bytes (up to 1 GiB)", *size));
    } else {
      x.max_message_bytes = bytes;
    }
  }
  // TLS to the server: upstream's CA, client certificate and server name; the files as given.
  x.tls = r.Bool("CONFIG_GRPC_XDS_SERVER_USE_TLS", false);
  const auto ca = r.Get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT");
  const auto cert = r.Get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT");
  const auto key = r.Get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY");
  const auto san = r.Get("CONFIG_GRPC_XDS_SERVER_TLS_SAN");
  if (!x.tls) {
    for (const char* name : {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                             "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"}) {
      if (r.Get(name)) {
        r.Say(Level::kInfo, name, "no effect: only with CONFIG_GRPC_XDS_SERVER_USE_TLS=true");
      }
    }
  } else {
    x.ca_file = ca.value_or("");
    x.cert_file = cert.value_or("");
    x.key_file = key.value_or("");
    x.server_name = san.value_or("");
    if (x.cert_file.empty() != x.key_file.empty()) {
      r.Say(Level::kError,
            x.cert_file.empty() ? "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"
                                : "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            "mutual TLS needs both CONFIG_GRPC_XDS_CLIENT_TLS_CERT and _KEY");
    }
  }
  for (const char* name : {"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY",
                           "RUNTIME_IGNOREDOTFILES", "RUNTIME_WATCH_ROOT"}) {
    if (r.Get(name)) r.Say(Level::kInfo, name, "no effect: the rules come over xDS");
  }
  r.Say(Level::kInfo, "",
        fmt::format("rules: over xDS from {} as node '{}'{}; {}", x.server_url, x.node_id,
                    x.tls ? " (TLS)" : "",
                    x.force_start ? "serving before the first rule set, not ready until it comes"
                                  : "listening once the first rule set has come"));
}

void ReadRulesSource(EnvReader& r, const std::map<std::string, std::string>& /*env*/,
                     EnvoyEnv& out) {
  // Where the rules come from.
  if (auto type = r.Get("CONFIG_TYPE"); type && Lower(*type) != "file") {
    if (Lower(*type) == "grpc_xds_sotw") return ReadXdsSource(r, out);
    r.Say(Level::kError, "CONFIG_TYPE",
          fmt::format("'{}' is not supported: sluice reads its rules from files (FILE) or over "
                      "xDS (GRPC_XDS_SOTW)",
                      *type));
  }
  if (r.Get("FORCE_START_WITHOUT_INITIAL_CONFIG")) {
    r.Say(Level::kInfo, "FORCE_START_WITHOUT_INITIAL_CONFIG",
          "no effect: only with CONFIG_TYPE=GRPC_XDS_SOTW");
  }
  const std::string root = r.GetOr("RUNTIME_ROOT", "/srv/runtime_data/current");
  const std::string subdirectory = r.GetOr("RUNTIME_SUBDIRECTORY", "");
  const std::string app = r.GetOr("RUNTIME_APPDIRECTORY", "config");
  const bool watch_root = r.Bool("RUNTIME_WATCH_ROOT", true);
  out.load.dotfiles = !r.Bool("RUNTIME_IGNOREDOTFILES", false);
  out.load.any_extension = true;  // upstream reads every file of the directory
  if (subdirectory.empty() && watch_root) {
    r.Say(Level::kError, "RUNTIME_SUBDIRECTORY",
          "not set: upstream then loads no rules at all (every request is OK) and never "
          "reloads; sluice does not start without rules. Set it to the directory under "
          "RUNTIME_ROOT that holds RUNTIME_APPDIRECTORY");
  }
  out.rules_path = root;
  for (const std::string& part : {subdirectory, app}) {
    if (part.empty()) continue;
    if (!out.rules_path.ends_with('/')) out.rules_path += '/';
    out.rules_path += part;
  }
  r.Say(Level::kInfo, "",
        fmt::format("rules: every file under {}{}; reloaded when RUNTIME_ROOT is swapped{}",
                    out.rules_path, out.load.dotfiles ? ", dotfiles included" : "",
                    watch_root ? ", and also when a file below it changes (upstream waits for "
                                 "the swap)"
                               : " or a file below it changes"));
}

// REDIS_TLS=true: upstream's TLS variables as redis.tls (the files as given, relative to where
// sluice runs, as upstream reads them).
void ReadRedisTls(EnvReader& r, rules::Settings& s) {
  rules::RedisTlsSettings& t = s.redis_tls.emplace();
  t.ca_file = r.GetOr("REDIS_TLS_CACERT", "");
  t.cert_file = r.GetOr("REDIS_TLS_CLIENT_CERT", "");
  t.key_file = r.GetOr("REDIS_TLS_CLIENT_KEY", "");
  t.skip_hostname_verification = r.Bool("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false);
  // Upstream sends no client certificate unless it has both; a Redis that wants one refuses it
  // then, so half a pair is a mistake to name now.
  if (t.cert_file.empty() != t.key_file.empty()) {
    const bool no_key = t.key_file.empty();
    r.Say(Level::kError, no_key ? "REDIS_TLS_CLIENT_CERT" : "REDIS_TLS_CLIENT_KEY",
          no_key ? "needs REDIS_TLS_CLIENT_KEY, the certificate's key (upstream would send no "
                   "client certificate)"
                 : "needs REDIS_TLS_CLIENT_CERT, the key's certificate (upstream would send no "
                   "client certificate)");
  }
  if (!t.ca_file.empty()) {
    r.Say(Level::kInfo, "REDIS_TLS_CACERT",
          fmt::format("sluice trusts the CAs of {} alone; upstream trusts them besides the "
                      "system's",
                      t.ca_file));
  }
}

void ReadRedis(EnvReader& r, const std::map<std::string, std::string>& env, EnvoyEnv& out) {
  rules::Settings& s = *out.load.settings;
  // The backend: always Redis, as upstream's default.
  if (auto backend = r.Get("BACKEND_TYPE"); backend && Lower(*backend) != "redis") {
    r.Say(Level::kError, "BACKEND_TYPE",
          fmt::format("'{}' is not supported: sluice decides in memory or on Redis "
                      "(BACKEND_TYPE=redis)",
                      *backend));
  }
  s.backend = "redis";
  const std::string socket_type = Lower(r.GetOr("REDIS_SOCKET_TYPE", "unix"));
  if (socket_type != "tcp") {
    r.Say(Level::kError, "REDIS_SOCKET_TYPE",
          fmt::format("'{}'{} is not supported: sluice connects to Redis over TCP; set "
                      "REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port",
                      socket_type, env.contains("REDIS_SOCKET_TYPE") ? "" : " (the default)"));
  }
  const std::string type = Lower(r.GetOr("REDIS_TYPE", "single"));
  if (type != "single" && type != "cluster" && type != "sentinel") {
    r.Say(Level::kError, "REDIS_TYPE",
          fmt::format("'{}' is not supported (single, cluster or sentinel)", type));
  }
  // REDIS_TLS: rediss:// URLs, with upstream's TLS variables as redis.tls.
  const bool tls = r.Bool("REDIS_TLS", false);
  const std::string scheme = tls ? "rediss://" : "redis://";
  if (tls) ReadRedisTls(r, s);
  std::string credentials;
  if (auto auth = r.Get("REDIS_AUTH")) {
    // "pass" or "user:pass", which is also how redis:// URLs write them (redis/resp.h).
    credentials = *auth + "@";
  }
  const std::string url = r.GetOr("REDIS_URL", "/var/run/nutcracker/ratelimit.sock");
  std::vector<std::string> hosts;
  for (size_t start = 0; start <= url.size();) {
    const size_t comma = std::min(url.find(',', start), url.size());
    hosts.push_back(url.substr(start, comma - start));
    start = comma + 1;
  }
  // Sentinel: "MASTER_NAME,host:port[,host:port...]", the sentinels after the master's name.
  const bool sentinel = type == "sentinel";
  if (sentinel && hosts.size() < 2) {
    r.Say(Level::kError, "REDIS_URL",
          "REDIS_TYPE=sentinel needs the master's name and the sentinels: "
          "MASTER_NAME,host:port[,host:port...]");
  }
  if (socket_type == "tcp") {
    for (size_t i = sentinel ? 1 : 0; i < hosts.size(); ++i) {
      if (!IsHostPort(hosts[i])) {
        r.Say(Level::kError, "REDIS_URL", fmt::format("'{}' is not host:port", hosts[i]));
      }
    }
    if (type == "single" && hosts.size() > 1) {
      r.Say(Level::kError, "REDIS_URL", "several addresses need REDIS_TYPE=cluster");
    }
  }
  if (auto auth = r.Get("REDIS_SENTINEL_AUTH"); auth && !sentinel) {
    r.Say(Level::kInfo, "REDIS_SENTINEL_AUTH", "no effect: only with REDIS_TYPE=sentinel");
  } else if (sentinel && hosts.size() >= 2) {
    // The sentinels' own login: "pass" or "user:pass" (upstream cuts at the first colon). With
    // REDIS_TLS, upstream dials the sentinels over TLS too.
    rules::RedisSentinelSettings& t = s.redis_sentinel.emplace();
    t.master = hosts.front();
    t.addresses.assign(hosts.begin() + 1, hosts.end());
    t.tls = tls;
    if (auth) {
      if (const size_t colon = auth->find(':'); colon != std::string::npos) {
        t.username = auth->substr(0, colon);
        t.password = auth->substr(colon + 1);
      } else {
        t.password = *auth;
      }
    }
  }
  if (sentinel) {
    // The master's login (REDIS_AUTH), TLS and name; its address is the sentinels' answer.
    s.redis_url = scheme + credentials + hosts.front();
  } else if (type == "cluster") {
    s.redis_cluster = true;
    for (const std::string& h : hosts) s.redis_nodes.push_back(scheme + credentials + h);
  } else {
    s.redis_url = scheme + credentials + hosts.front();
  }
  s.redis_timeout_us =
      r.Duration("REDIS_TIMEOUT", s.redis_timeout_us, 1, "a positive duration (10s, 250ms)");
  r.Unsupported("REDIS_PERSECOND", false, Level::kError,
                "a second Redis for per-second limits is not supported; sluice keeps every "
                "limit on REDIS_URL");
  if (auto prefix = r.Get("CACHE_KEY_PREFIX")) s.redis_key_prefix = *prefix;
}

void ReadDecisions(EnvReader& r, const std::map<std::string, std::string>& /*env*/, EnvoyEnv& out) {
  rules::Settings& s = *out.load.settings;
  // Decisions.
  s.merge_domains = r.Bool("MERGE_DOMAIN_CONFIG", false);
  s.shadow_mode = r.Bool("SHADOW_MODE", false);
  // Upstream adds every request to every descriptor's counter, denied or not: sluice's
  // count_denied. STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT counts some denials and not others,
  // which no sluice setting does.
  s.count_denied = true;
  r.Unsupported("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false, Level::kError,
                "not supported: upstream then adds a denied request to the descriptors that "
                "would go over only; sluice counts a denied request everywhere (count_denied) "
                "or nowhere");
  s.quota_mode = r.Bool("QUOTA_MODE", false);
  s.rls_dynamic_metadata = r.Bool("RESPONSE_DYNAMIC_METADATA", false);
  if (auto ratio = r.Get("NEAR_LIMIT_RATIO")) {
    char* end = nullptr;
    const float value = std::strtof(ratio->c_str(), &end);
    if (end != ratio->c_str() + ratio->size() || !std::isfinite(value) || value < 0 || value > 1) {
      r.Say(Level::kError, "NEAR_LIMIT_RATIO",
            fmt::format("'{}' is not a ratio from 0 to 1", *ratio));
    } else {
      s.near_limit_ratio = value;
    }
  }
  s.rls_upstream_headers = r.Bool("LIMIT_RESPONSE_HEADERS_ENABLED", false);
  if (auto name = r.Get("LIMIT_LIMIT_HEADER")) s.rls_limit_header = *name;
  if (auto name = r.Get("LIMIT_REMAINING_HEADER")) s.rls_remaining_header = *name;
  if (auto name = r.Get("LIMIT_RESET_HEADER")) s.rls_reset_header = *name;
}

// USE_PROMETHEUS=true: sluice's /metrics also on PROMETHEUS_ADDR at PROMETHEUS_PATH, where
// upstream's Prometheus sink listens (Go's "host:port", ":port" on every interface; upstream's
// defaults ":9090" and "/metrics"). Its metrics are sluice's own, under sluice's names.
void ReadPrometheus(EnvReader& r, EnvoyEnv& out) {
  const auto addr = r.Get("PROMETHEUS_ADDR");
  const auto path = r.Get("PROMETHEUS_PATH");
  if (!r.Bool("USE_PROMETHEUS", false)) {
    if (addr) r.Say(Level::kInfo, "PROMETHEUS_ADDR", "no effect: only with USE_PROMETHEUS=true");
    if (path) r.Say(Level::kInfo, "PROMETHEUS_PATH", "no effect: only with USE_PROMETHEUS=true");
    return;
  }
  const std::string address = addr.value_or(":9090");
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    const std::string_view digits = std::string_view(address).substr(colon + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (ec != std::errc() || end != digits.data() + digits.size() || port > 65535) port = -1;
  }
  if (port < 0) {
    r.Say(Level::kError, "PROMETHEUS_ADDR",
          fmt::format("'{}' is not host:port or :port (a port from 0 to 65535)", address));
    return;
  }
  std::string host = address.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";  // Go's ":port": every interface
  const std::string metrics_path = path.value_or("/metrics");
  if (!metrics_path.starts_with('/')) {
    r.Say(Level::kError, "PROMETHEUS_PATH",
          fmt::format("'{}' is not a path (it starts with /)", metrics_path));
    return;
  }
  out.prometheus_listen = Address(host, port);
  out.prometheus_path = metrics_path;
  r.Say(Level::kInfo, "USE_PROMETHEUS",
        fmt::format("sluice's metrics (its own names, as on DEBUG_PORT) also at http://{}{}",
                    out.prometheus_listen, out.prometheus_path));
}

// Tracing as upstream's TRACING_* configure it (its defaults: service RateLimit, protocol http,
// sampling rate 1), to the collector OTEL_EXPORTER_OTLP_ENDPOINT names (OpenTelemetry's variable;
// Envoy Gateway sets it to http://HOST:PORT). A rate is clamped to [0, 1], as OpenTelemetry's
// ratio sampler takes it.
void ReadTracing(EnvReader& r, rules::Settings& s) {
  rules::TracingSettings& t = s.tracing;
  t.enabled = r.Bool("TRACING_ENABLED", false);
  t.service_name = r.GetOr("TRACING_SERVICE_NAME", "RateLimit");
  t.service_namespace = r.GetOr("TRACING_SERVICE_NAMESPACE", "");
  t.service_instance_id = r.GetOr("TRACING_SERVICE_INSTANCE_ID", "");
  t.protocol = r.GetOr("TRACING_EXPORTER_PROTOCOL", "http");
  if (t.protocol != "http" && t.protocol != "grpc") {
    r.Say(Level::kError, "TRACING_EXPORTER_PROTOCOL",
          fmt::format("'{}' is not http or grpc", t.protocol));
  }
  if (auto rate = r.Get("TRACING_SAMPLING_RATE")) {
    char* end = nullptr;
    const double value = std::strtod(rate->c_str(), &end);
    if (end != rate->c_str() + rate->size() || std::isnan(value)) {
      r.Say(Level::kError, "TRACING_SAMPLING_RATE", fmt::format("'{}' is not a number", *rate));
    } else {
      t.sampling_rate = std::clamp(value, 0.0, 1.0);
    }
  }
  t.endpoint = r.GetOr("OTEL_EXPORTER_OTLP_ENDPOINT", "");
  if (!t.enabled) return;
  const trace::otlp::ExporterOptions options = ExporterOptionsFrom(t);
  if (absl::Status s = CheckTracing(t); !s.ok()) {
    r.Say(Level::kError, "OTEL_EXPORTER_OTLP_ENDPOINT", std::string(s.message()));
    return;
  }
  r.Say(Level::kInfo, "TRACING_ENABLED",
        fmt::format("traces to {} over OTLP/{} (sampling rate {}, service {})", options.endpoint,
                    t.protocol, t.sampling_rate, t.service_name));
}

void ReadStats(EnvReader& r, const std::map<std::string, std::string>& /*env*/, EnvoyEnv& out) {
  rules::Settings& s = *out.load.settings;
  // Stats and tracing: what sluice has instead.
  r.Say(Level::kInfo, "",
        fmt::format("stats: Prometheus text at http://{}/metrics; no statsd", s.admin_listen));
  r.Unsupported("USE_STATSD", true, Level::kWarning,
                "not supported: sluice's metrics are on the admin port's /metrics");
  r.Unsupported("USE_DOG_STATSD", false, Level::kWarning, "not supported: sluice sends no statsd");
  ReadPrometheus(r, out);
  ReadTracing(r, s);
}

}  // namespace

EnvoyEnv ReadEnvoyEnv(const std::map<std::string, std::string>& env) {
  EnvoyEnv out;
  EnvReader r(env, out);
  rules::Settings& s = out.load.settings.emplace();
  s.file = "the environment (--envoy-env)";
  // (In the order the messages were always given in.)
  for (auto read :
       {ReadListeners, ReadLogs, ReadRulesSource, ReadRedis, ReadDecisions, ReadStats}) {
    read(r, env, out);
  }
  r.NameTheRest();
  return out;
}

}  // namespace sluice::cli
