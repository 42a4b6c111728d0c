// The HTTP service's forward-auth endpoint (/v1/auth) and the decision of the `http:` routes it
// shares with the reverse proxy (service_proxy.cc).

#include <iterator>

#include "absl/container/inlined_vector.h"
#include "http/check_json.h"
#include "http/http_routes.h"
#include "http/service.h"
#include "http/service_answers.h"

namespace sluice::http {

// Forward-auth (nginx auth_request, Traefik ForwardAuth, Envoy ext_authz over HTTP): the
// original request is described by X-Original-URI / X-Forwarded-Uri and X-Original-Method /
// X-Forwarded-Method, else by the path after /v1/auth (ext_authz's path_prefix) and this
// request's own method. Every domain with an `http:` section must allow it; all are decided as
// one (nothing is consumed unless all allow).
void Service::Auth(const HttpRequest& request, const std::string& peer, HttpResponse& response,
                   Deferral& deferral) {
  // The first of two header fields present.
  const auto either = [&](std::string_view a,
                          std::string_view b) -> std::optional<std::string_view> {
    auto it = request.find(a);
    if (it == request.end()) it = request.find(b);
    if (it == request.end()) return std::nullopt;
    return std::string_view(it->value().data(), it->value().size());
  };
  const std::string_view method = either("X-Original-Method", "X-Forwarded-Method")
                                      .value_or(std::string_view(request.method_string().data(),
                                                                 request.method_string().size()));
  std::string_view uri;
  if (auto original = either("X-Original-URI", "X-Forwarded-Uri")) {
    uri = *original;
  } else {
    uri = std::string_view(request.target().data(), request.target().size()).substr(8);
    if (uri.empty() || uri.front() == '?') uri = "/";
  }
  const std::string_view path = uri.substr(0, uri.find('?'));

  std::shared_ptr<const rules::Config> config = config_->Current();
  auto checks = BuildRouteChecks(
      *config, {.method = method, .path = path, .peer = peer, .headers = &request});
  if (!checks.ok()) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError(std::string(checks.status().message())));
  }
  // No route applies: allowed, and nothing to decide, count or report (what DecideRoutes would
  // answer too, without its round through the engine).
  if (checks->requests.empty()) return response.result(beast_http::status::ok);
  if (engine_.answers_inline()) {
    // Decided before returning: the answer is written straight into `response`, with no
    // callback to allocate (this is the busiest path).
    return SetAuthAnswer(*config, DecideRoutesNow(*config, *checks, nullptr), response);
  }
  AnswerMaybeLater(response, deferral, [&](Send send) {
    DecideRoutes(config, *std::move(checks), nullptr,
                 [this, config, send = std::move(send)](RouteDecision decision) {
                   HttpResponse answer;
                   SetAuthAnswer(*config, decision, answer);
                   send(std::move(answer));
                 });
  });
}

void Service::SetAuthAnswer(const rules::Config& config, const RouteDecision& decision,
                            HttpResponse& response) {
  // An allowed request gets an empty 200: proxies act on the status and the headers and drop
  // the body (nginx auth_request always does). A denial keeps its JSON body.
  SetDecision(config, decision.combined(), static_cast<beast_http::status>(decision.status),
              response, /*body=*/decision.status != 200);
}

Service::RouteDecision Service::DecideRoutesNow(const rules::Config& config, RouteChecks& checks,
                                                engine::Refundable* consumed) {
  const int64_t now_us = clock_->NowMicros();
  const int64_t start_us = clock_->MonotonicMicros();
  absl::InlinedVector<std::string_view, 2> domains;
  for (const engine::Request& r : checks.requests) domains.push_back(r.domain);
  // The engine answers straight into the decision: no list of answers to allocate and move.
  RouteDecision out;
  out.responses.resize(checks.requests.size());
  engine_.CheckAll(config, std::span(checks.requests.data(), checks.requests.size()),
                   std::span(out.responses.data(), out.responses.size()), now_us, consumed);
  Summarize(domains, checks.sections, start_us, out);
  return out;
}

void Service::DecideRoutes(std::shared_ptr<const rules::Config> config, RouteChecks checks,
                           engine::Refundable* consumed, std::function<void(RouteDecision)> done) {
  if (engine_.answers_inline()) return done(DecideRoutesNow(*config, checks, consumed));
  const int64_t now_us = clock_->NowMicros();
  const int64_t start_us = clock_->MonotonicMicros();
  // The requests go to the engine; the answer needs only their domains.
  std::vector<std::string> domains;
  for (const engine::Request& r : checks.requests) domains.push_back(r.domain);
  std::vector<engine::Request> requests(std::make_move_iterator(checks.requests.begin()),
                                        std::make_move_iterator(checks.requests.end()));
  engine_.CheckAllAsync(
      std::move(config), std::move(requests), now_us,
      [this, domains = std::move(domains), sections = std::move(checks.sections), start_us,
       done = std::move(done)](std::vector<engine::Response> decisions) {
        const std::vector<std::string_view> names(domains.begin(), domains.end());
        RouteDecision out;
        out.responses.assign(std::make_move_iterator(decisions.begin()),
                             std::make_move_iterator(decisions.end()));
        Summarize(names, sections, start_us, out);
        done(std::move(out));
      },
      consumed);
}

void Service::Summarize(std::span<const std::string_view> domains,
                        std::span<const rules::HttpSection* const> sections, int64_t start_us,
                        RouteDecision& out) {
  auto& decisions = out.responses;
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (metrics_ != nullptr) CountDecisions(domains[i], decisions[i]);
    if (out.status != 200) continue;
    for (const auto& d : decisions[i].descriptors) {
      if (d.code == engine::DescriptorResult::Code::kOverLimit)
        out.status = sections[i]->deny_status;
    }
  }
  if (metrics_ != nullptr && !decisions.empty()) {
    metrics_->decision_duration->Observe(clock_->MonotonicMicros() - start_us);
  }
  if (decisions.size() != 1) {
    engine::Response combined = engine::Combine(std::span(decisions.data(), decisions.size()));
    decisions.clear();
    decisions.push_back(std::move(combined));
  }
  if (!out.combined().allowed && out.status == 200) out.status = 429;
}

}  // namespace sluice::http
