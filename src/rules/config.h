// The rules configuration: domains of descriptor trees (envoyproxy/ratelimit's YAML format plus
// sluice's extensions), plans, per-domain HTTP mapping and server-wide settings.
//
// A Config is built whole by the loader (loader.h), validated, and then never changes: it is
// shared between threads as std::shared_ptr<const Config> and replaced as a unit on reload.
// docs/configuration.md describes every key.

#ifndef SLUICE_RULES_CONFIG_H_
#define SLUICE_RULES_CONFIG_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backend/backend.h"
#include "sluice/limit.h"
#include "sluice/on_full.h"

namespace sluice::rules {

// Where something was written: 1-based line and column.
struct Position {
  std::string file;
  int line = 0;
  int column = 0;
};

using backend::Consistency;  // consistency: exact | leased | eventual

// One limit on a descriptor node or in a plan.
struct LimitRule {
  Limit limit;
  std::string name;                        // `name:`, echoed in responses and used by `replaces`
  bool shadow_mode = false;                // evaluated and reported, never denies
  std::optional<Consistency> consistency;  // `consistency:`; unset: the domain's
  // The window as written with `unit:` ("minute"), for RLS current_limit; empty with `window:`.
  std::string unit;
  Position position;
  // backend::RuleLimitId(node path, "", limit) of the node holding it, computed at load (it would
  // otherwise be hashed for every request); 0 in a plan's limits, whose id depends on the node.
  uint64_t state_id = 0;
};

// A concurrency limit (`algorithm: concurrency` in a descriptor's rate_limit or limits): at most
// `requests` holds at once per key, each ending after max_hold unless released or renewed first
// (POST /v1/acquire, /v1/release, /v1/renew; the reverse proxy holds one per request in flight).
// Not a rate: /v1/check, forward-auth and RLS requests do not count against it.
struct ConcurrencyRule {
  uint64_t requests = 0;
  int64_t max_hold_us = 0;
  std::string name;
  Position position;
  // Its holds' identity with its node's path (backend::RuleLimitId of the path + "#concurrency"),
  // computed at load.
  uint64_t state_id = 0;
};

// `max_hold:` when a concurrency limit does not say.
inline constexpr int64_t kDefaultMaxHoldUs = 60'000'000;

using backend::FailureMode;  // failure_mode: open | closed | local

// One node of a domain's descriptor tree.
struct RuleNode {
  std::string key;
  std::string value;  // empty with has_value == false: matches any value of `key`
  bool has_value = false;
  bool wildcard = false;  // value contains '*'
  bool share_threshold = false;
  bool unlimited = false;
  bool has_rate_limit = false;               // rate_limit or limits given (unlimited counts)
  std::vector<LimitRule> limits;             // empty when unlimited or plan-driven
  std::vector<ConcurrencyRule> concurrency;  // its `algorithm: concurrency` limits
  std::string rate_limit_name;               // rate_limit.name (also the name of its limits)
  std::vector<std::string> replaces;
  bool shadow_mode = false;
  // Over its limits, this descriptor alone does not deny the request (upstream's quota_mode):
  // see engine::DescriptorResult::quota.
  bool quota_mode = false;
  bool detailed_metric = false;
  std::string plan_from;  // entry key naming the plan; limits come from the plan
  // `metadata:` as a JSON object (empty: none), for RLS dynamic metadata (upstream's
  // RESPONSE_DYNAMIC_METADATA).
  std::string metadata_json;
  std::string path;  // "domain.key_value.key": for stats, explain, state ids
  Position position;

  // Children, indexed for matching by hash lookups (see matcher.h): by entry key, then by
  // exact value; wildcard values in file order; the key-only child.
  struct KeyIndex {
    absl::flat_hash_map<std::string, const RuleNode*> by_value;
    std::vector<const RuleNode*> wildcards;
    const RuleNode* any_value = nullptr;
  };
  std::vector<std::unique_ptr<RuleNode>> children;
  absl::flat_hash_map<std::string, KeyIndex> index;
};

struct Plan {
  std::string name;
  std::vector<LimitRule> limits;
};

// The plan mapping file (`clients:`, CSV `key,plan`): which plan each client key is on. The keys
// point into the file's bytes, kept here, so a million rows cost one allocation, not a million.
struct ClientPlans {
  std::string text;
  absl::flat_hash_map<absl::string_view, const Plan*> by_key;  // plans of the owning Domain

