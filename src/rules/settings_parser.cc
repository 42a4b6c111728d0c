// The settings file (sluice.yaml): server-wide settings, see docs/configuration.md.

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <string_view>

#include "fmt/format.h"
#include "rules/parsers.h"

namespace sluice::rules {
namespace {

// The scalar settings at the top level of the file.
void ParseTopLevel(YamlReader& r, const yaml::Node& doc, Settings& s) {
  s.rules_path = r.String(doc, "rules").value_or("");
  s.listen = r.String(doc, "listen").value_or(s.listen);
  s.merge_domains = r.Bool(doc, "merge_domains").value_or(false);
  s.threads = static_cast<int>(r.Unsigned(doc, "threads", 1024).value_or(0));
  s.count_denied = r.Bool(doc, "count_denied").value_or(false);
  s.shadow_mode = r.Bool(doc, "shadow_mode").value_or(false);
  s.quota_mode = r.Bool(doc, "quota_mode").value_or(false);
  s.rls_dynamic_metadata = r.Bool(doc, "response_dynamic_metadata").value_or(false);
  if (auto ratio = r.Number(doc, "near_limit_ratio", "near_limit_ratio", 0, 1)) {
    s.near_limit_ratio = static_cast<float>(*ratio);
  }
  if (auto unknown = r.String(doc, "unknown_domain")) {
    if (*unknown != "allow" && *unknown != "deny") {
      r.Error(doc["unknown_domain"], "unknown_domain must be allow or deny");
    }
    s.allow_unknown_domain = *unknown == "allow";
  }
}

// `path` relative to the settings file's directory, as `rules:` is (not to where sluice happens
// to run); absolute ones and those of settings without a file as they are.
std::string NextToSettings(const YamlReader& r, std::string path) {
  if (path.empty() || r.file().empty() || !std::filesystem::path(path).is_relative()) return path;
  return (std::filesystem::path(r.file()).parent_path() / path).string();
}

// A file name at `key` of `map` (NextToSettings; empty when not there) into `value`, and where
// the settings say it into `at` (left alone when they do not).
void ReadFileField(YamlReader& r, const yaml::Node& map, const char* key, std::string& value,
                   Position& at) {
  value = NextToSettings(r, r.String(map, key).value_or(""));
  if (map[key].IsDefined()) at = r.FieldPosition(map, key);
}

// SECTION.tls: {cert_file, key_file, client_ca_file}, into `out` when the section has one.
void ParseListenerTls(YamlReader& r, const yaml::Node& section, const std::string& name,
                      std::optional<ListenerTlsSettings>& out) {
  const yaml::Node tls = section["tls"];
  if (!tls.IsDefined() || tls.IsNull()) return;
  const std::string where = name + ".tls";
  if (!r.CheckMap(tls, where, {"cert_file", "key_file", "client_ca_file"})) return;
  ListenerTlsSettings& t = out.emplace();
  t.at = r.FieldPosition(section, "tls");
  ReadFileField(r, tls, "cert_file", t.cert_file, t.cert_file_at);
  ReadFileField(r, tls, "key_file", t.key_file, t.key_file_at);
  ReadFileField(r, tls, "client_ca_file", t.client_ca_file, t.client_ca_file_at);
  if (t.cert_file.empty() || t.key_file.empty()) {
    r.Error(tls, fmt::format("{}: a listener's TLS needs cert_file and key_file (the server's "
                             "certificate and its key)",
                             where));
  }
}

// admin: {listen, token_file, tls}
void ParseAdmin(YamlReader& r, const yaml::Node& doc, Settings& s) {
  if (const yaml::Node admin = doc["admin"]; admin.IsDefined() && !admin.IsNull()) {
    if (r.CheckMap(admin, "admin", {"listen", "token_file", "tls"})) {
      ParseListenerTls(r, admin, "admin", s.admin_tls);
      s.admin_listen = r.String(admin, "listen").value_or(s.admin_listen);
      ReadFileField(r, admin, "token_file", s.admin_token_file, s.admin_token_file_at);
      if (admin["listen"].IsDefined()) s.admin_listen_at = r.FieldPosition(admin, "listen");
    }
  }
}

// rls: the Envoy RLS answers (response headers, unknown domains).
void ParseRls(YamlReader& r, const yaml::Node& doc, Settings& s) {
  if (const yaml::Node rls = doc["rls"]; rls.IsDefined() && !rls.IsNull()) {
    if (r.CheckMap(rls, "rls", {"response_headers", "unknown_domain", "header_names"})) {
      const yaml::Node h = rls["response_headers"];
      const std::string form = h.IsDefined() && h.IsScalar() ? h.Scalar() : "";
      if (form == "upstream") {
        s.rls_upstream_headers = true;
      } else if (form == "ietf") {
        s.rls_response_headers = true;
      } else {
        s.rls_response_headers = r.Bool(rls, "response_headers").value_or(false);
      }
      if (const yaml::Node names = rls["header_names"]; names.IsDefined() && !names.IsNull()) {
        if (r.CheckMap(names, "rls.header_names", {"limit", "remaining", "reset"})) {
          s.rls_limit_header = r.String(names, "limit").value_or(s.rls_limit_header);
          s.rls_remaining_header = r.String(names, "remaining").value_or(s.rls_remaining_header);
          s.rls_reset_header = r.String(names, "reset").value_or(s.rls_reset_header);
        }
      }
      if (auto unknown = r.String(rls, "unknown_domain")) {
        if (*unknown != "ok" && *unknown != "error") {
          r.Error(rls["unknown_domain"], "rls.unknown_domain must be ok or error");
        }
        s.rls_reject_unknown_domain = *unknown == "error";
      }
    }
  }
}

// grpc: {listen, threads, tls}
void ParseGrpc(YamlReader& r, const yaml::Node& doc, Settings& s) {
  if (const yaml::Node grpc = doc["grpc"]; grpc.IsDefined() && !grpc.IsNull()) {
    if (r.CheckMap(grpc, "grpc", {"listen", "threads", "tls"})) {
      s.grpc_listen = r.String(grpc, "listen").value_or(s.grpc_listen);
      s.grpc_threads = static_cast<int>(r.Unsigned(grpc, "threads", 256).value_or(0));
      ParseListenerTls(r, grpc, "grpc", s.grpc_tls);
    }
  }
}

// tracing: {enabled, protocol, endpoint, sampling_rate, service_name, service_namespace,
// service_instance_id, record_keys, queue_size, max_batch, export_interval, export_timeout}
void ParseTracing(YamlReader& r, const yaml::Node& doc, Settings& s) {
  const yaml::Node tracing = doc["tracing"];
  if (!tracing.IsDefined() || tracing.IsNull()) return;
  if (!r.CheckMap(tracing, "tracing",
                  {"enabled", "protocol", "endpoint", "sampling_rate", "service_name",
                   "service_namespace", "service_instance_id", "record_keys", "queue_size",
                   "max_batch", "export_interval", "export_timeout"})) {
    return;
  }
  TracingSettings& t = s.tracing;
  t.endpoint_at = r.FieldPosition(doc, "tracing");
  if (tracing["endpoint"].IsDefined()) t.endpoint_at = r.FieldPosition(tracing, "endpoint");
  t.enabled = r.Bool(tracing, "enabled").value_or(t.enabled);
  t.protocol = r.String(tracing, "protocol").value_or(t.protocol);
  if (t.protocol != "http" && t.protocol != "grpc") {
    r.Error(tracing["protocol"], "tracing.protocol must be http or grpc");
  }
  t.endpoint = r.String(tracing, "endpoint").value_or(t.endpoint);
  t.sampling_rate =
      r.Number(tracing, "sampling_rate", "tracing.sampling_rate", 0, 1).value_or(t.sampling_rate);
  t.service_name = r.String(tracing, "service_name").value_or(t.service_name);
  t.service_namespace = r.String(tracing, "service_namespace").value_or(t.service_namespace);
  t.service_instance_id = r.String(tracing, "service_instance_id").value_or(t.service_instance_id);
  t.record_keys = r.Bool(tracing, "record_keys").value_or(t.record_keys);
  const auto at_least_one = [&](const char* key, size_t& field) {
    if (const auto n = r.Unsigned(tracing, key, 1 << 20)) {
      if (*n == 0) r.Error(tracing[key], fmt::format("tracing.{} must be at least 1", key));
      field = *n;
    }
  };
  at_least_one("queue_size", t.queue_size);
  at_least_one("max_batch", t.max_batch);
  const auto above_zero = [&](const char* key, int64_t& field) {
    if (const auto d = r.Duration(tracing, key)) {
      if (*d <= 0) r.Error(tracing[key], fmt::format("tracing.{} must be above 0", key));
      field = *d;
    }
  };
  above_zero("export_interval", t.export_interval_us);
  above_zero("export_timeout", t.export_timeout_us);
}

// redis.tls: {ca_file, cert_file, key_file, server_name, skip_hostname_verification}
void ParseRedisTls(YamlReader& r, const yaml::Node& redis, Settings& s) {
  const yaml::Node tls = redis["tls"];
  if (!tls.IsDefined() || tls.IsNull()) return;
  if (!r.CheckMap(
          tls, "redis.tls",
          {"ca_file", "cert_file", "key_file", "server_name", "skip_hostname_verification"})) {
    return;
  }
  RedisTlsSettings& t = s.redis_tls.emplace();
  t.at = r.FieldPosition(redis, "tls");
  ReadFileField(r, tls, "ca_file", t.ca_file, t.ca_file_at);
  ReadFileField(r, tls, "cert_file", t.cert_file, t.cert_file_at);
  ReadFileField(r, tls, "key_file", t.key_file, t.key_file_at);
  t.server_name = r.String(tls, "server_name").value_or("");
  t.skip_hostname_verification = r.Bool(tls, "skip_hostname_verification").value_or(false);
  if (t.cert_file.empty() != t.key_file.empty()) {
    r.Error(tls, t.cert_file.empty() ? "redis.tls: key_file needs cert_file (mutual TLS)"
                                     : "redis.tls: cert_file needs key_file (mutual TLS)");
  }
}

// A sentinel's "host:port" ("[v6]:port", or a host alone: port 26379), as the client reads it.
bool IsSentinelAddress(std::string_view address) {
  std::string_view host = address, port;
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) return false;
    host = address.substr(1, close - 1);
    const std::string_view rest = address.substr(close + 1);
    if (!rest.empty() && !rest.starts_with(':')) return false;
    if (!rest.empty()) port = rest.substr(1);
    if (rest == ":") return false;
  } else if (const size_t colon = address.rfind(':'); colon != std::string_view::npos) {
    if (address.find(':') != colon) return false;
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (port.empty()) return false;
  }
  if (host.empty() || host.find_first_of("/@ ") != std::string_view::npos) return false;
  if (port.empty()) return true;
  int value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return ec == std::errc() && end == port.data() + port.size() && value >= 1 && value <= 65535;
}

