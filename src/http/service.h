// The HTTP endpoints of `sluice serve`: the data plane and the admin API, on top of HttpServer.
//
//   data plane: POST /v1/check (sluice's JSON API), POST /json (envoyproxy/ratelimit's),
//               any method /v1/auth[/original/path] (forward-auth), GET /healthcheck;
//               in reverse proxy mode (some domain has `http.upstream`) every other path is
//               decided by the `http:` routes and forwarded upstream (service_proxy.cc)
//   admin:      GET /healthz, GET /readyz, GET /v1/rules, POST /v1/reload, GET /metrics,
//               GET|DELETE /v1/limits?domain=D&descriptors=k=v,...,
//               GET /v1/top?domain=D&by=denied|requests&window=1m|5m|15m&limit=N
//
// Handlers read the current config snapshot per request and never block. Safe for concurrent use.

#ifndef SLUICE_HTTP_SERVICE_H_
#define SLUICE_HTTP_SERVICE_H_

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "backend/holds.h"
#include "backend/reservations.h"
#include "engine/engine.h"
#include "engine/holds.h"
#include "headers/rate_limit_headers.h"
#include "http/http_routes.h"
#include "http/json_endpoint.h"
#include "http/transport/server.h"
#include "http/transport/upstream_client.h"
#include "metrics/registry.h"
#include "metrics/server_metrics.h"
#include "rules/admin_access.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"
#include "trace/tracer.h"

namespace sluice::http {

struct ProxySettlement;  // a proxied request's costs to settle from its answer (service_proxy.cc)

class Service {
 public:
  // Nothing is owned; everything must outlive the service. `admin_tokens` empty: no auth.
  // `engine` decides (the process's one engine, shared with the other frontends).
  Service(rules::ConfigManager* config, engine::Engine* engine, const Clock* clock,
          std::vector<rules::AdminToken> admin_tokens);

  // Serves POST /v1/acquire, /v1/release and /v1/renew with `holds` (not owned; the concurrency
  // limits' holds). Call before serving; without it, they are not found.
  void SetHolds(backend::Holds* holds) { holds_ = holds; }

  // Serves POST /v1/report, /v1/reserve and /v1/settle with `reservations` (not owned; where
  // reservations wait to be settled). Call before serving; without it, they are not found.
  void SetReservations(backend::Reservations* reservations) { reservations_ = reservations; }

  // Traces the data plane's requests with `tracer` (not owned; null, the default: none): a span
  // per request, a child of its `traceparent` header, with the decision's spans below it and, in
  // reverse proxy mode, the upstream call's (whose request carries this trace on). Call before
  // serving.
  void SetTracer(trace::Tracer* tracer) { tracer_ = tracer; }

  // Serves /v1/overrides from `book` (not owned; the engine's, which must be set on it too).
  // Call before serving; without one, /v1/overrides is not found.
  void SetOverrideBook(rules::OverrideBook* book) { override_book_ = book; }

  // The backend's state for /readyz: whether it can decide now, and a line saying so.
  struct BackendHealth {
    bool usable = true;
    std::string detail;  // e.g. "redis 127.0.0.1:6379: connected"
  };
  void SetBackendHealth(std::function<BackendHealth()> health) {
    backend_health_ = std::move(health);
  }

  // Serves POST /json with `endpoint` (src/rls's protocol; see json_endpoint.h). Call before
  // serving; without one, /json is not found.
  void SetJsonEndpoint(JsonEndpoint endpoint) { json_endpoint_ = std::move(endpoint); }

  // Enables GET /metrics on the admin port and the counting of decisions and responses.
  // `before_render` runs before each scrape (e.g. to copy the server's connection counts).
  // Not owned; must outlive the service. Call before serving.
  void SetMetrics(metrics::Registry* registry, metrics::ServerMetrics* metrics,
                  std::function<void()> before_render);

  // `deferral`: data-plane answers that wait on a backend are sent through it.
  // Counts a decision made elsewhere (the gRPC port) in the metrics, as the HTTP paths do.
  void RecordDecision(std::string_view domain, const engine::Response& decision,
                      int64_t elapsed_us);

