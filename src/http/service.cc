// The HTTP service's data plane: routing, /v1/check, /json, and the answer to a decision
// (status, rate-limit headers, body), with the decision metrics. Forward-auth is in
// service_auth.cc, the reverse proxy in service_proxy.cc, the admin endpoints in
// service_admin.cc.

#include "http/service.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "http/check_json.h"
#include "http/service_answers.h"

namespace sluice::http {
namespace {

uint64_t NextServiceSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

Service::Service(rules::ConfigManager* config, engine::Engine* engine, const Clock* clock,
                 std::vector<rules::AdminToken> admin_tokens)
    : config_(config),
      engine_(*engine),
      clock_(clock),
      admin_tokens_(std::move(admin_tokens)),
      upstream_(UpstreamOptions{.clock = clock}),  // the proxy's timeouts too
      serial_(NextServiceSerial()) {}

void Service::SetMetrics(metrics::Registry* registry, metrics::ServerMetrics* metrics,
                         std::function<void()> before_render) {
  registry_ = registry;
  metrics_ = metrics;
  before_render_ = std::move(before_render);
}

namespace {

// The data plane's own endpoints; in reverse proxy mode every other path is forwarded.
bool OwnPath(std::string_view path) {
  return path == "/v1/auth" || path.starts_with("/v1/auth/") || path == "/v1/check" ||
         path == "/json" || path == "/healthcheck" || path == "/v1/acquire" ||
         path == "/v1/release" || path == "/v1/renew" || path == "/v1/report" ||
         path == "/v1/reserve" || path == "/v1/settle";
}

}  // namespace

bool Service::StreamsBody(const HttpRequest& header) const {
  const std::string_view path = PathOf(header);
  if (OwnPath(path)) return false;
  const std::shared_ptr<const rules::Config> config = config_->Current();
  if (config->proxy_domain == nullptr) return false;
  // A route whose cost is a JSON field of the body reads it whole first (max_body_bytes).
  return !ReadsRequestBody(
      *config, std::string_view(header.method_string().data(), header.method_string().size()),
      path);
}

std::shared_ptr<trace::Span> Service::StartRequestSpan(const HttpRequest& request) const {
  const auto field = [&request](std::string_view name) {
    const auto it = request.find(boost::beast::string_view(name.data(), name.size()));
    return it == request.end() ? std::string_view()
                               : std::string_view(it->value().data(), it->value().size());
  };
  // Not sampled (the usual case at a low rate): nothing more is looked at or built.
  const std::optional<trace::Tracer::SampledTrace> sampled = tracer_->Sample(field("traceparent"));
  if (!sampled) return nullptr;
  const std::string_view path = PathOf(request);
  const std::string_view method(request.method_string().data(), request.method_string().size());
  // "METHOD ROUTE" for sluice's own endpoints; a proxied path may name a customer, so its span
  // is named by the method alone (OpenTelemetry's rule when there is no route template).
  const bool own = OwnPath(path);
  const std::string_view route = !own ? "" : path.starts_with("/v1/auth") ? "/v1/auth" : path;
  std::string name(method);
  if (!route.empty()) name.append(" ").append(route);
  // (tracestate is read only for a trace with a parent: one header lookup fewer for the others.)
  std::shared_ptr<trace::Span> span =
      tracer_->StartRequest(std::move(name), trace::SpanKind::kServer, *sampled,
                            sampled->parent ? field("tracestate") : std::string_view());
  span->Set("http.request.method", method);
  if (!route.empty()) span->Set("http.route", route);
  if (span->record_keys()) span->Set("url.path", path);
  return span;
}

void Service::HandleData(HttpRequest& request, const std::string& peer, HttpResponse& response,
                         Deferral& deferral) {
  // Traced: the answers sent later are on the span through CurrentSpan::Shared() (the proxy's
  // call, AnswerMaybeLater's).
  std::shared_ptr<trace::Span> span = tracer_ != nullptr ? StartRequestSpan(request) : nullptr;
  const trace::CurrentSpan scope(span.get());
  const std::string_view path = PathOf(request);
  std::shared_ptr<const rules::Config> config;
  if (!OwnPath(path)) {
    config = config_->Current();
    if (config->proxy_domain == nullptr) config.reset();
  }
  if (config != nullptr) {
    Proxy(request, peer, response, deferral, std::move(config));
  } else {
    Route(request, peer, response, deferral);
  }
  if (deferral.taken()) return;  // counted (and put on the span) when sent
  CountResponse(response);
  if (span != nullptr) SpanAnswered(*span, response);
}

void Service::CountStatus(unsigned code) {  // below 1000 (Beast keeps a status there)
  if (metrics_ == nullptr) return;
  metrics::Counter* counter = code < response_counters_.size()
                                  ? response_counters_[code].load(std::memory_order_relaxed)
                                  : nullptr;
  if (counter == nullptr) {
    const std::string text = std::to_string(code);
    const std::string_view labels[] = {text};
    counter = metrics_->http_requests->WithLabels(labels);
    // Racing threads store the same pointer; it stays valid as long as the registry.
    if (code < response_counters_.size()) {
      response_counters_[code].store(counter, std::memory_order_relaxed);
    }
  }
  counter->Inc();
}

void Service::AnswerMaybeLater(HttpResponse& response, Deferral& deferral,
                               absl::FunctionRef<void(Send)> decide) {
  if (engine_.answers_inline()) {
    // The in-memory engine answers before it returns: nothing to share with a later thread.
    decide([&response](HttpResponse answer) { response = std::move(answer); });
    return;
  }
  struct Later {
    absl::Mutex mu;
    bool returned ABSL_GUARDED_BY(mu) = false;              // decide() returned without an answer
    std::optional<HttpResponse> early ABSL_GUARDED_BY(mu);  // the answer, when it came before that
    Responder responder ABSL_GUARDED_BY(mu);
    std::shared_ptr<trace::Span> span;  // the request's, when it is traced
  };
  auto later = std::make_shared<Later>();
  later->span = trace::CurrentSpan::Shared();
  decide([this, later](HttpResponse answer) {
    absl::ReleasableMutexLock lock(&later->mu);
    if (!later->returned) {
      later->early = std::move(answer);
      return;
    }
    Responder responder = std::move(later->responder);
    lock.Release();
    CountResponse(answer);
    if (later->span != nullptr) {
      SpanAnswered(*later->span, answer);
      later->span->End();
    }
    responder.Send(std::move(answer));
  });
  absl::MutexLock lock(&later->mu);
  if (later->early) {
    response = *std::move(later->early);
    return;
  }
  later->responder = deferral.Take();
  later->returned = true;
}

void Service::Route(const HttpRequest& request, const std::string& peer, HttpResponse& response,
                    Deferral& deferral) {
  const std::string_view path = PathOf(request);
  if (path == "/v1/auth" || path.starts_with("/v1/auth/")) {
    return Auth(request, peer, response, deferral);
  }
  if (path == "/v1/check") {
    if (request.method() != beast_http::verb::post) return MethodNotAllowed(response, "POST");
    return Check(request, response, deferral);
  }
  if (path == "/json") return Json(request, response, deferral);
  if ((path == "/v1/acquire" || path == "/v1/release" || path == "/v1/renew") &&
      holds_ != nullptr) {
    if (request.method() != beast_http::verb::post) return MethodNotAllowed(response, "POST");
    if (path == "/v1/acquire") return Acquire(request, response, deferral);
    return ReleaseOrRenew(request, response, deferral, path == "/v1/renew");
  }
  if ((path == "/v1/report" || path == "/v1/reserve" || path == "/v1/settle") &&
      reservations_ != nullptr) {
    if (request.method() != beast_http::verb::post) return MethodNotAllowed(response, "POST");
    if (path == "/v1/report") return Report(request, response, deferral);
    if (path == "/v1/reserve") return Reserve(request, response, deferral);
    return Settle(request, response, deferral);
  }
  if (path == "/healthcheck") {  // envoyproxy/ratelimit's health endpoint
    return SetText(response, beast_http::status::ok, "OK");
  }
  SetJson(response, beast_http::status::not_found, R"({"error":"not found"})");
}

void Service::Check(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
  std::shared_ptr<const rules::Config> config = config_->Current();
  auto parsed = ParseCheckRequest(request.body(), config->settings.max_key_bytes);
  if (!parsed.ok()) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError(std::string(parsed.status().message())));
  }
  if (!config->settings.allow_unknown_domain && config->FindDomain(parsed->domain) == nullptr) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError(fmt::format("unknown domain '{}'", parsed->domain)));
  }
  const int64_t now_us = clock_->NowMicros();
  const int64_t start_us = clock_->MonotonicMicros();
  std::vector<engine::Request> requests;
  requests.push_back(*std::move(parsed));
  AnswerMaybeLater(response, deferral, [&](Send send) {
    std::string domain = requests.front().domain;
    engine_.CheckAllAsync(config, std::move(requests), now_us,
                          [this, config, start_us, domain = std::move(domain),
                           send = std::move(send)](std::vector<engine::Response> decisions) {
                            const engine::Response& decision = decisions.front();
                            RecordDecision(domain, decision, clock_->MonotonicMicros() - start_us);
                            HttpResponse answer;
                            SetDecision(*config, decision,
                                        decision.allowed ? beast_http::status::ok
                                                         : beast_http::status::too_many_requests,
                                        answer);
                            send(std::move(answer));
                          });
  });
}