// The host of a redis[s]:// URL ("" when it has none).
std::string_view UrlHost(std::string_view url) {
  url.remove_prefix(url.starts_with("rediss://") ? 9 : url.starts_with("redis://") ? 8 : 0);
  if (const size_t at = url.rfind('@'); at != std::string_view::npos) url.remove_prefix(at + 1);
  if (url.starts_with('[')) return url.substr(1, url.find(']') - 1);
  return url.substr(0, std::min(url.find(':'), url.find('/')));
}

// redis.sentinel: {master, addresses, username, password, tls}
void ParseRedisSentinel(YamlReader& r, const yaml::Node& redis, Settings& s) {
  const yaml::Node node = redis["sentinel"];
  if (!node.IsDefined() || node.IsNull()) return;
  if (!r.CheckMap(node, "redis.sentinel", {"master", "addresses", "username", "password", "tls"})) {
    return;
  }
  RedisSentinelSettings& t = s.redis_sentinel.emplace();
  t.at = r.FieldPosition(redis, "sentinel");
  t.master = r.String(node, "master").value_or("");
  if (t.master.empty()) {
    r.Error(node, "redis.sentinel needs master: the name the sentinels monitor the master by");
  } else if (t.master.find_first_of(" /@:") != std::string::npos) {
    r.Error(node["master"], fmt::format("'{}' is not a Sentinel master name", t.master));
  }
  t.addresses = r.Strings(node, "addresses").value_or(std::vector<std::string>{});
  if (t.addresses.empty()) {
    r.Error(node, "redis.sentinel needs addresses: the sentinels' host:port");
  }
  for (size_t i = 0; i < t.addresses.size(); ++i) {
    if (!IsSentinelAddress(t.addresses[i])) {
      r.Error(node["addresses"][i],
              fmt::format("bad sentinel address '{}' (host:port)", t.addresses[i]));
    }
  }
  t.username = r.String(node, "username").value_or("");
  t.password = r.String(node, "password").value_or("");
  if (!t.username.empty() && t.password.empty()) {
    r.Error(node["username"], "redis.sentinel: username needs password");
  }
  t.tls = r.Bool(node, "tls");
}

