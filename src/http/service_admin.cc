// The HTTP service's admin endpoints: /healthz, /readyz, /metrics, /v1/rules, /v1/limits,
// /v1/top, /v1/reload (/v1/overrides: service_overrides.cc), and the bearer token that guards
// the ones that change state.

#include <charconv>
#include <iterator>
#include <optional>

#include "engine/descriptor_text.h"
#include "engine/explain.h"
#include "engine/top_keys.h"
#include "fmt/format.h"
#include "http/check_json.h"
#include "http/console_assets.h"  // generated from src/http/console/: kConsoleHtml, ...
#include "http/service.h"
#include "http/service_answers.h"
#include "util/constant_time.h"
#include "util/json_string.h"

namespace sluice::http {
namespace {

std::string JsonString(std::string_view s) {
  std::string out;
  AppendJsonString(&out, s);
  return out;
}

// The token of Authorization credentials "Bearer <token>" (RFC 6750 §2.1), or nullopt for
// another scheme. The scheme is case-insensitive (RFC 9110 §11.1) and followed by one or more
// spaces (§11.4: auth-scheme 1*SP token68).
std::optional<std::string_view> BearerToken(std::string_view credentials) {
  constexpr std::string_view kScheme = "bearer";
  if (credentials.size() <= kScheme.size() || credentials[kScheme.size()] != ' ' ||
      !boost::beast::iequals(credentials.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  const size_t token = credentials.find_first_not_of(' ', kScheme.size());
  if (token == std::string_view::npos) return std::nullopt;
  return credentials.substr(token);
}

}  // namespace

// GET /v1/limits?domain=D&descriptors=k=v,...: the current state of a key, consuming nothing.
// DELETE the same: forget it ("unblock this customer").
void Service::Limits(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
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
  std::shared_ptr<const rules::Config> config = config_->Current();
  if (config->FindDomain(*domain) == nullptr) {
    return SetJson(response, beast_http::status::not_found,
                   RenderError(fmt::format("unknown domain '{}'", *domain)));
  }
  // The same bound as on the data plane (/v1/check, the http: routes): no key that could not
  // have been stored is looked up.
  const size_t max_key_bytes = config->settings.max_key_bytes;
  for (const engine::Descriptor& d : *descriptors) {
    for (const rules::Entry& e : d.entries) {
      if (e.key.size() > max_key_bytes || e.value.size() > max_key_bytes) {
        return SetJson(
            response, beast_http::status::bad_request,
            RenderError(fmt::format("descriptor key '{:.64}' or its value is longer than "
                                    "the maximum of {} bytes (http.max_key_bytes)",
                                    e.key, max_key_bytes)));
      }
    }
  }
  engine::Request query{.domain = *domain,
                        .descriptors = std::move(*descriptors),
                        .hits_addend = 1,
                        .observed = false};
  AnswerMaybeLater(response, deferral, [&](Send send) {
    if (remove) {
      return engine_.ResetAsync(config, std::move(query), [send](absl::StatusOr<size_t> forgotten) {
        HttpResponse answer;
        if (!forgotten.ok()) {
          SetJson(answer, beast_http::status::service_unavailable,
                  RenderError("backend: " + std::string(forgotten.status().message())));
        } else {
          SetJson(answer, beast_http::status::ok, fmt::format("{{\"reset\":{}}}", *forgotten));
        }
        send(std::move(answer));
      });
    }
    for (auto& d : query.descriptors) d.hits_addend = 0;  // look, don't consume
    std::vector<engine::Request> requests;
    requests.push_back(std::move(query));
    engine_.CheckAllAsync(config, std::move(requests), clock_->NowMicros(),
                          [send](std::vector<engine::Response> decisions) {
                            HttpResponse answer;
                            if (decisions.front().backend != engine::BackendState::kOk) {
                              SetJson(answer, beast_http::status::service_unavailable,
                                      RenderError("backend unavailable: the state cannot be read"));
                            } else {
                              SetJson(answer, beast_http::status::ok,
                                      RenderCheckResponse(decisions.front()));
                            }
                            send(std::move(answer));
                          });
  });
}

bool Service::Authorized(const HttpRequest& request, HttpResponse& response,
                         std::string* who) const {
  if (admin_tokens_.empty()) return true;
  const auto [first, end] = request.equal_range(beast_http::field::authorization);
  // Two credentials are ambiguous (a proxy in front may have checked the other one): refused
  // rather than taking the first.
  if (first != end && std::next(first) != end) {
    SetJson(response, beast_http::status::bad_request,
            R"({"error":"more than one Authorization field"})");
    return false;
  }
  if (first != end) {
    const auto token = BearerToken(std::string_view(first->value().data(), first->value().size()));
    // Every token compared, so that the time taken does not say which one matched.
    const rules::AdminToken* match = nullptr;
    for (const rules::AdminToken& known : admin_tokens_) {
      if (token && util::ConstantTimeEquals(*token, known.token) && match == nullptr)
        match = &known;
    }
    if (match != nullptr) {
      if (who != nullptr) *who = match->name;
      return true;
    }
  }
  response.set(beast_http::field::www_authenticate, "Bearer");
  SetJson(response, beast_http::status::unauthorized,
          R"({"error":"this endpoint needs Authorization: Bearer <admin token>"})");
  return false;
}

// Ready when a config is loaded and the backend can decide, or, while it cannot, when no domain
// would refuse requests for it (failure_mode open or local everywhere).
void Service::Readyz(HttpResponse& response) {
  const std::shared_ptr<const rules::Config> config = config_->Current();
  if (config == nullptr) {
    return SetText(response, beast_http::status::service_unavailable, "no config loaded\n");
  }
  if (config_->awaiting_remote()) {
    return SetText(response, beast_http::status::service_unavailable,
                   "not ready\nrules: waiting for the first rule set over xDS\n");
  }
  if (!backend_health_)
    return SetText(response, beast_http::status::ok, "ready\nbackend: memory\n");
  const BackendHealth health = backend_health_();
  if (health.usable) {
    return SetText(response, beast_http::status::ok,
                   fmt::format("ready\nbackend: {}\n", health.detail));
  }
  if (const rules::Domain* closed = config->FirstFailingClosed()) {
    return SetText(response, beast_http::status::service_unavailable,
                   fmt::format("not ready\nbackend: {}\ndomain {} has failure_mode closed\n",
                               health.detail, closed->name));
  }
  SetText(
      response, beast_http::status::ok,
      fmt::format("degraded\nbackend: {}\nserving by failure_mode (open/local)\n", health.detail));
}

void Service::RenderMetrics(HttpResponse& response) {
  if (before_render_) before_render_();
  response.set(beast_http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  response.body() = registry_->Render();
}

// GET /v1/top?domain=D[&by=denied|requests][&window=1m|5m|15m][&limit=N]: the keys of D whose
// limits denied most (or that were decided most) over the window, from engine::TopKeys, each
// with its limit's current state.
void Service::Top(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
  if (request.method() != beast_http::verb::get) return MethodNotAllowed(response, "GET");
  const engine::TopKeys* top = engine_.top_keys();
  if (top == nullptr) {
    return SetJson(response, beast_http::status::not_found,
                   RenderError("top keys are off (sluice serve --top-keys 0)"));
  }
  const auto domain = QueryParam(request, "domain");
  const std::string by = QueryParam(request, "by").value_or("denied");
  const std::string window = QueryParam(request, "window").value_or("5m");
  const std::string limit = QueryParam(request, "limit").value_or("20");
  size_t n = 0;
  const auto [end, ec] = std::from_chars(limit.data(), limit.data() + limit.size(), n);
  const int minutes = window == "1m" ? 1 : window == "5m" ? 5 : window == "15m" ? 15 : 0;
  if (!domain || domain->empty() || (by != "denied" && by != "requests") || minutes == 0 ||
      ec != std::errc() || end != limit.data() + limit.size() || n < 1 || n > 1000) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError("give ?domain=D, and optionally by=denied|requests, "
                               "window=1m|5m|15m, limit=1..1000"));
  }
  auto rows = top->Top(
      *domain, by == "denied" ? engine::TopKeys::By::kDenied : engine::TopKeys::By::kRequests,
      minutes, n, clock_->NowMicros());
  // Each row's current state, looked up as GET /v1/limits does (one look per key, consuming
  // nothing, not recorded as a decision), all in one batch.
  std::shared_ptr<const rules::Config> config = config_->Current();
  std::vector<engine::Request> looks;
  std::vector<int> look_of(rows.size(), -1);
  if (config->FindDomain(*domain) != nullptr) {
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].entries.empty()) continue;
      engine::Descriptor d;
      d.entries = rows[i].entries;
      d.hits_addend = 0;
      look_of[i] = static_cast<int>(looks.size());
      looks.push_back({.domain = *domain, .descriptors = {std::move(d)}, .observed = false});
    }
  }
  auto render = [rows = std::move(rows), look_of = std::move(look_of), domain = *domain, by,
                 window](const std::vector<engine::Response>& states) {
    std::string keys;
    for (size_t i = 0; i < rows.size(); ++i) {
      std::string state = "null";
      const engine::AppliedLimit* limit = nullptr;
      if (look_of[i] >= 0 && static_cast<size_t>(look_of[i]) < states.size()) {
        const engine::Response& r = states[static_cast<size_t>(look_of[i])];
        if (r.backend == engine::BackendState::kOk && !r.descriptors.empty()) {
          for (const auto& l : r.descriptors.front().limits) {
            if (engine::LimitName(l) == rows[i].limit) limit = &l;
          }
        }
      }
      if (limit != nullptr) {
        state = fmt::format(R"({{"limit":{},"remaining":{},"reset_after_ms":{}}})",
                            engine::ReportedLimit(limit->limit), limit->decision.remaining,
                            limit->decision.reset_after_us / 1000);
      }
      keys += fmt::format(R"({}{{"limit":{},"key":{},"count":{},"error":{},"state":{}}})",
                          keys.empty() ? "" : ",", JsonString(rows[i].limit),
                          JsonString(rows[i].key), rows[i].count, rows[i].error, state);
    }
    return fmt::format(R"({{"domain":{},"by":"{}","window":"{}","keys":[{}]}})", JsonString(domain),
                       by, window, keys);
  };
  if (looks.empty()) return SetJson(response, beast_http::status::ok, render({}));
  AnswerMaybeLater(response, deferral, [&](Send send) {
    engine_.CheckAllAsync(config, std::move(looks), clock_->NowMicros(),
                          [send, render = std::move(render)](std::vector<engine::Response> states) {
                            HttpResponse answer;
                            SetJson(answer, beast_http::status::ok, render(states));
                            send(std::move(answer));
                          });
  });
}

