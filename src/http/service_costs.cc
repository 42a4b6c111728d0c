// The data plane's costs known only after the work (docs/http-api.md, "Costs known later"):
//   POST /v1/report   a /v1/check body -> 200: the cost recorded now, whatever the limits say
//                     (as count_denied records), with the statuses after it
//   POST /v1/reserve  a /v1/check body whose "cost" is an estimate, and "for" (the reservation's
//                     life, default 5m) -> as /v1/check, and when admitted "reservation" and
//                     "expires_in_ms"
//   POST /v1/settle   {"reservation", "cost"} -> 200 {"reserved", "cost", "limits"}: the
//                     difference given back, or the excess recorded past the limit; 404 when the
//                     reservation is not held (expired, and so settled at its estimate; settled
//                     already; or never made)
// Reservations live in backend::Reservations (this process, or Redis for every instance).

#include <simdjson.h>

#include <algorithm>

#include "engine/reservation.h"
#include "fmt/format.h"
#include "http/check_json.h"
#include "http/service.h"
#include "http/service_answers.h"

namespace sluice::http {
namespace {

constexpr int64_t kDefaultReservationUs = int64_t{300} * 1000000;        // 5 min
constexpr int64_t kLongestReservationUs = int64_t{24} * 3600 * 1000000;  // 1 day
constexpr int64_t kShortestReservationUs = 1000000;                      // 1 s

// {"reservation": "...", "cost": N}, or why not.
struct Settlement {
  std::string id;
  uint64_t cost = 0;
};
absl::StatusOr<Settlement> SettlementOf(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::dom::object object;
  Settlement out;
  std::string_view id;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(object) != simdjson::SUCCESS ||
      object["reservation"].get_string().get(id) != simdjson::SUCCESS ||
      object["cost"].get_uint64().get(out.cost) != simdjson::SUCCESS || out.cost > kMaxRequests) {
    return absl::InvalidArgumentError(
        R"(give {"reservation": "...", "cost": N}: the id /v1/reserve answered and what the work cost, an integer from 0 to 4294967295)");
  }
  for (const simdjson::dom::key_value_pair field : object) {
    if (field.key != "reservation" && field.key != "cost") {
      return absl::InvalidArgumentError(
          fmt::format("unknown field '{}' (known: reservation, cost)", std::string(field.key)));
    }
  }
  out.id = std::string(id);
  return out;
}

// The request's answer body with `more` (",\"name\":value...") before its closing brace.
void AppendToBody(HttpResponse& response, std::string_view more) {
  std::string& body = response.body();
  if (body.empty() || body.back() != '}') return;
  body.pop_back();
  body += more;
  body += '}';
}

// A /v1/check body (with "for" when `for_us` is given) of a domain `config` has, or nullopt with
// the 400 that says why in `response`.
std::optional<engine::Request> ParseForDomain(const rules::Config& config,
                                              const HttpRequest& request,
                                              std::optional<int64_t>* for_us,
                                              HttpResponse& response) {
  auto parsed = for_us != nullptr
                    ? ParseReserveRequest(request.body(), config.settings.max_key_bytes, for_us)
                    : ParseCheckRequest(request.body(), config.settings.max_key_bytes);
  if (!parsed.ok()) {
    SetJson(response, beast_http::status::bad_request,
            RenderError(std::string(parsed.status().message())));
    return std::nullopt;
  }
  if (config.FindDomain(parsed->domain) == nullptr) {
    SetJson(response, beast_http::status::bad_request,
            RenderError(fmt::format("unknown domain '{}'", parsed->domain)));
    return std::nullopt;
  }
  return *std::move(parsed);
}

}  // namespace

void Service::Report(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
  std::shared_ptr<const rules::Config> config = config_->Current();
  std::optional<engine::Request> parsed = ParseForDomain(*config, request, nullptr, response);
  if (!parsed) return;
  parsed->record = true;
  std::vector<engine::Request> requests;
  requests.push_back(*std::move(parsed));
  AnswerMaybeLater(response, deferral, [&](Send send) {
    engine_.CheckAllAsync(
        config, std::move(requests), clock_->NowMicros(),
        [this, config, send](std::vector<engine::Response> decisions) {
          const engine::Response& decision = decisions.front();
          HttpResponse answer;
          SetDecision(*config, decision, beast_http::status::ok, answer);
          const bool recorded = decision.backend == engine::BackendState::kOk ||
                                decision.backend == engine::BackendState::kLocal;
          if (answer.result() == beast_http::status::ok) {
            AppendToBody(answer, recorded ? R"(,"recorded":true)" : R"(,"recorded":false)");
          }
          send(std::move(answer));
        });
  });
}