// A map of strings (node_metadata, headers), or an error.
std::map<std::string, std::string> StringMap(YamlReader& r, const yaml::Node& map, const char* key,
                                             std::string_view what) {
  std::map<std::string, std::string> out;
  const yaml::Node node = map[key];
  if (!node.IsDefined() || node.IsNull()) return out;
  if (!node.IsMap()) {
    r.Error(node, fmt::format("{} must be a map of strings", what));
    return out;
  }
  for (const yaml::Entry& entry : node.entries()) {
    if (!entry.value.IsScalar()) {
      r.Error(entry.value, fmt::format("{}: '{}' must be a string", what, entry.key.Scalar()));
      continue;
    }
    out[entry.key.Scalar()] = entry.value.Scalar();
  }
  return out;
}

// config_source: {xds: {server_url, node_id, node_metadata, headers, tls, connect_retry_interval,
// backoff, max_message_bytes, force_start}}
void ParseConfigSource(YamlReader& r, const yaml::Node& doc, Settings& s) {
  const yaml::Node source = doc["config_source"];
  if (!source.IsDefined() || source.IsNull() || !r.CheckMap(source, "config_source", {"xds"})) {
    return;
  }
  const yaml::Node node = source["xds"];
  if (!node.IsDefined() || node.IsNull() ||
      !r.CheckMap(node, "config_source.xds",
                  {"server_url", "node_id", "node_metadata", "headers", "tls",
                   "connect_retry_interval", "backoff", "max_message_bytes", "force_start"})) {
    return;
  }
  XdsSettings& x = s.xds.emplace();
  x.at = r.FieldPosition(source, "xds");
  x.server_url = r.String(node, "server_url").value_or("");
  if (x.server_url.empty()) {
    r.Error(node, "config_source.xds needs server_url: the management server's host:port");
  }
  x.node_id = r.String(node, "node_id").value_or(x.node_id);
  x.node_metadata = StringMap(r, node, "node_metadata", "config_source.xds.node_metadata");
  x.headers = StringMap(r, node, "headers", "config_source.xds.headers");
  if (const yaml::Node tls = node["tls"]; tls.IsDefined() && !tls.IsNull()) {
    if (tls.IsScalar()) {
      x.tls = r.Bool(node, "tls").value_or(false);
    } else if (r.CheckMap(tls, "config_source.xds.tls",
                          {"ca_file", "cert_file", "key_file", "server_name"})) {
      x.tls = true;
      ReadFileField(r, tls, "ca_file", x.ca_file, x.ca_file_at);
      ReadFileField(r, tls, "cert_file", x.cert_file, x.cert_file_at);
      ReadFileField(r, tls, "key_file", x.key_file, x.key_file_at);
      x.server_name = r.String(tls, "server_name").value_or("");
      if (x.cert_file.empty() != x.key_file.empty()) {
        r.Error(tls, x.cert_file.empty()
                         ? "config_source.xds.tls: key_file needs cert_file (mutual TLS)"
                         : "config_source.xds.tls: cert_file needs key_file (mutual TLS)");
      }
    }
  }
  x.connect_retry_interval_us =
      r.Duration(node, "connect_retry_interval").value_or(x.connect_retry_interval_us);
  if (const yaml::Node backoff = node["backoff"]; backoff.IsDefined() && !backoff.IsNull()) {
    if (r.CheckMap(backoff, "config_source.xds.backoff",
                   {"initial_interval", "max_interval", "factor", "jitter"})) {
      x.backoff_initial_us = r.Duration(backoff, "initial_interval").value_or(x.backoff_initial_us);
      x.backoff_max_us = r.Duration(backoff, "max_interval").value_or(x.backoff_max_us);
      x.backoff_factor = r.Number(backoff, "factor", "config_source.xds.backoff.factor", 0, 100)
                             .value_or(x.backoff_factor);
      x.backoff_jitter = r.Bool(backoff, "jitter").value_or(x.backoff_jitter);
    }
  }
  if (x.connect_retry_interval_us < 1000 || x.backoff_initial_us < 1000) {
    r.Error(node,
            "config_source.xds: connect_retry_interval and backoff.initial_interval must be "
            "at least 1ms");
  }
  x.max_message_bytes = r.Unsigned(node, "max_message_bytes", uint64_t{1} << 30).value_or(0);
  x.force_start = r.Bool(node, "force_start").value_or(false);
}

