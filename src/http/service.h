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
  // `remote`: the backend that decides (Redis); null: `store` does.
  Service(rules::ConfigManager* config, store::MemoryStore* store, const Clock* clock,
          std::string admin_token, engine::RemoteStore* remote = nullptr);

  // The backend's state for /readyz: whether it can decide now, and a line saying so.
  struct BackendHealth {
    bool usable = true;
    std::string detail;  // e.g. "redis 127.0.0.1:6379: connected"
  };
  void SetBackendHealth(std::function<BackendHealth()> health) { backend_health_ = std::move(health); }

  // Enables GET /metrics on the admin port and the counting of decisions and responses.
  // `before_render` runs before each scrape (e.g. to copy the server's connection counts).
  // Not owned; must outlive the service. Call before serving.
  void SetMetrics(Registry* registry, ServerMetrics* metrics, std::function<void()> before_render);

  // `deferral`: data-plane answers that wait on a backend are sent through it.
  void HandleData(HttpRequest& request, const std::string& peer, HttpResponse& response,
                  Deferral& deferral);
  void HandleAdmin(const HttpRequest& request, const std::string& peer, HttpResponse& response,
                   Deferral& deferral);

 private:
  // Receives the finished answer: now, or later from the backend's thread.
  using Send = std::function<void(HttpResponse)>;
  // Runs `decide`, which must call its Send exactly once: before returning (the answer goes into
  // `response`) or later (through `deferral`).
  void AnswerMaybeLater(HttpResponse& response, Deferral& deferral,
                        const std::function<void(Send)>& decide);
  void CountResponse(const HttpResponse& response);
  void Readyz(HttpResponse& response);

  void Route(const HttpRequest& request, const std::string& peer, HttpResponse& response,
             Deferral& deferral);
  void Check(const HttpRequest& request, HttpResponse& response, Deferral& deferral);
  void Auth(const HttpRequest& request, const std::string& peer, HttpResponse& response,
            Deferral& deferral);
  void CountDecisions(std::string_view domain, const engine::Response& decision);
  void SetDecision(const rules::Config& config, const engine::Response& decision,
                   beast_http::status status, HttpResponse& response, bool body = true);
  void Json(const HttpRequest& request, HttpResponse& response, Deferral& deferral);
  void Limits(const HttpRequest& request, HttpResponse& response, Deferral& deferral);
  bool Authorized(const HttpRequest& request, HttpResponse& response) const;

  rules::ConfigManager* config_;
  store::MemoryStore* store_;
  engine::Engine engine_;
  const Clock* clock_;
  const std::string admin_token_;
  Registry* registry_ = nullptr;
  ServerMetrics* metrics_ = nullptr;
  std::function<void()> before_render_;
  std::function<BackendHealth()> backend_health_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVICE_H_
