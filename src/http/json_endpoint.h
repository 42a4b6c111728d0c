// POST /json: envoyproxy/ratelimit's endpoint, an RLS ShouldRateLimit call in proto3 JSON carried
// over HTTP.
//
// The protocol and its codec are src/rls's; HTTP only carries the bytes. So that src/http and
// src/rls never include each other, the HTTP service reaches the RLS part through this one
// function type, and `sluice serve` plugs src/rls's in (cli/rls_json_endpoint.h). A service
// without one answers /json as any unknown path (404).

#ifndef SLUICE_HTTP_JSON_ENDPOINT_H_
#define SLUICE_HTTP_JSON_ENDPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"

namespace sluice::http {

// The answer to a /json request, ready to send.
struct JsonAnswer {
  int status = 200;
  std::string_view content_type;  // static storage
  std::string body;
  bool nosniff = false;  // also send `X-Content-Type-Options: nosniff`
};

// What the service hands the endpoint for one request. `body` is valid until the endpoint
// returns; the rest is the service's and outlives every request.
struct JsonCall {
  std::string_view body;
  engine::Engine* engine = nullptr;
  // The config snapshot and the decision's time are taken once the body has parsed.
  const rules::ConfigManager* config = nullptr;
  const Clock* clock = nullptr;
  // Told of the engine's decision and of the µs since that time (for metrics).
  std::function<void(std::string_view domain, const engine::Response& decision, int64_t elapsed_us)>
      record_decision;
};

// Answers one /json request: `done` runs exactly once with the answer, on any thread, perhaps
// before the endpoint returns.
using JsonEndpoint = std::function<void(JsonCall call, std::function<void(JsonAnswer)> done)>;

}  // namespace sluice::http

#endif  // SLUICE_HTTP_JSON_ENDPOINT_H_