// backend: memory | redis, and redis: its connection and keys.
void ParseBackend(YamlReader& r, const yaml::Node& doc, Settings& s) {
  if (auto backend = r.String(doc, "backend")) {
    if (*backend != "memory" && *backend != "redis") {
      r.Error(doc["backend"], fmt::format("unknown backend '{}' (memory or redis)", *backend));
    }
    s.backend = *backend;
  }
  if (const yaml::Node redis = doc["redis"]; redis.IsDefined() && !redis.IsNull()) {
    if (r.CheckMap(redis, "redis",
                   {"url", "cluster", "nodes", "key_prefix", "timeout", "instances", "buckets",
                    "over_limit_cache", "lease_interval", "window_lease_life", "sync_interval",
                    "tls", "sentinel"})) {
      s.redis_url = r.String(redis, "url").value_or("");
      s.redis_cluster = r.Bool(redis, "cluster").value_or(false);
      s.redis_nodes = r.Strings(redis, "nodes").value_or(std::vector<std::string>{});
      s.redis_key_prefix = r.String(redis, "key_prefix").value_or(s.redis_key_prefix);
      s.redis_timeout_us = r.Duration(redis, "timeout").value_or(s.redis_timeout_us);
      s.local_instances = static_cast<int>(r.Unsigned(redis, "instances", 10000).value_or(1));
      if (s.local_instances < 1) r.Error(redis["instances"], "instances must be at least 1");
      s.redis_buckets = static_cast<uint32_t>(
          r.Unsigned(redis, "buckets", uint64_t{1} << 24).value_or(s.redis_buckets));
      s.redis_over_limit_cache = r.Unsigned(redis, "over_limit_cache", uint64_t{1} << 26)
                                     .value_or(s.redis_over_limit_cache);
      s.redis_lease_interval_us =
          r.Duration(redis, "lease_interval").value_or(s.redis_lease_interval_us);
      if (s.redis_lease_interval_us < 1000) {
        r.Error(redis["lease_interval"], "lease_interval must be at least 1ms");
      }
      s.redis_window_lease_life_us =
          r.Duration(redis, "window_lease_life").value_or(s.redis_window_lease_life_us);
      s.redis_sync_interval_us =
          r.Duration(redis, "sync_interval").value_or(s.redis_sync_interval_us);
      if (s.redis_sync_interval_us < 1000) {
        r.Error(redis["sync_interval"], "sync_interval must be at least 1ms");
      }
      ParseRedisTls(r, redis, s);
      ParseRedisSentinel(r, redis, s);
      // Sentinels over TLS take redis.tls too, whatever the master's scheme.
      const bool sentinels_tls = s.redis_sentinel && s.redis_sentinel->tls.value_or(false);
      // TLS is the URLs' scheme: all rediss:// or none, and redis.tls for rediss:// only.
      std::optional<bool> tls;
      const auto check_url = [&](const std::string& url, const yaml::Node& at) {
        const bool rediss = url.starts_with("rediss://");
        if (!rediss && !url.starts_with("redis://")) {
          r.Error(at,
                  fmt::format("bad Redis URL '{}' (redis[s]://[user:pass@]host:port[/db])", url));
        } else if (tls && *tls != rediss) {
          r.Error(at, fmt::format("'{}': the nodes are all rediss:// (TLS) or all redis://", url));
        } else if (!rediss && s.redis_tls && !sentinels_tls) {
          r.Error(at,
                  fmt::format("'{}' is plain TCP, and redis.tls is set: TLS needs rediss://", url));
        }
        tls = rediss;
      };
      if (!s.redis_url.empty()) check_url(s.redis_url, redis["url"]);
      for (size_t i = 0; i < s.redis_nodes.size(); ++i)
        check_url(s.redis_nodes[i], redis["nodes"][i]);
      if (s.redis_cluster && s.redis_nodes.empty() && s.redis_url.empty()) {
        r.Error(redis, "a Redis cluster needs seed nodes");
      }
      if (s.redis_sentinel) {
        if (s.redis_cluster || !s.redis_nodes.empty()) {
          r.Error(redis["sentinel"],
                  "redis.sentinel names one master: not with cluster or nodes (Sentinel and "
                  "Cluster are two ways to run Redis)");
        }
        const std::string_view host = UrlHost(s.redis_url);
        if (!s.redis_url.empty() && !s.redis_sentinel->master.empty() &&
            host != s.redis_sentinel->master) {
          r.Error(redis["url"],
                  fmt::format("with redis.sentinel, url is the master's login "
                              "(redis[s]://[user:pass@]{}[/db]): its host must be the master's "
                              "name, not '{}'",
                              s.redis_sentinel->master, host));
        }
        if (s.redis_tls && s.redis_url.empty() && !sentinels_tls) {
          r.Error(redis["tls"],
                  "redis.tls is set, and neither the master (no rediss:// url) nor the "
                  "sentinels (sentinel.tls) use TLS");
        }
      }
    }
  }
}

