#include "http/service.h"

#include <array>
#include <atomic>
#include <iterator>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/synchronization/mutex.h"
#include "engine/descriptor_text.h"
#include "fmt/format.h"
#include "http/check_json.h"
#include "http/http_routes.h"

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

uint64_t NextServiceSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
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

void MethodNotAllowed(HttpResponse& response, const char* allowed) {
  response.set(beast_http::field::allow, allowed);
  SetJson(response, beast_http::status::method_not_allowed,
          fmt::format("{{\"error\":\"method not allowed; use {}\"}}", allowed));
}

}  // namespace

Service::Service(rules::ConfigManager* config, engine::Engine* engine, const Clock* clock,
                 std::string admin_token)
    : config_(config),
      engine_(*engine),
      clock_(clock),
      admin_token_(std::move(admin_token)),
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
         path == "/json" || path == "/healthcheck";
}

}  // namespace

bool Service::StreamsBody(const HttpRequest& header) const {
  return !OwnPath(PathOf(header)) && config_->Current()->proxy_domain != nullptr;
}

void Service::HandleData(HttpRequest& request, const std::string& peer, HttpResponse& response,
                         Deferral& deferral) {
  const std::string_view path = PathOf(request);
  if (!OwnPath(path)) {
    std::shared_ptr<const rules::Config> config = config_->Current();
    if (config->proxy_domain != nullptr) {
      Proxy(request, peer, response, deferral, std::move(config));
      if (!deferral.taken()) CountResponse(response);  // else counted when sent
      return;
    }
  }
  Route(request, peer, response, deferral);
  if (!deferral.taken()) CountResponse(response);  // else counted when sent
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
  };
  auto later = std::make_shared<Later>();
  decide([this, later](HttpResponse answer) {
    absl::ReleasableMutexLock lock(&later->mu);
    if (!later->returned) {
      later->early = std::move(answer);
      return;
    }
    Responder responder = std::move(later->responder);
    lock.Release();
    CountResponse(answer);
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
  std::vector<engine::Request> requests;
  requests.push_back(*std::move(parsed));
  AnswerMaybeLater(response, deferral, [&](Send send) {
    std::string domain = requests.front().domain;
    engine_.CheckAllAsync(config, std::move(requests), now_us,
                          [this, config, now_us, domain = std::move(domain),
                           send = std::move(send)](std::vector<engine::Response> decisions) {
                            const engine::Response& decision = decisions.front();
                            RecordDecision(domain, decision, clock_->NowMicros() - now_us);
                            HttpResponse answer;
                            SetDecision(*config, decision,
                                        decision.allowed ? beast_http::status::ok
                                                         : beast_http::status::too_many_requests,
                                        answer);
                            send(std::move(answer));
                          });
  });
}

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
                                                engine::Consumption* consumed) {
  const int64_t now_us = clock_->NowMicros();
  absl::InlinedVector<std::string_view, 2> domains;
  for (const engine::Request& r : checks.requests) domains.push_back(r.domain);
  // The engine answers straight into the decision: no list of answers to allocate and move.
  RouteDecision out;
  out.responses.resize(checks.requests.size());
  engine_.CheckAll(config, std::span(checks.requests.data(), checks.requests.size()),
                   std::span(out.responses.data(), out.responses.size()), now_us, consumed);
  Summarize(domains, checks.sections, now_us, out);
  return out;
}

void Service::DecideRoutes(std::shared_ptr<const rules::Config> config, RouteChecks checks,
                           engine::Consumption* consumed, std::function<void(RouteDecision)> done) {
  if (engine_.answers_inline()) return done(DecideRoutesNow(*config, checks, consumed));
  const int64_t now_us = clock_->NowMicros();
  // The requests go to the engine; the answer needs only their domains.
  std::vector<std::string> domains;
  for (const engine::Request& r : checks.requests) domains.push_back(r.domain);
  std::vector<engine::Request> requests(std::make_move_iterator(checks.requests.begin()),
                                        std::make_move_iterator(checks.requests.end()));
  engine_.CheckAllAsync(
      std::move(config), std::move(requests), now_us,
      [this, domains = std::move(domains), sections = std::move(checks.sections), now_us,
       done = std::move(done)](std::vector<engine::Response> decisions) {
        const std::vector<std::string_view> names(domains.begin(), domains.end());
        RouteDecision out;
        out.responses.assign(std::make_move_iterator(decisions.begin()),
                             std::make_move_iterator(decisions.end()));
        Summarize(names, sections, now_us, out);
        done(std::move(out));
      },
      consumed);
}

void Service::RecordDecision(std::string_view domain, const engine::Response& decision,
                             int64_t elapsed_us) {
  if (metrics_ == nullptr) return;
  metrics_->decision_duration->Observe(elapsed_us);
  CountDecisions(domain, decision);
}

void Service::Summarize(std::span<const std::string_view> domains,
                        std::span<const rules::HttpSection* const> sections, int64_t now_us,
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
    metrics_->decision_duration->Observe(clock_->NowMicros() - now_us);
  }
  if (decisions.size() != 1) {
    engine::Response combined = engine::Combine(std::span(decisions.data(), decisions.size()));
    decisions.clear();
    decisions.push_back(std::move(combined));
  }
  if (!out.combined().allowed && out.status == 200) out.status = 429;
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
  };
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
  engine::Request query{
      .domain = *domain, .descriptors = std::move(*descriptors), .hits_addend = 1};
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

bool Service::Authorized(const HttpRequest& request, HttpResponse& response) const {
  if (admin_token_.empty()) return true;
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
    if (token && *token == admin_token_) return true;
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

void Service::HandleAdmin(const HttpRequest& request, const std::string&, HttpResponse& response,
                          Deferral& deferral) {
  const std::string_view path = PathOf(request);
  if (path == "/healthz") return SetText(response, beast_http::status::ok, "ok\n");
  if (path == "/metrics" && registry_ != nullptr) {
    if (before_render_) before_render_();
    response.set(beast_http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    response.body() = registry_->Render();
    return;
  }
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
