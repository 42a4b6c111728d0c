#include "cli/envoy_env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string_view>

#include "fmt/format.h"

namespace sluice::cli {
namespace {

using Level = EnvoyEnvMessage::Level;

// Accepted and without effect in sluice, with the reason (an info message when set).
struct Note {
  const char* name;
  const char* why;
};

constexpr Note kIrrelevant[] = {
    {"REDIS_POOL_SIZE", "sluice pipelines every call over its own connections; no pool to size"},
    {"REDIS_PIPELINE_WINDOW", "sluice sends each batch as soon as it is ready"},
    {"REDIS_PIPELINE_LIMIT", "unused upstream too"},
    {"REDIS_CLUSTER_PIPELINE_PARALLELISM", "sluice sends to every cluster master at once"},
    {"REDIS_POOL_ON_EMPTY_BEHAVIOR", "sluice has no connection pool to run empty"},
    {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
     "sluice reports Redis health on /readyz and sluice_backend_up on its own"},
    {"REDIS_STARTUP_INITIAL_INTERVAL",
     "sluice starts without Redis and answers by failure_mode (open) until it connects"},
    {"REDIS_STARTUP_MAX_INTERVAL",
     "sluice starts without Redis and answers by failure_mode (open) until it connects"},
    {"REDIS_STARTUP_MAX_ELAPSED_TIME",
     "sluice starts without Redis and answers by failure_mode (open) until it connects"},
    {"REDIS_SENTINEL_AUTH", "only for REDIS_TYPE=sentinel"},
    {"REDIS_TLS_CLIENT_CERT", "only with REDIS_TLS=true"},
    {"REDIS_TLS_CLIENT_KEY", "only with REDIS_TLS=true"},
    {"REDIS_TLS_CACERT", "only with REDIS_TLS=true"},
    {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "only with REDIS_TLS=true"},
    {"LOCAL_CACHE_SIZE_IN_BYTES",
     "sluice's own over-limit cache is on by default (redis.over_limit_cache) and exact: a "
     "denial is held until its retry_after, not for a fixed time"},
    {"EXPIRATION_JITTER_MAX_SECONDS", "sluice sets its keys' expiry from each limit's window"},
    {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
     "sluice never serves without a loaded configuration"},
    {"FORCE_START_WITHOUT_INITIAL_CONFIG", "only with CONFIG_TYPE=GRPC_XDS_SOTW"},
    {"GRPC_SERVER_TLS_CERT", "only with GRPC_SERVER_USE_TLS=true"},
    {"GRPC_SERVER_TLS_KEY", "only with GRPC_SERVER_USE_TLS=true"},
    {"GRPC_CLIENT_TLS_SAN", "only with GRPC_CLIENT_TLS_CACERT"},
    {"DISABLE_STATS", "sluice has no statsd sink to disable; /metrics is read on demand"},
    {"STATS_FLUSH_INTERVAL", "sluice's /metrics is read on demand, nothing is flushed"},
};

// Unsupported, but ignoring them changes no decision (a warning when set).
constexpr Note kWithoutDecisions[] = {
    {"STATSD_HOST", "sluice sends no statsd; its metrics are on the admin port's /metrics"},
    {"STATSD_PORT", "sluice sends no statsd; its metrics are on the admin port's /metrics"},
    {"USE_DOG_STATSD_MOGRIFIERS", "sluice sends no statsd"},
    {"EXTRA_TAGS", "sluice sends no statsd; add labels when scraping /metrics"},
    {"PROMETHEUS_ADDR", "sluice's Prometheus metrics are on the admin port (DEBUG_PORT) /metrics"},
    {"PROMETHEUS_PATH", "sluice's Prometheus metrics are on the admin port (DEBUG_PORT) /metrics"},
    {"PROMETHEUS_MAPPER_YAML", "sluice's metric names are its own (docs/operations.md)"},
    {"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "sluice's histograms are in seconds"},
    {"TRACING_SERVICE_NAME", "sluice does no tracing"},
    {"TRACING_SERVICE_NAMESPACE", "sluice does no tracing"},
    {"TRACING_SERVICE_INSTANCE_ID", "sluice does no tracing"},
    {"TRACING_EXPORTER_PROTOCOL", "sluice does no tracing"},
    {"TRACING_SAMPLING_RATE", "sluice does no tracing"},
    {"GRPC_MAX_CONNECTION_AGE", "sluice keeps a gRPC connection until the client closes it"},
    {"GRPC_MAX_CONNECTION_AGE_GRACE", "sluice keeps a gRPC connection until the client closes it"},
};

// Upstream's whole list (src/settings/settings.go), in its order, a family per line.
// clang-format off
const std::vector<std::string> kAllNames = {
    "HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_HOST", "GRPC_PORT", "GRPC_UDS",
    "GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE",
    "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL", "LOG_FORMAT",
    "CONFIG_TYPE", "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    "USE_STATSD", "STATSD_HOST", "STATSD_PORT", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS",
    "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS",
    "USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO",
    "CACHE_KEY_PREFIX", "BACKEND_TYPE", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH",
    "REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_SENTINEL_AUTH",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL",
    "REDIS_STARTUP_MAX_ELAPSED_TIME",
    "REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
    "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH",
    "MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT",
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
    "SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA", "MERGE_DOMAIN_CONFIG",
    "TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
    "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"};
// clang-format on

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Go's strconv.ParseBool, as envconfig reads a bool.
std::optional<bool> ParseGoBool(std::string_view s) {
  if (s == "1" || s == "t" || s == "T" || s == "true" || s == "TRUE" || s == "True") return true;
  if (s == "0" || s == "f" || s == "F" || s == "false" || s == "FALSE" || s == "False") {
    return false;
  }
  return std::nullopt;
}

// Go's time.ParseDuration ("10s", "1.5s", "1m30s", "250ms", "0"), in microseconds; negative
// and sub-microsecond durations are refused (a timeout needs to be positive).
std::optional<int64_t> ParseGoDuration(std::string_view s) {
  if (s == "0") return 0;
  if (s.empty()) return std::nullopt;
  double total_us = 0;
  while (!s.empty()) {
    size_t digits = 0;
    while (digits < s.size() &&
           (std::isdigit(static_cast<unsigned char>(s[digits])) || s[digits] == '.')) {
      ++digits;
    }
    if (digits == 0) return std::nullopt;
    const std::string number(s.substr(0, digits));
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size()) return std::nullopt;
    s.remove_prefix(digits);
    size_t unit_len = 0;
    while (unit_len < s.size() && !std::isdigit(static_cast<unsigned char>(s[unit_len])) &&
           s[unit_len] != '.') {
      ++unit_len;
    }
    const std::string_view unit = s.substr(0, unit_len);
    s.remove_prefix(unit_len);
    double scale_us;
    if (unit == "ns") {
      scale_us = 1e-3;
    } else if (unit == "us" || unit == "\u00b5s" || unit == "\u03bcs") {
      scale_us = 1;
    } else if (unit == "ms") {
      scale_us = 1e3;
    } else if (unit == "s") {
      scale_us = 1e6;
    } else if (unit == "m") {
      scale_us = 60e6;
    } else if (unit == "h") {
      scale_us = 3600e6;
    } else {
      return std::nullopt;
    }
    total_us += value * scale_us;
  }
  // 2^53 µs is 285 years: past any sensible timeout, and still exact in a double.
  if (!(total_us >= 1) || total_us > 9007199254740992.0) return std::nullopt;
  return static_cast<int64_t>(total_us);
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

class EnvReader {
 public:
  EnvReader(const std::map<std::string, std::string>& env, EnvoyEnv& out) : env_(env), out_(out) {}

  // The value when set (and not empty); the name counts as handled either way.
  std::optional<std::string> Get(const std::string& name) {
    handled_.insert(name);
    auto it = env_.find(name);
    if (it == env_.end() || it->second.empty()) return std::nullopt;
    return it->second;
  }

  std::string GetOr(const std::string& name, const std::string& def) {
    return Get(name).value_or(def);
  }

  bool Bool(const std::string& name, bool def) {
    const auto value = Get(name);
    if (!value) return def;
    if (auto b = ParseGoBool(*value)) return *b;
    Say(Level::kError, name, fmt::format("'{}' is not a boolean (true or false)", *value));
    return def;
  }

  int Port(const std::string& name, int def) {
    const auto value = Get(name);
    if (!value) return def;
    int port = -1;
    const auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), port);
    if (ec != std::errc() || end != value->data() + value->size() || port < 0 || port > 65535) {
      Say(Level::kError, name, fmt::format("'{}' is not a port (0 to 65535)", *value));
      return def;
    }
    return port;
  }