// store: {max_entries, on_full}
void ParseStore(YamlReader& r, const yaml::Node& doc, Settings& s) {
  if (const yaml::Node store = doc["store"]; store.IsDefined() && !store.IsNull()) {
    if (r.CheckMap(store, "store", {"max_entries", "on_full"})) {
      s.max_entries = r.Unsigned(store, "max_entries", uint64_t{1} << 32).value_or(s.max_entries);
      if (auto on_full = r.String(store, "on_full")) {
        if (auto mode = ParseOnFull(*on_full)) {
          s.on_full = *mode;
        } else {
          r.Error(store["on_full"],
                  fmt::format("unknown store.on_full '{}' (shared, deny or allow_untracked)",
                              *on_full));
        }
      }
    }
  }
}

// headers: the rate-limit header styles of HTTP answers.
void ParseHeaders(YamlReader& r, const yaml::Node& doc, Settings& s) {
  // A list of styles, or one style alone (`headers: none`).
  const yaml::Node node = doc["headers"];
  const bool one = node.IsDefined() && node.IsScalar();
  std::optional<std::vector<std::string>> headers =
      one ? std::vector<std::string>{node.Scalar()} : r.Strings(doc, "headers");
  if (headers) {
    for (size_t i = 0; i < headers->size(); ++i) {
      const std::string& h = (*headers)[i];
      if (h != "x_ratelimit" && h != "ietf" && h != "none") {
        r.Error(one ? node : node[i],
                fmt::format("unknown header style '{}' (x_ratelimit, ietf, none)", h));
      }
    }
    if (headers->size() > 1 &&
        std::find(headers->begin(), headers->end(), "none") != headers->end()) {
      r.Error(node, "headers: 'none' cannot be combined with other styles");
    }
    s.headers = *headers;
    const auto named = [&](std::string_view style) {
      return std::find(headers->begin(), headers->end(), style) != headers->end();
    };
    s.x_ratelimit_headers = named("x_ratelimit");
    s.ietf_headers = named("ietf");
  }
}