  void HandleData(HttpRequest& request, const std::string& peer, HttpResponse& response,
                  Deferral& deferral);
  // For the data listener's `stream_body`: whether a request's body is streamed (to the
  // upstream, in reverse proxy mode) rather than read whole before HandleData.
  bool StreamsBody(const HttpRequest& header) const;
  void HandleAdmin(const HttpRequest& request, const std::string& peer, HttpResponse& response,
                   Deferral& deferral);
  // A listener of the metrics alone (serve --envoy-env's PROMETHEUS_ADDR): `path` answers what
  // the admin port's /metrics does, every other path is not found.
  void HandleMetrics(const HttpRequest& request, std::string_view path, HttpResponse& response);
  // Counts a data-plane answer in sluice_http_requests_total. HandleData counts its own; the
  // data listener's `server_answered` brings those the server wrote itself (a request it could
  // not read: 400, 413, 431).
  void CountStatus(unsigned code);

  // Closes the reverse proxy's idle upstream connections. Call after the HttpServer stopped
  // running and before it is destroyed (they live on its io_contexts).
  void CloseUpstreams() { upstream_.CloseIdle(); }
  // Ends the reverse proxy's requests still in flight, and refuses new ones, for the shutdown
  // deadline (HttpServer::OnShutdownDeadline): one held for a shaping delay or waiting for its
  // upstream is answered 503, an answer still streaming is cut. From any thread.
  void CancelUpstreams();
  const UpstreamClient& upstream_client() const { return upstream_; }

 private:
  // Receives the finished answer: now, or later from the backend's thread.
  using Send = std::function<void(HttpResponse)>;
  // Runs `decide` (before returning; it is not kept), which must call its Send exactly once:
  // before returning (the answer goes into `response`) or later (through `deferral`).
  void AnswerMaybeLater(HttpResponse& response, Deferral& deferral,
                        absl::FunctionRef<void(Send)> decide);
  void CountResponse(const HttpResponse& response) { CountStatus(response.result_int()); }
  // The span of a data-plane request, or null when it is not traced (service.cc).
  std::shared_ptr<trace::Span> StartRequestSpan(const HttpRequest& request) const;
  void Readyz(HttpResponse& response);
  void RenderMetrics(HttpResponse& response);