void Service::Reserve(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
  std::shared_ptr<const rules::Config> config = config_->Current();
  std::optional<int64_t> for_us;
  std::optional<engine::Request> parsed = ParseForDomain(*config, request, &for_us, response);
  if (!parsed) return;
  const int64_t life_us = for_us.value_or(kDefaultReservationUs);
  if (life_us > kLongestReservationUs || life_us < kShortestReservationUs) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError("for: a reservation lives from 1s to 1d"));
  }
  if (std::any_of(parsed->descriptors.begin(), parsed->descriptors.end(),
                  [](const engine::Descriptor& d) { return d.hits_addend == 0; })) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError("cost: a reservation takes at least 1 (0 only looks)"));
  }
  struct Call {
    std::vector<engine::Request> requests;
    engine::Refundable consumed;
  };
  auto call = std::make_shared<Call>();
  call->requests.push_back(*std::move(parsed));
  AnswerMaybeLater(response, deferral, [&](Send send) {
    engine_.CheckAllAsync(
        config, call->requests, clock_->NowMicros(),
        [this, config, call, life_us, send](std::vector<engine::Response> decisions) {
          const engine::Response& decision = decisions.front();
          auto answer = std::make_shared<HttpResponse>();
          SetDecision(
              *config, decision,
              decision.allowed ? beast_http::status::ok : beast_http::status::too_many_requests,
              *answer);
          engine::Refundable settled = engine::SettledPart(call->consumed, call->requests);
          if (!decision.allowed || settled.items.empty()) {
            // Nothing to settle (denied, or no limit took the estimate): no reservation kept.
            if (decision.allowed) AppendToBody(*answer, R"(,"reservation":"","expires_in_ms":0)");
            return send(std::move(*answer));
          }
          const std::string id = engine::NewReservationId();
          reservations_->Put(
              id, engine::EncodeReservation(settled), clock_->NowMicros(), life_us,
              [this, answer, id, life_us, settled, send](absl::Status kept) {
                if (!kept.ok()) {  // not kept, so not to be settled: nothing taken after all
                  engine_.Refund(settled, clock_->NowMicros());
                  HttpResponse refused;
                  SetJson(refused, beast_http::status::service_unavailable,
                          RenderError("reservation not kept: " + std::string(kept.message())));
                  return send(std::move(refused));
                }
                AppendToBody(*answer, fmt::format(R"(,"reservation":"{}","expires_in_ms":{})", id,
                                                  life_us / 1000));
                send(std::move(*answer));
              });
        },
        &call->consumed);
  });
}

void Service::Settle(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
  auto settlement = SettlementOf(request.body());
  if (!settlement.ok()) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError(std::string(settlement.status().message())));
  }
  if (settlement->id.empty()) {  // /v1/reserve's answer when no limit took the estimate
    return SetJson(response, beast_http::status::ok, R"({"reserved":0,"cost":0,"limits":0})");
  }
  const uint64_t cost = settlement->cost;
  AnswerMaybeLater(response, deferral, [&](Send send) {
    reservations_->Take(
        settlement->id, clock_->NowMicros(), [this, cost, send](absl::StatusOr<std::string> text) {
          HttpResponse answer;
          std::optional<engine::Refundable> taken;
          if (text.ok()) taken = engine::DecodeReservation(*text);
          if (text.status().code() == absl::StatusCode::kNotFound) {
            SetJson(answer, beast_http::status::not_found,
                    RenderError("no such reservation: it expired (and so kept its estimate), "
                                "was settled already, or never was"));
          } else if (!text.ok()) {
            SetJson(answer, beast_http::status::service_unavailable,
                    RenderError("backend: " + std::string(text.status().message())));
          } else if (!taken) {
            SetJson(answer, beast_http::status::internal_server_error,
                    RenderError("the reservation kept is unreadable"));
          } else {
            // Answered once applied: a check right after the answer sees the settlement.
            const std::vector<uint64_t> actual(taken->items.size(), cost);
            const uint64_t reserved = taken->items.empty() ? 0 : taken->items.front().cost;
            const size_t limits = taken->items.size();
            return engine_.Reconcile(
                *taken, actual, clock_->NowMicros(),
                [send, reserved, cost, limits](absl::Status applied) {
                  HttpResponse settled;
                  if (!applied.ok()) {  // taken, but not applied: the estimate stands
                    SetJson(settled, beast_http::status::service_unavailable,
                            RenderError("not settled, the estimate stands: backend: " +
                                        std::string(applied.message())));
                  } else {
                    SetJson(settled, beast_http::status::ok,
                            fmt::format(R"({{"reserved":{},"cost":{},"limits":{}}})", reserved,
                                        cost, limits));
                  }
                  send(std::move(settled));
                });
          }
          send(std::move(answer));
        });
  });
}

}  // namespace sluice::http