// http: the server's bounds and timeouts, and the data plane's TLS.
void ParseHttp(YamlReader& r, const yaml::Node& doc, Settings& s) {
  if (const yaml::Node http = doc["http"]; http.IsDefined() && !http.IsNull()) {
    if (r.CheckMap(http, "http",
                   {"max_header_bytes", "max_body_bytes", "max_key_bytes", "header_timeout",
                    "idle_timeout", "max_connections", "upstream_timeout", "max_delayed",
                    "shutdown_timeout", "tls"})) {
      ParseListenerTls(r, http, "http", s.http_tls);
      s.upstream_timeout_us = r.Duration(http, "upstream_timeout").value_or(s.upstream_timeout_us);
      s.max_delayed = r.Unsigned(http, "max_delayed", 1000000).value_or(s.max_delayed);
      s.header_timeout_us = r.Duration(http, "header_timeout").value_or(s.header_timeout_us);
      s.idle_timeout_us = r.Duration(http, "idle_timeout").value_or(s.idle_timeout_us);
      s.shutdown_timeout_us = r.Duration(http, "shutdown_timeout").value_or(s.shutdown_timeout_us);
      s.max_connections = r.Unsigned(http, "max_connections", 1000000).value_or(s.max_connections);
      s.max_header_bytes =
          r.Unsigned(http, "max_header_bytes", 1 << 20).value_or(s.max_header_bytes);
      s.max_body_bytes = r.Unsigned(http, "max_body_bytes", 1 << 30).value_or(s.max_body_bytes);
      s.max_key_bytes = r.Unsigned(http, "max_key_bytes", 1 << 20).value_or(s.max_key_bytes);
      if (s.max_key_bytes == 0) r.Error(http["max_key_bytes"], "max_key_bytes must be at least 1");
    }
  }
}

}  // namespace

