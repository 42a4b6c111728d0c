#include "http/service.h"

#include <optional>

#include "fmt/format.h"
#include "http/check_json.h"
#include "http/http_routes.h"
#include "rls/codec.h"

namespace sluice::http {
namespace {

void SetJson(HttpResponse& response, beast_http::status status, std::string body) {
  response.result(status);
  response.set(beast_http::field::content_type, "application/json");
  response.body() = std::move(body);
}

void SetText(HttpResponse& response, beast_http::status status, std::string body) {
  response.result(status);
  response.set(beast_http::field::content_type, "text/plain; charset=utf-8");
  response.body() = std::move(body);
}

// The path of a request target, without the query.
std::string_view PathOf(const HttpRequest& request) {
  const std::string_view target(request.target().data(), request.target().size());
  return target.substr(0, target.find('?'));
}

std::string JsonString(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

// The value of query parameter `name`, percent-decoded ('+' is a space); nullopt if absent.
std::optional<std::string> QueryParam(const HttpRequest& request, std::string_view name) {
  const std::string_view target(request.target().data(), request.target().size());
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest.remove_prefix(amp == std::string_view::npos ? rest.size() : amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view raw = eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    std::string value;
    for (size_t i = 0; i < raw.size(); ++i) {
      const auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
        value += static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
        i += 2;
      } else {
        value += raw[i] == '+' ? ' ' : raw[i];
      }
    }
    return value;
  }
  return std::nullopt;
}

void MethodNotAllowed(HttpResponse& response, const char* allowed) {
  response.set(beast_http::field::allow, allowed);
  SetJson(response, beast_http::status::method_not_allowed,
          fmt::format("{{\"error\":\"method not allowed; use {}\"}}", allowed));
}

}  // namespace

Service::Service(rules::ConfigManager* config, store::MemoryStore* store, const Clock* clock,
                 std::string admin_token)
    : config_(config), store_(store), engine_(store), clock_(clock),
      admin_token_(std::move(admin_token)) {}

void Service::SetMetrics(Registry* registry, ServerMetrics* metrics,
                         std::function<void()> before_render) {
  registry_ = registry;
  metrics_ = metrics;
  before_render_ = std::move(before_render);
}

void Service::HandleData(HttpRequest& request, const std::string& peer, HttpResponse& response,
                         Deferral& deferral) {
  const std::string_view path = PathOf(request);
  const bool own = path == "/v1/auth" || path.starts_with("/v1/auth/") || path == "/v1/check" ||
                   path == "/json" || path == "/healthcheck";
  if (!own) {
    std::shared_ptr<const rules::Config> config = config_->Current();
    if (config->proxy_domain != nullptr) {
      Proxy(request, peer, response, deferral, std::move(config));
      if (!deferral.taken()) CountResponse(response.result_int());  // else counted when sent
      return;
    }
  }
  Route(request, peer, response);
  CountResponse(response.result_int());
}

void Service::CountResponse(int status) {
  if (metrics_ == nullptr) return;
  const std::string code = std::to_string(status);
  const std::string_view labels[] = {code};
  metrics_->http_requests->WithLabels(labels)->Inc();
}

void Service::Route(const HttpRequest& request, const std::string& peer, HttpResponse& response) {
  const std::string_view path = PathOf(request);
  if (path == "/v1/auth" || path.starts_with("/v1/auth/")) return Auth(request, peer, response);
  if (path == "/v1/check") {
    if (request.method() != beast_http::verb::post) return MethodNotAllowed(response, "POST");
    return Check(request, response);
  }
  if (path == "/json") return Json(request, response);
  if (path == "/healthcheck") {  // envoyproxy/ratelimit's health endpoint
    return SetText(response, beast_http::status::ok, "OK");
  }
  SetJson(response, beast_http::status::not_found, R"({"error":"not found"})");
}

void Service::Check(const HttpRequest& request, HttpResponse& response) {
  const std::shared_ptr<const rules::Config> config = config_->Current();
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
  const engine::Response decision = engine_.Check(*config, *parsed, now_us);
  if (metrics_ != nullptr) {
    metrics_->decision_duration->Observe(clock_->NowMicros() - now_us);
    CountDecisions(parsed->domain, decision);
  }
  SetDecision(*config, decision,
              decision.allowed ? beast_http::status::ok : beast_http::status::too_many_requests,
              response);
}

// Forward-auth (nginx auth_request, Traefik ForwardAuth, Envoy ext_authz over HTTP): the
// original request is described by X-Original-URI / X-Forwarded-Uri and X-Original-Method /
// X-Forwarded-Method, else by the path after /v1/auth (ext_authz's path_prefix) and this
// request's own method. Every domain with an `http:` section must allow it; all are decided as
// one (nothing is consumed unless all allow).
void Service::Auth(const HttpRequest& request, const std::string& peer, HttpResponse& response) {
  // The first of two header fields present.
  const auto either = [&](std::string_view a, std::string_view b) -> std::optional<std::string_view> {
    auto it = request.find(a);
    if (it == request.end()) it = request.find(b);
    if (it == request.end()) return std::nullopt;
    return std::string_view(it->value().data(), it->value().size());
  };
  const std::string_view method =
      either("X-Original-Method", "X-Forwarded-Method")
          .value_or(std::string_view(request.method_string().data(), request.method_string().size()));
  std::string_view uri;
  if (auto original = either("X-Original-URI", "X-Forwarded-Uri")) {
    uri = *original;
  } else {
    uri = std::string_view(request.target().data(), request.target().size()).substr(8);
    if (uri.empty() || uri.front() == '?') uri = "/";
  }
  const std::string_view path = uri.substr(0, uri.find('?'));

  const std::shared_ptr<const rules::Config> config = config_->Current();
  auto checks = BuildRouteChecks(*config, {.method = method, .path = path, .peer = peer,
                                           .headers = &request});
  if (!checks.ok()) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError(std::string(checks.status().message())));
  }
  const RouteDecision decision = DecideRoutes(*config, checks->requests, checks->sections, nullptr);
  SetDecision(*config, decision.combined, static_cast<beast_http::status>(decision.status),
              response);
}