  struct ProxyCall;
  // The `http:` routes' decision over every domain, as one (forward-auth and the proxy).
  struct RouteDecision {
    // The decision over every domain, always one response: the engine's own when one domain
    // applied (not moved out of the list it came in), else their Combine().
    absl::InlinedVector<engine::Response, 1> responses;
    const engine::Response& combined() const { return responses.front(); }
    engine::Response& combined() { return responses.front(); }
    int status = 200;  // 200, or the deny status of the first domain that denied
  };
  // Decides `checks` (a request per domain, with its http: section) on whichever store
  // decides; `done` runs once, perhaps on the backend's thread. With `consumed` (which must
  // live until `done`), what an admitted request consumed is recorded there for a refund.
  void DecideRoutes(std::shared_ptr<const rules::Config> config, RouteChecks checks,
                    engine::Refundable* consumed, std::function<void(RouteDecision)> done);
  // The same, on the in-memory engine only (no remote store), answered before it returns.
  RouteDecision DecideRoutesNow(const rules::Config& config, RouteChecks& checks,
                                engine::Refundable* consumed);
  // Forward-auth's answer to a route decision.
  void SetAuthAnswer(const rules::Config& config, const RouteDecision& decision,
                     HttpResponse& response);
  // Completes a route decision whose `responses` hold the engine's answers (one per domain,
  // `domains` their names): counts them, sets the status and combines them into one. `start_us`:
  // the clock's monotonic time when the decision began, for its latency.
  void Summarize(std::span<const std::string_view> domains,
                 std::span<const rules::HttpSection* const> sections, int64_t start_us,
                 RouteDecision& out);
  void Proxy(HttpRequest& request, const std::string& peer, HttpResponse& response,
             Deferral& deferral, std::shared_ptr<const rules::Config> config);
  void ProxyDecided(std::shared_ptr<ProxyCall> call, RouteDecision decided);
  // Answers a proxied request that is not forwarded (denied, refused, cancelled): counted, on its
  // span, sent.
  void SendProxyAnswer(ProxyCall& call, HttpResponse response);
  // Admitted by the rates: takes the concurrency limits' holds (if any apply), then shapes or
  // forwards; a refused hold answers 429 and gives back what the request consumed.
  void ProxyAdmitted(std::shared_ptr<ProxyCall> call, engine::Response decision);
  void ProxyHeld(std::shared_ptr<ProxyCall> call, engine::Response decision);
  void Forward(std::shared_ptr<ProxyCall> call);
  void ProxyAnswered(const std::shared_ptr<ProxyCall>& call, UpstreamResult result);
  // The settlement of `call`'s reserved costs from its upstream's `answer` (a rate_limits
  // entry's cost.settle), or null when none is to be settled (service_proxy.cc).
  std::shared_ptr<ProxySettlement> Settlement(const ProxyCall& call, const HttpResponse& answer);
  // Adds a call about to wait out a shaping delay to those CancelUpstreams() ends; false once
  // CancelUpstreams() was called.
  bool TrackDelayed(const std::shared_ptr<ProxyCall>& call);
  void CountProxy(std::string_view outcome);
  void AddRateLimitHeaders(const rules::Config& config, const engine::Response& decision,
                           HttpResponse& response) const;

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
  void Top(const HttpRequest& request, HttpResponse& response, Deferral& deferral);
  // GET /v1/explain?domain=D&descriptors=...: engine::Explain's text.
  void ExplainKey(const HttpRequest& request, HttpResponse& response);
  // GET /ui (the operator console's page) and its script and style; false for any other path.
  static bool ServeConsole(std::string_view path, HttpResponse& response);
  // Whether the request carries an admin token (or none is needed), with the token's name in
  // `who` ("" when none is needed); otherwise `response` is the refusal.
  bool Authorized(const HttpRequest& request, HttpResponse& response,
                  std::string* who = nullptr) const;
  // Counts an acquisition of `targets` in sluice_concurrency_requests_total: every one granted,
  // or the one that refused.
  void CountHolds(const engine::HoldTargets& targets, const backend::Acquisition& got);
  // POST /v1/acquire, and /v1/release or /v1/renew (service_holds.cc).
  void Acquire(const HttpRequest& request, HttpResponse& response, Deferral& deferral);
  void ReleaseOrRenew(const HttpRequest& request, HttpResponse& response, Deferral& deferral,
                      bool renew);
  // POST /v1/report, /v1/reserve and /v1/settle (service_costs.cc).
  void Report(const HttpRequest& request, HttpResponse& response, Deferral& deferral);
  void Reserve(const HttpRequest& request, HttpResponse& response, Deferral& deferral);
  void Settle(const HttpRequest& request, HttpResponse& response, Deferral& deferral);
  // GET, PUT and DELETE /v1/overrides (service_overrides.cc).
  void Overrides(const HttpRequest& request, HttpResponse& response, Deferral& deferral);

  rules::ConfigManager* config_;
  engine::Engine& engine_;
  const Clock* clock_;
  const std::vector<rules::AdminToken> admin_tokens_;
  rules::OverrideBook* override_book_ = nullptr;
  trace::Tracer* tracer_ = nullptr;
  backend::Holds* holds_ = nullptr;
  backend::Reservations* reservations_ = nullptr;
  metrics::Registry* registry_ = nullptr;
  metrics::ServerMetrics* metrics_ = nullptr;
  std::function<void()> before_render_;
  std::function<BackendHealth()> backend_health_;
  JsonEndpoint json_endpoint_;
  UpstreamClient upstream_;
  std::atomic<size_t> delayed_{0};  // proxied requests waiting out a leaky_bucket delay
  // Those requests, for CancelUpstreams(); expired entries are dropped every so often.
  absl::Mutex delayed_mu_;
  std::vector<std::weak_ptr<ProxyCall>> delayed_calls_ ABSL_GUARDED_BY(delayed_mu_);
  size_t delayed_since_prune_ ABSL_GUARDED_BY(delayed_mu_) = 0;
  bool proxy_cancelled_ ABSL_GUARDED_BY(delayed_mu_) = false;
  // metrics_->http_requests' child per status code, looked up on its first answer.
  std::array<std::atomic<metrics::Counter*>, 1000> response_counters_{};
  // Tells this Service's entries in the per-thread cache of decision counters (CountDecisions)
  // from those of a Service that lived before at the same address.
  const uint64_t serial_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVICE_H_