Settings ParseSettings(YamlReader& r, const yaml::Node& doc) {
  Settings s;
  s.file = r.file();
  if (doc.IsNull()) return s;  // an empty file: all defaults
  if (!r.CheckMap(doc, "settings",
                  {"rules",
                   "listen",
                   "admin",
                   "grpc",
                   "threads",
                   "backend",
                   "redis",
                   "store",
                   "headers",
                   "http",
                   "count_denied",
                   "shadow_mode",
                   "quota_mode",
                   "near_limit_ratio",
                   "response_dynamic_metadata",
                   "unknown_domain",
                   "rls",
                   "merge_domains",
                   "config_source",
                   "state_dir",
                   "tracing"})) {
    return s;
  }
  // (In the order errors were always reported in.)
  ParseTopLevel(r, doc, s);
  ReadFileField(r, doc, "state_dir", s.state_dir, s.state_dir_at);
  ParseAdmin(r, doc, s);
  ParseRls(r, doc, s);
  ParseGrpc(r, doc, s);
  ParseBackend(r, doc, s);
  ParseStore(r, doc, s);
  ParseHeaders(r, doc, s);
  ParseHttp(r, doc, s);
  ParseConfigSource(r, doc, s);
  ParseTracing(r, doc, s);
  if (s.backend == "redis" && s.redis_url.empty() && s.redis_nodes.empty() && !s.redis_sentinel) {
    r.Error(doc["backend"], "backend redis needs redis.url, redis.nodes or redis.sentinel");
  }
  return s;
}

}  // namespace sluice::rules