Service::RouteDecision Service::DecideRoutes(const rules::Config& config,
                                             const std::vector<engine::Request>& requests,
                                             const std::vector<const rules::HttpSection*>& sections,
                                             engine::Consumption* consumed) {
  const int64_t now_us = clock_->NowMicros();
  std::vector<engine::Response> decisions = engine_.CheckAll(config, requests, now_us, consumed);
  RouteDecision out;
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (metrics_ != nullptr) CountDecisions(requests[i].domain, decisions[i]);
    if (out.status != 200) continue;
    for (const auto& d : decisions[i].descriptors) {
      if (d.code == engine::DescriptorResult::Code::kOverLimit) out.status = sections[i]->deny_status;
    }
  }
  if (metrics_ != nullptr && !decisions.empty()) {
    metrics_->decision_duration->Observe(clock_->NowMicros() - now_us);
  }
  out.combined = engine::Combine(std::move(decisions));
  if (!out.combined.allowed && out.status == 200) out.status = 429;
  return out;
}

void Service::CountDecisions(std::string_view domain, const engine::Response& decision) {
  for (const auto& d : decision.descriptors) {
    for (const auto& limit : d.limits) {
      const std::string_view labels[] = {domain, limit.name,
                                         limit.decision.allowed ? "allowed" : "denied"};
      metrics_->decisions->WithLabels(labels)->Inc();
    }
  }
}

// The answer to a decision: the rate-limit headers in the configured styles, the JSON body.
void Service::SetDecision(const rules::Config& config, const engine::Response& decision,
                          beast_http::status status, HttpResponse& response) {
  AddRateLimitHeaders(config, decision, response);
  SetJson(response, status, RenderCheckResponse(decision));
}

void Service::AddRateLimitHeaders(const rules::Config& config, const engine::Response& decision,
                                  HttpResponse& response) const {
  std::vector<Header> headers;
  // The settings were validated when loaded; a bad list cannot reach here.
  const HeaderStyles styles = ParseHeaderStyles(config.settings.headers).value_or(HeaderStyles{});
  AppendRateLimitHeaders(decision, styles, &headers);
  for (const Header& h : headers) response.set(h.name, h.value);
}

void Service::Json(const HttpRequest& request, HttpResponse& response) {
  // envoyproxy/ratelimit's JSON endpoint: the RLS messages in proto3 JSON, its status codes.
  const std::shared_ptr<const rules::Config> config = config_->Current();
  const int64_t now_us = clock_->NowMicros();
  const rls::JsonResult result =
      rls::HandleJson(request.body(), [&](const rls::RateLimitRequest& rpc) {
        return rls::ShouldRateLimit(engine_, config.get(), rpc, now_us);
      });
  response.result(static_cast<beast_http::status>(result.status));
  response.set(beast_http::field::content_type,
               std::string(result.content_type.data(), result.content_type.size()));
  if (result.nosniff) response.set("X-Content-Type-Options", "nosniff");
  response.body() = result.body;
}

