// From an HTTP request to engine requests, by the `http:` sections of the domains (Envoy's route
// `rate_limits` vocabulary; docs/configuration.md). Used by forward-auth (/v1/auth) and by the
// reverse proxy.
//
// For every domain with an `http:` section, the first route that matches the request's path
// (exact `path`, else `prefix`) and method gives one engine request for that domain; each of the
// route's `rate_limits` items gives one descriptor, its actions giving the entries in order. A
// `request_headers` action whose header is absent skips that descriptor only (as Envoy does).
// A domain whose routes all miss adds nothing. The client address for `remote_address` is the
// peer, unless the peer is one of the domain's `trusted_proxies`: then X-Forwarded-For is read
// from the right, and the first address that is not a trusted proxy is the client.
//
// Pure functions of their arguments; safe for concurrent use.

#ifndef SLUICE_HTTP_HTTP_ROUTES_H_
#define SLUICE_HTTP_HTTP_ROUTES_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "http/transport/server.h"
#include "rules/config.h"

namespace sluice::http {

// What is known of the request being limited.
struct OriginalRequest {
  std::string_view method;               // "GET"
  std::string_view path;                 // without the query
  std::string_view peer;                 // the address the connection came from
  const HttpRequest* headers = nullptr;  // request headers (and X-Forwarded-For)
};

// The engine requests for `original`, one per domain that applies, with the `http:` section of
// each (same order). InvalidArgument when an entry value is longer than http.max_key_bytes.
// Room for one domain inline: the usual config is checked without allocating these lists.
struct RouteChecks {
  absl::InlinedVector<engine::Request, 1> requests;
  absl::InlinedVector<const rules::HttpSection*, 1> sections;
  // The descriptors whose rate_limits entry has a `cost:` (their hits_addend is its reserve, read
  // from the request): which request, which descriptor of it, and the cost (in the config).
  struct Costed {
    size_t request = 0;
    size_t descriptor = 0;
    const rules::RouteCost* cost = nullptr;
  };
  std::vector<Costed> costed;
};
absl::StatusOr<RouteChecks> BuildRouteChecks(const rules::Config& config,
                                             const OriginalRequest& original);

// Whether a route that `method` and `path` match reads the request's body for a cost (a JSON
// field): then the body is read whole before the request is decided.
bool ReadsRequestBody(const rules::Config& config, std::string_view method, std::string_view path);

// The client address of a request that came from `peer` with the X-Forwarded-For values
// `forwarded` (every X-Forwarded-For field, in order), believing only `trusted` proxies.
std::string ClientAddress(std::string_view peer, const std::vector<std::string_view>& forwarded,
                          const std::vector<rules::Cidr>& trusted);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_HTTP_ROUTES_H_
