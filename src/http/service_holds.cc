// The data plane's concurrency holds (docs/http-api.md, "Requests in flight"):
//   POST /v1/acquire   {"domain", "descriptors"} as /v1/check -> 200 {"lease", "expires_in_ms",
//                      "remaining"} or 429 (Retry-After) naming the limit
//   POST /v1/release   {"lease"} -> 200 {"released": N}
//   POST /v1/renew     {"lease"} -> 200 {"renewed": N, "expires_in_ms"}, 404 when none was live
// Holds live in backend::Holds (this process, or Redis for every instance).

#include <simdjson.h>

#include <algorithm>
#include <unordered_map>

#include "engine/holds.h"
#include "fmt/format.h"
#include "http/check_json.h"
#include "http/service.h"
#include "http/service_answers.h"

namespace sluice::http {
namespace {

// The "lease" of a body {"lease": "..."}, or why not.
absl::StatusOr<std::vector<backend::Hold>> LeaseOf(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view lease;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS || !doc.is_object() ||
      doc["lease"].get_string().get(lease) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(R"(give {"lease": "..."} as /v1/acquire answered it)");
  }
  auto holds = engine::DecodeLease(lease);
  if (!holds) return absl::InvalidArgumentError("that is not a lease /v1/acquire gave");
  return *std::move(holds);
}

// The shortest max_hold of `holds`: when the first of them ends unless renewed ("expires_in_ms").
int64_t ShortestMaxHold(const std::vector<backend::Hold>& holds) {
  int64_t shortest = INT64_MAX;
  for (const backend::Hold& h : holds) shortest = std::min(shortest, h.max_hold_us);
  return shortest;
}

// Whole seconds, rounded up, for Retry-After.
int64_t CeilSeconds(int64_t us) { return (std::max<int64_t>(us, 0) + 999999) / 1000000; }

}  // namespace

void Service::CountHolds(const engine::HoldTargets& targets, const backend::Acquisition& got) {
  if (metrics_ == nullptr || !got.status.ok()) return;
  for (size_t i = 0; i < targets.requests.size(); ++i) {
    if (!got.ok && i != got.refused) continue;
    const std::string_view labels[] = {targets.domains[i], targets.names[i],
                                       got.ok ? "granted" : "refused"};
    metrics_->concurrency->WithLabels(labels)->Inc();
  }
}

void Service::Acquire(const HttpRequest& request, HttpResponse& response, Deferral& deferral) {
  std::shared_ptr<const rules::Config> config = config_->Current();
  auto parsed = ParseCheckRequest(request.body(), config->settings.max_key_bytes);
  if (!parsed.ok()) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError(std::string(parsed.status().message())));
  }
  auto targets = std::make_shared<engine::HoldTargets>(engine::MatchHolds(*config, *parsed));
  if (targets->requests.empty()) {  // no concurrency limit applies: nothing to hold
    return SetJson(response, beast_http::status::ok, R"({"lease":"","holds":0})");
  }
  const int64_t now_us = clock_->NowMicros();
  AnswerMaybeLater(response, deferral, [&](Send send) {
    holds_->Acquire(targets->requests, now_us, [this, targets, send](backend::Acquisition got) {
      CountHolds(*targets, got);
      HttpResponse answer;
      if (!got.status.ok()) {
        const bool closed = std::any_of(targets->on_failure.begin(), targets->on_failure.end(),
                                        [](auto m) { return m == backend::FailureMode::kClosed; });
        SetJson(answer, closed ? beast_http::status::service_unavailable : beast_http::status::ok,
                closed ? RenderError("backend: " + std::string(got.status.message()))
                       : R"({"lease":"","holds":0,"failed_open":true})");
      } else if (!got.ok) {
        answer.set(beast_http::field::retry_after, std::to_string(CeilSeconds(got.retry_after_us)));
        std::string body = R"({"error":"too many in flight","limit":)";
        AppendJsonString(&body, targets->names[got.refused]);
        body += fmt::format(R"(,"retry_after_ms":{}}})",
                            std::max<int64_t>(got.retry_after_us, 0) / 1000);
        SetJson(answer, beast_http::status::too_many_requests, std::move(body));
      } else {
        const int64_t expires = ShortestMaxHold(got.holds);
        std::string body = R"({"lease":)";
        AppendJsonString(&body, engine::EncodeLease(got.holds));
        body += fmt::format(R"(,"holds":{},"expires_in_ms":{},"remaining":{}}})", got.holds.size(),
                            expires / 1000, got.remaining);
        SetJson(answer, beast_http::status::ok, std::move(body));
      }
      send(std::move(answer));
    });
  });
}

void Service::ReleaseOrRenew(const HttpRequest& request, HttpResponse& response, Deferral& deferral,
                             bool renew) {
  auto holds = LeaseOf(request.body());
  if (!holds.ok()) {
    return SetJson(response, beast_http::status::bad_request,
                   RenderError(std::string(holds.status().message())));
  }
  auto kept = std::make_shared<std::vector<backend::Hold>>(*std::move(holds));
  if (renew) {
    // A renewal lasts the limit's max_hold as configured now, whatever the lease says: a lease
    // is the client's text. A hold of no configured limit is not renewed.
    const std::shared_ptr<const rules::Config> config = config_->Current();
    std::unordered_map<uint64_t, int64_t> max_hold;
    for (const engine::ConfiguredHold& h : engine::ConfiguredConcurrency(*config)) {
      max_hold[h.limit_id] = h.max_hold_us;
    }
    std::erase_if(*kept, [&](backend::Hold& hold) {
      const auto it = max_hold.find(hold.limit_id);
      if (it != max_hold.end()) hold.max_hold_us = it->second;
      return it == max_hold.end();
    });
  }
  const int64_t now_us = clock_->NowMicros();
  AnswerMaybeLater(response, deferral, [&](Send send) {
    auto done = [kept, renew, send](absl::StatusOr<size_t> live) {
      HttpResponse answer;
      if (!live.ok()) {
        SetJson(answer, beast_http::status::service_unavailable,
                RenderError("backend: " + std::string(live.status().message())));
      } else if (renew && *live == 0) {
        SetJson(answer, beast_http::status::not_found,
                RenderError("no hold of that lease is live: acquire again"));
      } else if (renew) {
        const int64_t expires = ShortestMaxHold(*kept);
        SetJson(answer, beast_http::status::ok,
                fmt::format(R"({{"renewed":{},"expires_in_ms":{}}})", *live, expires / 1000));
      } else {
        SetJson(answer, beast_http::status::ok, fmt::format(R"({{"released":{}}})", *live));
      }
      send(std::move(answer));
    };
    if (renew) return holds_->Renew(*kept, now_us, std::move(done));
    holds_->Release(*kept, now_us, std::move(done));
  });
}

}  // namespace sluice::http