// GET /v1/limits?domain=D&descriptors=k=v,...: the current state of a key, consuming nothing.
// DELETE the same: forget it ("unblock this customer").
void Service::Limits(const HttpRequest& request, HttpResponse& response) {
  const bool remove = request.method() == beast_http::verb::delete_;
  if (!remove && request.method() != beast_http::verb::get) {
    return MethodNotAllowed(response, "GET, DELETE");
  }
  if (remove && !Authorized(request, response)) return;
  const auto domain = QueryParam(request, "domain");
  const auto text = QueryParam(request, "descriptors");
  if (!domain || domain->empty() || !text) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError("give ?domain=D&descriptors=k=v,k=v;k=v"));
  }
  std::string error;
  auto descriptors = engine::ParseDescriptorList(*text, &error);
  if (!descriptors) return SetJson(response, beast_http::status::bad_request, RenderError(error));
  const std::shared_ptr<const rules::Config> config = config_->Current();
  if (config->FindDomain(*domain) == nullptr) {
    return SetJson(response, beast_http::status::not_found,
                   RenderError(fmt::format("unknown domain '{}'", *domain)));
  }
  engine::Request query{.domain = *domain, .descriptors = std::move(*descriptors), .hits_addend = 1};
  if (remove) {
    const size_t forgotten = engine_.Reset(*config, query);
    return SetJson(response, beast_http::status::ok, fmt::format("{{\"reset\":{}}}", forgotten));
  }
  for (auto& d : query.descriptors) d.hits_addend = 0;  // look, don't consume
  SetJson(response, beast_http::status::ok,
          RenderCheckResponse(engine_.Check(*config, query, clock_->NowMicros())));
}

bool Service::Authorized(const HttpRequest& request, HttpResponse& response) const {
  if (admin_token_.empty()) return true;
  const auto it = request.find(beast_http::field::authorization);
  if (it != request.end() &&
      std::string_view(it->value().data(), it->value().size()) == "Bearer " + admin_token_) {
    return true;
  }
  response.set(beast_http::field::www_authenticate, "Bearer");
  SetJson(response, beast_http::status::unauthorized,
          R"({"error":"this endpoint needs Authorization: Bearer <admin token>"})");
  return false;
}

void Service::HandleAdmin(const HttpRequest& request, const std::string&, HttpResponse& response) {
  const std::string_view path = PathOf(request);
  if (path == "/healthz") return SetText(response, beast_http::status::ok, "ok\n");
  if (path == "/metrics" && registry_ != nullptr) {
    if (before_render_) before_render_();
    response.set(beast_http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    response.body() = registry_->Render();
    return;
  }
  if (path == "/readyz") {
    if (config_->Current() == nullptr) {
      return SetText(response, beast_http::status::service_unavailable, "no config loaded\n");
    }
    return SetText(response, beast_http::status::ok, "ready\n");
  }
  if (path == "/v1/rules") {
    if (request.method() != beast_http::verb::get) return MethodNotAllowed(response, "GET");
    const std::shared_ptr<const rules::Config> config = config_->Current();
    std::string domains;
    for (const auto& d : config->domains) {
      domains += fmt::format("{}{{\"name\":{},\"file\":{},\"limits\":{}}}", domains.empty() ? "" : ",",
                             JsonString(d->name), JsonString(d->file), d->limit_count);
    }
    return SetJson(response, beast_http::status::ok,
                   fmt::format("{{\"version\":{},\"domains\":[{}],\"limits\":{},"
                               "\"reload_successes\":{},\"reload_failures\":{}}}",
                               JsonString(config->version), domains, config->limit_count,
                               config_->reload_successes(), config_->reload_failures()));
  }
  if (path == "/v1/limits") return Limits(request, response);
  if (path == "/v1/reload") {
    if (request.method() != beast_http::verb::post) return MethodNotAllowed(response, "POST");
    if (!Authorized(request, response)) return;
    const rules::ConfigManager::ReloadOutcome outcome = config_->Reload();
    std::string errors;
    for (const auto& e : outcome.errors) {
      errors += fmt::format("{}{}", errors.empty() ? "" : ",", JsonString(e.ToString()));
    }
    return SetJson(response,
                   outcome.errors.empty() ? beast_http::status::ok : beast_http::status::unprocessable_entity,
                   fmt::format("{{\"applied\":{},\"unchanged\":{},\"version\":{},\"errors\":[{}]}}",
                               outcome.applied, outcome.unchanged, JsonString(outcome.version),
                               errors));
  }
  SetJson(response, beast_http::status::not_found, R"({"error":"not found"})");
}

}  // namespace sluice::http