void Service::RecordDecision(std::string_view domain, const engine::Response& decision,
                             int64_t elapsed_us) {
  if (metrics_ == nullptr) return;
  metrics_->decision_duration->Observe(elapsed_us);
  CountDecisions(domain, decision);
}

void Service::CountDecisions(std::string_view domain, const engine::Response& decision) {
  // The counter of a (domain, limit name) pair, remembered per thread in a few slots picked by
  // the names' lengths: a hit compares two short strings instead of hashing three labels and
  // probing the family, for every limit of every decision. A counter is never removed from its
  // family, so a remembered one stays valid as long as the Service (and its registry).
  struct Slot {
    uint64_t service = 0;  // serial_ of the Service that filled it; 0: empty
    const void* family = nullptr;
    std::string domain;
    std::string name;       // the configured name; an unnamed limit is told apart by its size
    uint64_t requests = 0;  // and window, and labelled "<requests>-per-<window>" (LimitName)
    int64_t window_us = 0;
    std::string label;
    metrics::Counter* counters[3] = {nullptr, nullptr, nullptr};  // denied, allowed, quota_exceeded
    metrics::Counter* near_limit = nullptr;
    metrics::Counter* reasons[7] = {};  // kReasons' order
  };
  static constexpr std::string_view kReasons[] = {"over_limit",   "shadow",         "quota",
                                                  "failure_open", "failure_closed", "failure_local",
                                                  "penalty"};
  // The backend's failure decided every limit of the request; else a limit's own verdict.
  int failure_reason = -1;
  switch (decision.backend) {
    case engine::BackendState::kFailedOpen:
      failure_reason = 3;
      break;
    case engine::BackendState::kFailedClosed:
      failure_reason = 4;
      break;
    case engine::BackendState::kLocal:
      failure_reason = 5;
      break;
    case engine::BackendState::kOk:
      break;
  }
  thread_local std::array<Slot, 8> slots;
  for (const auto& d : decision.descriptors) {
    for (const auto& limit : d.limits) {
      // A quota-mode limit over its limit is counted apart: it did not deny by itself.
      const int outcome = limit.decision.allowed ? 1 : limit.quota ? 2 : 0;
      Slot& slot = slots[(domain.size() * 7 + limit.name.size()) % slots.size()];
      if (slot.service != serial_ || slot.family != metrics_->decisions || slot.domain != domain ||
          slot.name != limit.name ||
          (limit.name.empty() &&
           (slot.requests != limit.limit.requests || slot.window_us != limit.limit.window_us))) {
        slot.service = serial_;
        slot.family = metrics_->decisions;
        slot.domain.assign(domain);
        slot.name.assign(limit.name);
        slot.requests = limit.limit.requests;
        slot.window_us = limit.limit.window_us;
        slot.label = engine::LimitName(limit);
        slot.counters[0] = slot.counters[1] = slot.counters[2] = slot.near_limit = nullptr;
        std::fill(std::begin(slot.reasons), std::end(slot.reasons), nullptr);
      }
      metrics::Counter*& counter = slot.counters[outcome];
      if (counter == nullptr) {
        static constexpr std::string_view kOutcomes[] = {"denied", "allowed", "quota_exceeded"};
        const std::string_view labels[] = {domain, slot.label, kOutcomes[outcome]};
        counter = metrics_->decisions->WithLabels(labels);
      }
      counter->Inc();
      if (limit.near_limit) {
        if (slot.near_limit == nullptr) {
          const std::string_view labels[] = {domain, slot.label};
          slot.near_limit = metrics_->near_limit->WithLabels(labels);
        }
        slot.near_limit->Inc();
      }
      const int reason = failure_reason >= 0      ? failure_reason
                         : limit.decision.allowed ? -1
                         : limit.shadow           ? 1
                         : limit.quota            ? 2
                         : limit.decision.penalty ? 6
                                                  : 0;
      if (reason >= 0) {
        metrics::Counter*& r = slot.reasons[reason];
        if (r == nullptr) {
          const std::string_view labels[] = {domain, slot.label, kReasons[reason]};
          r = metrics_->reasons->WithLabels(labels);
        }
        r->Inc();
      }
    }
  }
}