  const Plan* Find(std::string_view key) const {
    auto it = by_key.find(absl::string_view(key.data(), key.size()));
    return it == by_key.end() ? nullptr : it->second;
  }
  size_t size() const { return by_key.size(); }
};

// One HTTP action: how one descriptor entry is taken from a request (Envoy route vocabulary).
struct HttpAction {
  enum class Kind { kRequestHeaders, kRemoteAddress, kGenericKey, kPath, kMethod };
  Kind kind = Kind::kGenericKey;
  std::string header_name;       // request_headers
  std::string descriptor_key;    // defaults per kind (remote_address, generic_key, path, method)
  std::string descriptor_value;  // generic_key
  bool skip_if_absent = false;   // request_headers: accepted for Envoy compatibility; a missing
                                 // header always skips just this descriptor
};

// Where a cost is read from (a rate_limits entry's `cost:`): a number written in the rules, a
// header, or a field of a JSON body named by a dotted path ("usage.total_tokens"; kept as the
// JSON Pointer "/usage/total_tokens").
struct CostSource {
  enum class Kind { kFixed, kHeader, kJson };
  Kind kind = Kind::kFixed;
  uint64_t fixed = 1;     // kFixed
  std::string name;       // kHeader: the field's name; kJson: the dotted path as written
  std::string pointer;    // kJson
  uint64_t fallback = 1;  // `default:` (reserve): when the header or field is missing or no count
};

// A rate_limits entry's `cost:` (docs/configuration.md): its descriptor's cost is `reserve`, read
// from the request before it is decided; in reverse proxy mode, `settle` (when given) is read
// from the answer (a header, or a JSON field of its body, the last event of an event stream that
// has it) and the difference is given back or recorded past the limit.
struct RouteCost {
  CostSource reserve;
  std::optional<CostSource> settle;
};

struct HttpRoute {
  std::string prefix;                                // match.prefix, or
  std::string path;                                  // match.path (exact)
  std::vector<std::string> methods;                  // empty = any
  std::vector<std::vector<HttpAction>> rate_limits;  // each yields one descriptor
  // Each rate_limits entry's `cost:`, by index; empty when no entry has one.
  std::vector<std::optional<RouteCost>> costs;
  bool reads_body = false;  // some entry's reserve is a JSON field of the request's body
  Position position;
};

struct Cidr {
  std::array<uint8_t, 16> address{};  // IPv4 as IPv4-mapped IPv6
  int prefix_bits = 0;                // out of 128
};

struct HttpSection {
  int deny_status = 429;
  std::vector<Cidr> trusted_proxies;
  std::vector<HttpRoute> routes;
  std::string upstream;                // reverse proxy target, e.g. http://127.0.0.1:9000
  std::string upstream_host;           // parsed from it: "127.0.0.1" (IPv6 without brackets)
  uint16_t upstream_port = 0;          // 80 when the URL names none
  std::vector<std::string> refund_on;  // 5xx, connect_error, timeout
};

struct Domain {
  std::string name;
  std::string file;
  RuleNode root;  // key-less; its children are the top-level descriptors
  FailureMode failure_mode = FailureMode::kOpen;
  Consistency consistency = Consistency::kExact;  // `consistency:`, for its limits' default
  std::optional<bool> count_denied;               // unset: the global setting
  bool shadow_mode = false;
  std::optional<HttpSection> http;
  std::map<std::string, Plan> plans;
  std::string default_plan;
  std::string clients_path;  // CSV `key,plan`; once loaded, resolved against the domain file
  Position clients_at;       // where the domain file names it
  // Loaded from clients_path.
  std::shared_ptr<const ClientPlans> clients;
  size_t limit_count = 0;
  // `hot_keys: lease`: an exact limit's key whose rate on this instance passes `hot_key_rate`
  // (requests per second) is decided from leases while it stays hot (docs/hybrid.md, "Hot keys").
  bool lease_hot_keys = false;
  // `cold_keys: lease`: an eventual limit's key whose rate on this instance is under
  // `hot_key_rate` is decided from leases, the hotter ones on copies (docs/hybrid.md).
  bool lease_cold_keys = false;
  uint32_t hot_key_rate = 1000;
  // `time_zone:` (IANA): the zone of the domain's calendar windows (a limit's own time_zone wins).
  std::string time_zone = "UTC";
  // `calendar_units: true`: units day, week, month and year (also of RLS requests' own limits)
  // are calendar windows in time_zone, not epoch-aligned spans of 1, 7, 30 and 365 days.
  bool calendar_units = false;
  // With calendar_units: the calendar of each unit, by its name ("day", ...).
  std::map<std::string, Calendar, std::less<>> unit_calendars;
};

// redis.tls: how to talk TLS to rediss:// servers (stack makes redis::TlsOptions of it; what
// each does: docs/redis.md, "TLS"). The parser makes relative file names relative to the settings
// file's directory.
struct RedisTlsSettings {
  std::string ca_file;    // empty: the system's CA store
  std::string cert_file;  // mutual TLS, with key_file
  std::string key_file;
  std::string server_name;  // empty: each node's host
  bool skip_hostname_verification = false;
  // Where the settings file says them (for the errors of files that cannot be used).
  Position at, ca_file_at, cert_file_at, key_file_at;
};

// `tls:` of a listener (http.tls for the data plane, admin.tls, grpc.tls): the server's
// certificate chain and key (PEM) and, for mutual TLS, the CAs that must have signed each client's
// certificate (then a client without one is refused). What each does: docs/configuration.md. The
// parser makes relative file names relative to the settings file's directory.
struct ListenerTlsSettings {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // empty: no client certificate asked for
  // Where the settings file says them (for the errors of files that cannot be used).
  Position at, cert_file_at, key_file_at, client_ca_file_at;
};

// redis.sentinel: the master found through Redis Sentinel (docs/redis.md, "Sentinel"). The
// master's own login, database and TLS stay redis.url's (`redis[s]://[user:pass@]MASTER[/db]`).
struct RedisSentinelSettings {
  std::string master;                  // the name the sentinels monitor the master by
  std::vector<std::string> addresses;  // the sentinels, "host:port" (port 26379 if left out)
  std::string username;                // the sentinels' own login (AUTH), not the master's
  std::string password;
  std::optional<bool> tls;  // the sentinels over TLS (redis.tls's files); unset: as the master
  Position at;
};

// config_source.xds: the rules come from an xDS management server over ADS, as
// envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW takes them (src/xds; docs/configuration.md).
// The defaults are upstream's. The parser makes relative file names relative to the settings
// file's directory.
struct XdsSettings {
  std::string server_url;  // host:port
  std::string node_id = "default";
  std::map<std::string, std::string> node_metadata;  // Node.metadata, string values
  std::map<std::string, std::string> headers;        // gRPC metadata sent with the stream
  bool tls = false;                                  // TLS to the server (tls: block)
  std::string ca_file;                               // empty: the system's CA store
  std::string cert_file, key_file;                   // mutual TLS
  std::string server_name;  // the name the server's certificate must carry; empty: its host
  int64_t connect_retry_interval_us = int64_t{3} * 1000000;
  // After a stream ends: initial × factor^attempt, within [initial, max], jittered (upstream's
  // XDS_CLIENT_BACKOFF_*; with its factor of 0.5, every wait is `initial`).
  int64_t backoff_initial_us = int64_t{10} * 1000000;
  int64_t backoff_max_us = int64_t{60} * 1000000;
  double backoff_factor = 0.5;
  bool backoff_jitter = true;
  size_t max_message_bytes = 0;  // 0: gRPC's default (4 MiB)
  // Listen before the first rule set has come (not ready until it has); false: serve starts
  // listening only once it has (upstream's FORCE_START_WITHOUT_INITIAL_CONFIG).
  bool force_start = false;
  Position at, ca_file_at, cert_file_at, key_file_at;
};

// `tracing:`: OpenTelemetry traces of the requests served, exported over OTLP (src/trace; what
// each does: docs/operations.md, "Traces"). Read at start: a reload does not change them.
struct TracingSettings {
  bool enabled = false;
  std::string protocol = "http";  // http (HTTP/protobuf) | grpc
  std::string endpoint;           // empty: http://127.0.0.1:4318 (http) or 127.0.0.1:4317 (grpc)
  double sampling_rate = 1.0;     // of the traces sluice starts; a caller's sampled flag wins
  std::string service_name = "sluice";
  std::string service_namespace;
  std::string service_instance_id;  // empty: a random UUID at start
  bool record_keys = false;         // the descriptors' entries as attributes
  size_t queue_size = 2048;         // ended spans waiting for the exporter; more are dropped
  size_t max_batch = 512;           // spans per export call
  int64_t export_interval_us = 5000000;
  int64_t export_timeout_us = 10000000;
  Position endpoint_at;  // where the settings file says the endpoint (or `tracing:`), if it does
};

// Server-wide settings (the settings file, conventionally sluice.yaml; flags override).
struct Settings {
  std::string file;                // where they came from; empty = defaults
  std::string rules_path;          // `rules:`
  std::optional<XdsSettings> xds;  // config_source.xds: rules (also) over xDS
  // Files with the same `domain:` make one domain (upstream's MERGE_DOMAIN_CONFIG); when false,
  // a second file of a domain is an error.
  bool merge_domains = false;
  std::string listen = "127.0.0.1:8080";
  std::string admin_listen = "127.0.0.1:9091";
  std::string admin_token_file;
  Position admin_listen_at, admin_token_file_at;  // where the settings file says them, if it does
  std::string grpc_listen = "127.0.0.1:8081";
  // `grpc: {threads: N}`: N > 0 serves ShouldRateLimit on gRPC's async API with N completion
  // queues, each drained by its own thread; 0 = gRPC's callback API on gRPC's own threads.
  int grpc_threads = 0;
  // TLS on the listeners (each optional): http.tls (the data plane, `listen`), admin.tls and
  // grpc.tls.
  std::optional<ListenerTlsSettings> http_tls, admin_tls, grpc_tls;
  int threads = 0;  // 0 = hardware concurrency
  // `state_dir:` (relative to the settings file): where serve keeps what it must not lose across
  // restarts (the runtime overrides, with the memory store). Empty: serve uses $STATE_DIRECTORY
  // (systemd's StateDirectory=) when set, else keeps them in memory only.
  std::string state_dir;
  Position state_dir_at;
  std::string backend = "memory";  // memory | redis
  std::string redis_url;
  bool redis_cluster = false;
  std::vector<std::string> redis_nodes;
  // Set by a redis.tls block, which only rediss:// URLs may have (a rediss:// URL without one
  // trusts the system's CAs and checks each node's host name).
  std::optional<RedisTlsSettings> redis_tls;
  // Set by a redis.sentinel block: the master is the one its sentinels name.
  std::optional<RedisSentinelSettings> redis_sentinel;
  std::string redis_key_prefix = "sluice:";
  int64_t redis_timeout_us = 10000;
  int local_instances = 1;     // failure_mode local: the limit is divided by this
  uint32_t redis_buckets = 0;  // hashes the states are packed into (0: a key per state)
  // redis.over_limit_cache: deny a key Redis denied until its retry_after, with no Redis call
  // (backend/hybrid/over_limit_cache.h); up to this many denials held (0: off).
  size_t redis_over_limit_cache = 65536;
  // redis.lease_interval (consistency: leased): the target interval; a token bucket's lease lives
  // this long.
  int64_t redis_lease_interval_us = 100000;
  // redis.window_lease_life: how long a window limit's lease may live (never past its window);
  // 0: ten lease intervals. Long saves Redis work on keys with sparse traffic (a lease per key,
  // instance and minute rather than per second) and holds unspent units longer (docs/hybrid.md).
  int64_t redis_window_lease_life_us = 60000000;
  // redis.sync_interval (consistency: eventual): how often an instance merges what it admitted
  // into Redis and takes the merged states back (backend/hybrid/eventual.h).
  int64_t redis_sync_interval_us = 100000;
  std::vector<std::string> headers = {"x_ratelimit", "ietf"};
  // `headers` as flags, set with it by the settings parser: read for every answer.
  bool x_ratelimit_headers = true;
  bool ietf_headers = true;
  size_t max_entries = size_t{1} << 24;
  OnFull on_full = OnFull::kShared;  // store.on_full: a new key in a full store
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
  size_t max_key_bytes = 4 << 10;
  int64_t header_timeout_us = int64_t{10} * 1000000;  // a request must arrive whole within this
  int64_t shutdown_timeout_us =
      int64_t{30} * 1000000;                        // on SIGTERM, busy connections get this long
  int64_t idle_timeout_us = int64_t{60} * 1000000;  // keep-alive connections idle longer are closed
  size_t max_connections = 10000;
  // Reverse proxy: connect, send and the wait for the answer's header; also the longest silence
  // while a body streams either way.
  int64_t upstream_timeout_us = int64_t{30} * 1000000;
  size_t max_delayed = 10000;  // reverse proxy: requests held by leaky_bucket shaping at once
  bool count_denied = false;
  // Global shadow mode (upstream's SHADOW_MODE): a request that would be denied is admitted;
  // each descriptor's status still says OVER_LIMIT where it is (engine.h).
  bool shadow_mode = false;
  // Every descriptor in quota mode (upstream's QUOTA_MODE), as if each had `quota_mode: true`.
  bool quota_mode = false;
  // An admitted decision is "near the limit" when what is used of the limit after it is above
  // floor(capacity × this) (upstream's NEAR_LIMIT_RATIO, in its single precision).
  float near_limit_ratio = 0.8f;
  // RLS answers carry dynamic_metadata (upstream's RESPONSE_DYNAMIC_METADATA; rls/codec.h).
  bool rls_dynamic_metadata = false;
  bool allow_unknown_domain = false;
  // RLS (gRPC ShouldRateLimit and /json): IETF RateLimit/RateLimit-Policy fields in
  // response_headers_to_add, and an unknown domain as an error instead of OK.
  bool rls_response_headers = false;
  bool rls_reject_unknown_domain = false;
  // `rls.response_headers: upstream` (upstream's LIMIT_RESPONSE_HEADERS_ENABLED): the limit,
  // remaining and reset of the descriptor closest to its limit, as upstream picks it, under
  // these names.
  bool rls_upstream_headers = false;
  std::string rls_limit_header = "RateLimit-Limit";
  std::string rls_remaining_header = "RateLimit-Remaining";
  std::string rls_reset_header = "RateLimit-Reset";
  TracingSettings tracing;
};

struct Config {
  std::vector<std::unique_ptr<Domain>> domains;
  absl::flat_hash_map<std::string, const Domain*> by_name;
  Settings settings;
  size_t limit_count = 0;
  std::string version;  // hex hash of every loaded file's bytes
  // Reverse proxy mode is on when some domain has `http.upstream`; this is the first such
  // domain by name (the upstream of requests that no upstream domain's route matches).
  const Domain* proxy_domain = nullptr;
  // Some route reads its request's JSON body for a cost (HttpRoute::reads_body): such requests
  // are read whole before they are decided, not streamed.
  bool routes_read_bodies = false;
  // Decisions go to Redis (settings' backend: redis, or serve --redis): every limit, the rules'
  // and the runtime overrides', must be within the range Redis decides exactly
  // (backend/exact_range.h). (A request's own RLS limit is a fixed window: always within it.)
  bool decided_on_redis = false;

  const Domain* FindDomain(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  }

  // The first domain with failure_mode closed (it refuses requests while the backend cannot
  // decide), or null: what readiness and gRPC health depend on while the backend is down.
  const Domain* FirstFailingClosed() const {
    for (const auto& d : domains) {
      if (d->failure_mode == FailureMode::kClosed) return d.get();
    }
    return nullptr;
  }
};

}  // namespace sluice::rules

#endif  // SLUICE_RULES_CONFIG_H_
