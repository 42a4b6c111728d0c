// The HTTP endpoints of `sluice serve`: the data plane and the admin API, on top of HttpServer.
//
//   data plane: POST /v1/check (sluice's JSON API), POST /json (envoyproxy/ratelimit's),
//               any method /v1/auth[/original/path] (forward-auth), GET /healthcheck;
//               in reverse proxy mode (some domain has `http.upstream`) every other path is
//               decided by the `http:` routes and forwarded upstream (service_proxy.cc)
//   admin:      GET /healthz, GET /readyz, GET /v1/rules, POST /v1/reload, GET /metrics,
//               GET|DELETE /v1/limits?domain=D&descriptors=k=v,...
//
// Handlers read the current config snapshot per request and never block. Safe for concurrent use.

#ifndef SLUICE_HTTP_SERVICE_H_
#define SLUICE_HTTP_SERVICE_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "http/metrics.h"
#include "http/rate_limit_headers.h"
#include "http/server.h"
#include "http/upstream_client.h"
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

  // Closes the reverse proxy's idle upstream connections. Call after the HttpServer stopped
  // running and before it is destroyed (they live on its io_contexts).
  void CloseUpstreams() { upstream_.CloseIdle(); }
  const UpstreamClient& upstream_client() const { return upstream_; }

 private:
  struct ProxyCall;
  // The `http:` routes' decision over every domain, as one (forward-auth and the proxy).
  struct RouteDecision {
    engine::Response combined;
    int status = 200;  // 200, or the deny status of the first domain that denied
  };
  RouteDecision DecideRoutes(const rules::Config& config, const std::vector<engine::Request>& requests,
                             const std::vector<const rules::HttpSection*>& sections,
                             engine::Consumption* consumed);
  void Proxy(HttpRequest& request, const std::string& peer, HttpResponse& response,
             Deferral& deferral, std::shared_ptr<const rules::Config> config);
  void Forward(std::shared_ptr<ProxyCall> call);
  void ProxyAnswered(const std::shared_ptr<ProxyCall>& call, UpstreamResult result);
  void CountProxy(std::string_view outcome);
  void CountResponse(int status);
  void AddRateLimitHeaders(const rules::Config& config, const engine::Response& decision,
                           HttpResponse& response) const;
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
  UpstreamClient upstream_;
  std::atomic<size_t> delayed_{0};  // proxied requests waiting out a leaky_bucket delay
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVICE_H_
