// The Envoy Rate Limit Service (RLS v3) codec: RateLimitRequest -> engine::Request,
// engine::Response -> RateLimitResponse, and envoyproxy/ratelimit's `/json` endpoint as a pure
// function. Every frontend that speaks RLS (gRPC ShouldRateLimit, HTTP /json) goes through here,
// so the two answer identically. The messages are sluice's own .proto files (src/rls/proto),
// wire-identical to Envoy's.
//
// Thread safety: every function is a pure function of its arguments, except ShouldRateLimit,
// which is as thread-safe as the Engine it is given (Engine is safe for concurrent use).
// Units: durations in whole seconds, rounded up; counts clamped to uint32.
//
// Design: docs/rls.md#7-how-sluices-codec-fills-the-answer (how each status is filled); the
// contract it follows is the rest of docs/rls.md, whose section numbers (§3) are cited below.

#ifndef SLUICE_RLS_CODEC_H_
#define SLUICE_RLS_CODEC_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "rules/config.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"
#include "sluice/limit.h"

namespace sluice::rls {

using RateLimitRequest = ::envoy::service::ratelimit::v3::RateLimitRequest;
using RateLimitResponse = ::envoy::service::ratelimit::v3::RateLimitResponse;

// limit_remaining of an `unlimited: true` descriptor (§3): UINT32_MAX.
inline constexpr uint32_t kUnlimitedRemaining = 0xFFFFFFFFu;

// Checks a RateLimitRequest and converts it for Engine::Check.
//
// InvalidArgument, with the message upstream uses where it has one:
//   "rate limit domain must not be empty"
//   "rate limit descriptor list must not be empty"
//   "rate limit descriptor 2 has no entries"                    (Envoy's validate rule, re-done)
//   "rate limit descriptor 2, entry 0: key must not be empty"   (idem)
//   "rate limit descriptor list has 65 descriptors, more than the maximum of 64"  (sluice's
//   "rate limit descriptor 2 has 33 entries, more than the maximum of 32"         bounds, see
//                                                                   engine::kMaxRequestDescriptors)
//   "rate limit descriptor 2: limit override unit UNKNOWN is not a time unit"  (upstream panics)
//   "rate limit descriptor 2: limit override unit 9 is not a RateLimitUnit"
// Semantics (§2.2, §4 GetHitsAddends): request hits_addend 0/unset -> 1; a descriptor's
// hits_addend, when present, replaces it for that descriptor (0 = check without consuming);
// a `limit` override becomes LimitOverride{requests_per_unit, window_us = the unit (MONTH 30 d,
// YEAR 365 d, as rules::UnitMicros), unit = "second" ... "year"}. Entry values may be empty.
absl::StatusOr<engine::Request> FromProto(const RateLimitRequest& request);

// A header field already rendered by the caller (e.g. the IETF RateLimit / RateLimit-Policy
// fields of src/headers), to be carried in response_headers_to_add.
struct HeaderField {
  std::string name;
  std::string value;
};

// Renders the engine's answer (§3, filled in as §7 says). `response_headers` go, in order, into
// response_headers_to_add (key = name, value = value; raw_value never set). Pass none to
// answer exactly as envoyproxy/ratelimit does by default (LIMIT_RESPONSE_HEADERS_ENABLED off):
// that is sluice's default, and then the /json body holds only overallCode and statuses.
// request_headers_to_add, raw_body, dynamic_metadata and quota are never set.
RateLimitResponse ToProto(const engine::Response& response,
                          std::span<const HeaderField> response_headers = {});

// A limit's N per W as RLS current_limit (requests_per_unit, unit; name left empty). RLS can
// only say "N per one unit", so:
// * W exactly one unit (SECOND, MINUTE, HOUR, DAY, WEEK = 7 d, MONTH = 30 d, YEAR = 365 d):
//   N per that unit, exactly. This covers every rule written with `unit:` and every override.
//   WEEK (= 7) is understood by Envoy since Dec 2024; older Envoys skip that policy item.
// * Otherwise the same rate over the longest unit no longer than W (WEEK excluded, for older
//   Envoys): floor(N * unit / W), e.g. 100 per 10 s -> 10 per SECOND, 5 per 90 min -> 3 per
//   HOUR. The rate is never overstated; the implied burst is smaller than the real one, so a
//   client pacing itself by it is never denied for it. When that rounds to 0 (N >= 1), the
//   shortest unit longer than W instead (1 per 90 s -> 40 per HOUR, 1 per 5 s -> 12 per
//   MINUTE). W under a second: N / W scaled to SECOND (1 per 100 ms -> 10 per SECOND).
//   W over a year: YEAR, at least 1 when N >= 1.
// * requests_per_unit is capped at 4294967295. N == 0 stays 0 (a block).
// * For token/leaky buckets N per W is the refill rate; the burst is not expressible.
RateLimitResponse::RateLimit CurrentLimit(const Limit& limit);

// How ShouldRateLimit answers beyond the engine.
struct RlsOptions {
  // envoyproxy/ratelimit answers an unknown domain with OK and no limits (§3), and so does
  // sluice by default. When true, an unknown domain is NotFound("unknown rate limit domain
  // \"D\"") instead (the /json endpoint turns any error into 400).
  bool reject_unknown_domain = false;
  // When set, its fields go into response_headers_to_add (off by default: upstream's answer).
  std::function<void(const engine::Response&, std::vector<HeaderField>*)> response_headers;
  // ShouldRateLimitAsync tells it of every decision (for metrics).
  std::function<void(std::string_view domain, const engine::Response&)> on_decision;
  // The answer carries dynamic_metadata, as upstream's RESPONSE_DYNAMIC_METADATA builds it
  // (DynamicMetadata below).
  bool dynamic_metadata = false;
  // Upstream's LIMIT_RESPONSE_HEADERS_ENABLED: response_headers_to_add gets the limit, remaining
  // and reset (seconds) of the descriptor closest to its limit, picked as upstream picks it (the
  // lowest limit_remaining among those with a limit, unless one not in quota mode is over its
  // limit: then the last such), under these names.
  struct LimitHeaderNames {
    std::string limit, remaining, reset;
  };
  std::optional<LimitHeaderNames> limit_headers;
};

// Upstream's dynamic metadata for `request` and its decision: {"domain", "descriptors": [{
// "entries": ["k=v", ...], "limit": the request's override in protobuf text form, when given,
// "hitsAddend": the descriptor's, when given}], "hitsAddend": the request's, when not 0,
// "metadata": the rules' `metadata` of the descriptors not over their limit (nor unlimited),
// merged in request order, the first value of a key winning (maps merged key by key)}.
google::protobuf::Struct DynamicMetadata(const RateLimitRequest& request,
                                         const engine::Response& response);

// The options the settings ask for: `rls.unknown_domain: error` rejects unknown domains, and
// `rls.response_headers: true` puts the IETF RateLimit-Policy / RateLimit fields (the same as the
// HTTP endpoints send) into response_headers_to_add.
RlsOptions RlsOptionsFromSettings(const rules::Settings& settings);

// The whole ShouldRateLimit RPC on one config snapshot: FromProto, Engine::Check at `now_us`,
// ToProto. `config` may be null: FailedPrecondition("no rate limit configuration loaded"), as
// upstream. Other errors are FromProto's and the unknown-domain one above. gRPC frontends map a
// non-OK status to a gRPC error; upstream sends its errors as grpc-status 2 (UNKNOWN).
absl::StatusOr<RateLimitResponse> ShouldRateLimit(engine::Engine& engine,
                                                  const rules::Config* config,
                                                  const RateLimitRequest& request, int64_t now_us,
                                                  const RlsOptions& options = {});

// ShouldRateLimit decided by Engine::CheckAllAsync (the Redis backend): the same answers, and
// when the backend failed and the domain's failure_mode is closed, Unavailable (gRPC
// UNAVAILABLE; Envoy's failure_mode_deny then decides). A request admitted by failure_mode open
// carries `x-ratelimit-status: degraded` in response_headers_to_add. `done` runs once, on any
// thread, perhaps before this returns.
void ShouldRateLimitAsync(engine::Engine& engine, std::shared_ptr<const rules::Config> config,
                          const RateLimitRequest& request, int64_t now_us,
                          const RlsOptions& options,
                          std::function<void(absl::StatusOr<RateLimitResponse>)> done);

// The answer of the /json endpoint, ready to send.
struct JsonResult {
  int status = 200;
  std::string_view content_type;  // static storage
  std::string body;
  // Go's http.Error also sends `X-Content-Type-Options: nosniff` with its text answers.
  bool nosniff = false;
};

inline constexpr std::string_view kJsonContentType = "application/json";
inline constexpr std::string_view kTextContentType = "text/plain; charset=utf-8";

// envoyproxy/ratelimit's `/json` handler (§6.1), byte for byte where docs/rls.md pins bytes.
// `body` is a RateLimitRequest in proto3 JSON (strict: an unknown field is an error; snake_case
// and lowerCamelCase names both accepted; enums as names or numbers; uint64 as number or
// string). `should_rate_limit` is the RPC (normally ShouldRateLimit above, bound to an engine and
// a config snapshot); it is called at most once.
//   empty body, invalid JSON or proto JSON, or should_rate_limit error
//       -> 400, text/plain; charset=utf-8, "Bad Request\n"
//   JSON printing failure -> 500, text/plain; charset=utf-8, "Internal Server Error\n"
//   otherwise the response in proto3 JSON (lowerCamelCase names, enum names, zero values and
//   unset fields omitted, no whitespace, fields in number order), application/json, with
//       overall_code OK -> 200, OVER_LIMIT -> 429, UNKNOWN -> 500 (body `{}` when empty).
// The method is not checked (upstream does not). response_headers_to_add appear in the body
// only, never as HTTP headers of this answer.
using ShouldRateLimitFn =
    absl::FunctionRef<absl::StatusOr<RateLimitResponse>(const RateLimitRequest&)>;
JsonResult HandleJson(std::string_view body, ShouldRateLimitFn should_rate_limit);

// HandleJson in two halves, for an RPC answered later: the request (or the answer to send
// instead), then the answer to the RPC's result. Unavailable becomes 503 "Service Unavailable".
std::variant<RateLimitRequest, JsonResult> ParseJsonRequest(std::string_view body);
JsonResult RenderJsonResponse(const absl::StatusOr<RateLimitResponse>& response);

// The /json endpoint as the HTTP service serves it (http/json_endpoint.h; `serve` binds the two):
// ParseJsonRequest, then the config snapshot and the time (`clock`), RlsOptionsFromSettings,
// ShouldRateLimitAsync and RenderJsonResponse. `record_decision` (may be empty) is told of the
// engine's decision and of the µs since that time. `done` runs once, on any thread, perhaps
// before this returns. `engine`, `config_manager` and `clock` must outlive the call's answer.
using RecordDecisionFn = std::function<void(std::string_view domain,
                                            const engine::Response& decision, int64_t elapsed_us)>;
void AnswerJson(std::string_view body, engine::Engine& engine,
                const rules::ConfigManager& config_manager, const Clock& clock,
                RecordDecisionFn record_decision, std::function<void(JsonResult)> done);

}  // namespace sluice::rls

#endif  // SLUICE_RLS_CODEC_H_