// The answer to a decision: the rate-limit headers in the configured styles, the JSON body
// (unless `body` is false).
void Service::SetDecision(const rules::Config& config, const engine::Response& decision,
                          beast_http::status status, HttpResponse& response, bool body) {
  if (decision.backend == engine::BackendState::kFailedClosed && !decision.allowed) {
    response.set(beast_http::field::retry_after, "1");
    return SetJson(response, beast_http::status::service_unavailable,
                   R"json({"error":"rate limit backend unavailable (failure_mode: closed)"})json");
  }
  AddRateLimitHeaders(config, decision, response);
  response.result(status);
  if (!body) return;
  // Appended rather than set, and rendered into the answer's own body (whose room a connection
  // keeps): every denial of forward-auth and every /v1/check answer comes here.
  response.AppendField("Content-Type", "application/json");
  response.body().clear();
  AppendCheckResponse(&response.body(), decision);
}

void Service::AddRateLimitHeaders(const rules::Config& config, const engine::Response& decision,
                                  HttpResponse& response) const {
  if (decision.backend == engine::BackendState::kFailedOpen) {
    response.set("X-RateLimit-Status", "degraded");
  } else if (decision.backend == engine::BackendState::kLocal) {
    response.set("X-RateLimit-Status", "local");
  } else if (const engine::AppliedLimit* headline = decision.Headline();
             headline != nullptr && !decision.allowed && headline->decision.penalty) {
    response.set("X-RateLimit-Status", "penalty");  // blocked by the limit's penalty
  }
  const render::HeaderStyles styles{.x_ratelimit = config.settings.x_ratelimit_headers,
                                    .ietf = config.settings.ietf_headers};
  // Appended as text, not inserted into the field set: none of these fields is in the response
  // yet, nothing reads them back, and this runs for every decision. (No limit applied, e.g. no
  // route matched: nothing is appended, not even Retry-After.)
  render::AppendRateLimitFieldLines(decision, styles, response.mutable_appended_fields());
}

void Service::Json(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
  // envoyproxy/ratelimit's JSON endpoint: the RLS messages in proto3 JSON, its status codes. The
  // RLS part is src/rls's, plugged in by SetJsonEndpoint.
  if (!json_endpoint_) {
    return SetJson(response, beast_http::status::not_found, R"({"error":"not found"})");
  }
  JsonCall call{.body = request.body(),
                .engine = &engine_,
                .config = config_,
                .clock = clock_,
                .record_decision = [this](std::string_view domain, const engine::Response& decision,
                                          int64_t elapsed_us) {
                  RecordDecision(domain, decision, elapsed_us);
                }};
  AnswerMaybeLater(response, deferral, [&](Send send) {
    json_endpoint_(std::move(call), [send = std::move(send)](JsonAnswer result) {
      HttpResponse answer;
      answer.result(static_cast<beast_http::status>(result.status));
      answer.set(beast_http::field::content_type,
                 std::string(result.content_type.data(), result.content_type.size()));
      if (result.nosniff) answer.set("X-Content-Type-Options", "nosniff");
      answer.body() = std::move(result.body);
      send(std::move(answer));
    });
  });
}

}  // namespace sluice::http