void Service::ExplainKey(const HttpRequest& request, HttpResponse& response) {
  if (request.method() != beast_http::verb::get) return MethodNotAllowed(response, "GET");
  const auto domain = QueryParam(request, "domain");
  const auto descriptors = QueryParam(request, "descriptors");
  if (!domain || !descriptors) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError("give ?domain=D&descriptors=k=v,k=v[;k=v...]"));
  }
  const std::shared_ptr<const rules::OverrideSet> overrides =
      override_book_ == nullptr ? nullptr : override_book_->Current();
  const absl::StatusOr<std::string> text = engine::Explain(
      *config_->Current(), *domain, *descriptors, overrides.get(), clock_->NowMicros());
  if (!text.ok()) {
    return SetJson(response,
                   text.status().code() == absl::StatusCode::kNotFound
                       ? beast_http::status::not_found
                       : beast_http::status::bad_request,
                   RenderError(std::string(text.status().message())));
  }
  SetJson(
      response, beast_http::status::ok,
      fmt::format(R"({{"domain":{},"explanation":{}}})", JsonString(*domain), JsonString(*text)));
}

bool Service::ServeConsole(std::string_view path, HttpResponse& response) {
  std::string_view body, type;
  if (path == "/ui" || path == "/ui/") {
    body = kConsoleHtml;
    type = "text/html; charset=utf-8";
  } else if (path == "/ui/console.js") {
    body = kConsoleJs;
    type = "text/javascript; charset=utf-8";
  } else if (path == "/ui/console.css") {
    body = kConsoleCss;
    type = "text/css; charset=utf-8";
  } else {
    return false;
  }
  response.result(beast_http::status::ok);
  response.set(beast_http::field::content_type, type);
  // Nothing but this port: no script, style, image or request from anywhere else.
  response.set("Content-Security-Policy",
               "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  response.set("X-Content-Type-Options", "nosniff");
  response.set(beast_http::field::cache_control, "no-cache");
  response.body() = std::string(body);
  return true;
}

void Service::HandleMetrics(const HttpRequest& request, std::string_view path,
                            HttpResponse& response) {
  if (PathOf(request) != path || registry_ == nullptr) {
    return SetJson(response, beast_http::status::not_found, R"({"error":"not found"})");
  }
  RenderMetrics(response);
}

void Service::HandleAdmin(const HttpRequest& request, const std::string&, HttpResponse& response,
                          Deferral& deferral) {
  const std::string_view path = PathOf(request);
  if (path == "/healthz") return SetText(response, beast_http::status::ok, "ok\n");
  if (path == "/metrics" && registry_ != nullptr) return RenderMetrics(response);
  if (path == "/readyz") return Readyz(response);
  if (path == "/v1/rules") {
    if (request.method() != beast_http::verb::get) return MethodNotAllowed(response, "GET");
    const std::shared_ptr<const rules::Config> config = config_->Current();
    std::string domains;
    for (const auto& d : config->domains) {
      domains +=
          fmt::format("{}{{\"name\":{},\"file\":{},\"limits\":{}}}", domains.empty() ? "" : ",",
                      JsonString(d->name), JsonString(d->file), d->limit_count);
    }
    return SetJson(response, beast_http::status::ok,
                   fmt::format("{{\"version\":{},\"domains\":[{}],\"limits\":{},"
                               "\"reload_successes\":{},\"reload_failures\":{}}}",
                               JsonString(config->version), domains, config->limit_count,
                               config_->reload_successes(), config_->reload_failures()));
  }
  if (path == "/v1/limits") return Limits(request, response, deferral);
  if (path == "/v1/explain") return ExplainKey(request, response);
  if (path == "/v1/overrides" && override_book_ != nullptr) {
    return Overrides(request, response, deferral);
  }
  if (path == "/ui" || path.starts_with("/ui/")) {
    if (request.method() != beast_http::verb::get) return MethodNotAllowed(response, "GET");
    if (ServeConsole(path, response)) return;
  }
  if (path == "/v1/top") return Top(request, response, deferral);
  if (path == "/v1/reload") {
    if (request.method() != beast_http::verb::post) return MethodNotAllowed(response, "POST");
    if (!Authorized(request, response)) return;
    const rules::ConfigManager::ReloadOutcome outcome = config_->Reload();
    std::string errors;
    for (const auto& e : outcome.errors) {
      errors += fmt::format("{}{}", errors.empty() ? "" : ",", JsonString(e.ToString()));
    }
    return SetJson(
        response,
        outcome.errors.empty() ? beast_http::status::ok : beast_http::status::unprocessable_entity,
        fmt::format("{{\"applied\":{},\"unchanged\":{},\"version\":{},\"errors\":[{}]}}",
                    outcome.applied, outcome.unchanged, JsonString(outcome.version), errors));
  }
  SetJson(response, beast_http::status::not_found, R"({"error":"not found"})");
}

}  // namespace sluice::http