  void Say(Level level, const std::string& name, std::string text) {
    out_.messages.push_back({level, name, std::move(text)});
  }

  // A feature switch that sluice does not have: `level` when it is set and on (a switch on by
  // default, USE_STATSD, is named only when set).
  void Unsupported(const std::string& name, bool def, Level level, const std::string& why) {
    if (Bool(name, def) && Get(name)) Say(level, name, why);
  }

  // Every other variable upstream reads, set here: named, as the tables above say, or as read
  // by upstream and not by sluice.
  void NameTheRest() {
    for (const Note& note : kIrrelevant) {
      if (Get(note.name)) Say(Level::kInfo, note.name, fmt::format("no effect: {}", note.why));
    }
    for (const Note& note : kWithoutDecisions) {
      if (Get(note.name))
        Say(Level::kWarning, note.name, fmt::format("not supported: {}", note.why));
    }
    for (const std::string& name : kAllNames) {
      if (handled_.contains(name) || !env_.contains(name) || env_.at(name).empty()) continue;
      if (name.starts_with("REDIS_PERSECOND_")) {
        Say(Level::kInfo, name, "no effect: only with REDIS_PERSECOND=true");
      } else if (name.starts_with("MEMCACHE_")) {
        Say(Level::kInfo, name, "no effect: only with BACKEND_TYPE=memcache");
      } else if (name.starts_with("CONFIG_GRPC_XDS_") || name.starts_with("XDS_CLIENT_")) {
        Say(Level::kInfo, name, "no effect: only with CONFIG_TYPE=GRPC_XDS_SOTW");
      } else {
        Say(Level::kWarning, name, "read by envoyproxy/ratelimit, not by sluice");
      }
    }
    for (const auto& [name, value] : env_) {
      if (value.empty()) continue;
      if (name.starts_with("DOG_STATSD_MOGRIFIER_")) {
        Say(Level::kWarning, name, "not supported: sluice sends no statsd");
      } else if (name.starts_with("OTEL_EXPORTER_OTLP_")) {
        Say(Level::kWarning, name, "not supported: sluice does no tracing");
      }
    }
  }

