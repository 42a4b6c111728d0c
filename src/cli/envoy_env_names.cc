// Upstream's variables beyond those sluice maps: its whole list, those accepted without effect
// and those unsupported without a change to decisions, and the messages that name each one set.
#include <string>
#include <vector>

#include "cli/envoy_env_reader.h"

namespace sluice::cli {
namespace {

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
    {"LOCAL_CACHE_SIZE_IN_BYTES",
     "sluice's own over-limit cache is on by default (redis.over_limit_cache) and exact: a "
     "denial is held until its retry_after, not for a fixed time"},
    {"EXPIRATION_JITTER_MAX_SECONDS", "sluice sets its keys' expiry from each limit's window"},
    {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
     "sluice never serves without a loaded configuration"},
    {"DISABLE_STATS", "sluice has no statsd sink to disable; /metrics is read on demand"},
    {"STATS_FLUSH_INTERVAL", "sluice's /metrics is read on demand, nothing is flushed"},
};

// Unsupported, but ignoring them changes no decision (a warning when set).
constexpr Note kWithoutDecisions[] = {
    {"STATSD_HOST", "sluice sends no statsd; its metrics are on the admin port's /metrics"},
    {"STATSD_PORT", "sluice sends no statsd; its metrics are on the admin port's /metrics"},
    {"USE_DOG_STATSD_MOGRIFIERS", "sluice sends no statsd"},
    {"EXTRA_TAGS", "sluice sends no statsd; add labels when scraping /metrics"},
    {"PROMETHEUS_MAPPER_YAML", "sluice's metric names are its own (docs/operations.md)"},
    {"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "sluice's histograms are in seconds"},
    {"GRPC_MAX_CONNECTION_AGE", "sluice keeps a gRPC connection until the client closes it"},
    {"GRPC_MAX_CONNECTION_AGE_GRACE", "sluice keeps a gRPC connection until the client closes it"},
};

}  // namespace

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

const std::vector<std::string>& EnvoyEnvVariableNames() { return kAllNames; }

void EnvReader::NameTheRest() {
  for (const Note& note : kIrrelevant) {
    if (Get(note.name)) Say(Level::kInfo, note.name, fmt::format("no effect: {}", note.why));
  }
  for (const Note& note : kWithoutDecisions) {
    if (Get(note.name)) Say(Level::kWarning, note.name, fmt::format("not supported: {}", note.why));
  }
  for (const std::string& name : kAllNames) {
    if (handled_.contains(name) || !env_.contains(name) || env_.at(name).empty()) continue;
    if (name.starts_with("REDIS_PERSECOND_")) {
      Say(Level::kInfo, name, "no effect: only with REDIS_PERSECOND=true");
    } else if (name.starts_with("REDIS_TLS_")) {  // (read with REDIS_TLS=true)
      Say(Level::kInfo, name, "no effect: only with REDIS_TLS=true");
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
    } else if (name.starts_with("OTEL_EXPORTER_OTLP_") && !handled_.contains(name)) {
      Say(Level::kWarning, name,
          "not supported: sluice's exporter reads OTEL_EXPORTER_OTLP_ENDPOINT alone");
    }
  }
}

}  // namespace sluice::cli
