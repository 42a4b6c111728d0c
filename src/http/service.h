// The HTTP endpoints of `sluice serve`: the data plane and the admin API, on top of HttpServer.
//
//   data plane: POST /v1/check (sluice's JSON API), POST /json (envoyproxy/ratelimit's),
//               any method /v1/auth[/original/path] (forward-auth), GET /healthcheck
//   admin:      GET /healthz, GET /readyz, GET /v1/rules, POST /v1/reload, GET /metrics,
//               GET|DELETE /v1/limits?domain=D&descriptors=k=v,...
//
// Handlers read the current config snapshot per request and never block. Safe for concurrent use.

#ifndef SLUICE_HTTP_SERVICE_H_
#define SLUICE_HTTP_SERVICE_H_

#include <functional>
#include <string>

#include "engine/engine.h"
#include "http/metrics.h"
#include "http/rate_limit_headers.h"
#include "http/server.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"
#include "store/memory_store.h"

namespace sluice::http {

class Service {
 public:
  // Nothing is owned; everything must outlive the service. `admin_token` empty: no auth.
  Service(rules::ConfigManager* config, store::MemoryStore* store, const Clock* clock,
          std::string admin_token);

  // Enables GET /metrics on the admin port and the counting of decisions and responses.
  // `before_render` runs before each scrape (e.g. to copy the server's connection counts).
  // Not owned; must outlive the service. Call before serving.
  void SetMetrics(Registry* registry, ServerMetrics* metrics, std::function<void()> before_render);

  // `deferral`: data-plane answers that wait on a backend are sent through it.
  void HandleData(HttpRequest& request, const std::string& peer, HttpResponse& response,
                  Deferral& deferral);
  void HandleAdmin(const HttpRequest& request, const std::string& peer, HttpResponse& response);

 private:
  void Route(const HttpRequest& request, const std::string& peer, HttpResponse& response);
  void Check(const HttpRequest& request, HttpResponse& response);
  void Auth(const HttpRequest& request, const std::string& peer, HttpResponse& response);
  void CountDecisions(std::string_view domain, const engine::Response& decision);
  void SetDecision(const rules::Config& config, const engine::Response& decision,
                   beast_http::status status, HttpResponse& response);
  void Json(const HttpRequest& request, HttpResponse& response);
  void Limits(const HttpRequest& request, HttpResponse& response);
  bool Authorized(const HttpRequest& request, HttpResponse& response) const;

  rules::ConfigManager* config_;
  store::MemoryStore* store_;
  engine::Engine engine_;
  const Clock* clock_;
  const std::string admin_token_;
  Registry* registry_ = nullptr;
  ServerMetrics* metrics_ = nullptr;
  std::function<void()> before_render_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVICE_H_