 private:
  const std::map<std::string, std::string>& env_;
  EnvoyEnv& out_;
  std::set<std::string> handled_;
};

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

const std::vector<std::string>& EnvoyEnvVariableNames() { return kAllNames; }

namespace {

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
  r.Unsupported("GRPC_SERVER_USE_TLS", false, Level::kError,
                "TLS on the gRPC port is not supported (terminate it in front of sluice)");
  if (r.Get("GRPC_CLIENT_TLS_CACERT")) {
    r.Say(Level::kError, "GRPC_CLIENT_TLS_CACERT",
          "client certificates on the gRPC port are not supported; sluice would accept every "
          "client");
  }
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

void ReadRulesSource(EnvReader& r, const std::map<std::string, std::string>& /*env*/,
                     EnvoyEnv& out) {
  // Where the rules come from.
  if (auto type = r.Get("CONFIG_TYPE"); type && Lower(*type) != "file") {
    r.Say(Level::kError, "CONFIG_TYPE",
          fmt::format("'{}' is not supported: sluice reads its rules from files (CONFIG_TYPE=FILE)",
                      *type));
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
  if (type != "single" && type != "cluster") {
    r.Say(Level::kError, "REDIS_TYPE",
          fmt::format("'{}' is not supported (single or cluster)", type));
  }
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
  if (socket_type == "tcp") {
    for (const std::string& h : hosts) {
      if (!IsHostPort(h)) {
        r.Say(Level::kError, "REDIS_URL", fmt::format("'{}' is not host:port", h));
      }
    }
    if (type == "single" && hosts.size() > 1) {
      r.Say(Level::kError, "REDIS_URL", "several addresses need REDIS_TYPE=cluster");
    }
  }
  if (type == "cluster") {
    s.redis_cluster = true;
    for (const std::string& h : hosts) s.redis_nodes.push_back("redis://" + credentials + h);
  } else {
    s.redis_url = "redis://" + credentials + hosts.front();
  }
  if (auto timeout = r.Get("REDIS_TIMEOUT")) {
    if (auto us = ParseGoDuration(*timeout); us && *us > 0) {
      s.redis_timeout_us = *us;
    } else {
      r.Say(Level::kError, "REDIS_TIMEOUT",
            fmt::format("'{}' is not a positive duration (10s, 250ms)", *timeout));
    }
  }
  r.Unsupported("REDIS_TLS", false, Level::kError,
                "TLS to Redis is not supported; sluice would connect in plain text");
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

void ReadStats(EnvReader& r, const std::map<std::string, std::string>& /*env*/, EnvoyEnv& out) {
  rules::Settings& s = *out.load.settings;
  // Stats and tracing: what sluice has instead.
  r.Say(Level::kInfo, "",
        fmt::format("stats: Prometheus text at http://{}/metrics; no statsd", s.admin_listen));
  r.Unsupported("USE_STATSD", true, Level::kWarning,
                "not supported: sluice's metrics are on the admin port's /metrics");
  r.Unsupported("USE_DOG_STATSD", false, Level::kWarning, "not supported: sluice sends no statsd");
  r.Unsupported("USE_PROMETHEUS", false, Level::kWarning,
                "sluice's Prometheus metrics are on the admin port (DEBUG_PORT) /metrics, not "
                "PROMETHEUS_ADDR");
  r.Unsupported("TRACING_ENABLED", false, Level::kWarning, "not supported: sluice does no tracing");
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
