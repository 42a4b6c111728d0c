#include "rls/codec.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "envoy/extensions/common/ratelimit/v3/ratelimit.pb.h"
#include "envoy/type/v3/ratelimit_unit.pb.h"
#include "google/protobuf/util/json_util.h"
#include "headers/rate_limit_headers.h"
#include "rls/proto_json.h"
#include "rules/loader.h"

namespace sluice::rls {
namespace {

using ::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
using ::envoy::type::v3::RateLimitUnit;
using Unit = RateLimitResponse::RateLimit::Unit;

constexpr int64_t kSecondUs = 1000000;
constexpr int64_t kDayUs = 86400 * kSecondUs;

struct UnitSpan {
  Unit unit;
  int64_t us;
  bool scalable;  // used for windows that are not exactly one unit (WEEK is not: older Envoys)
};

// Envoy's window lengths (§4, X-RateLimit headers), which are also rules::UnitMicros's.
constexpr std::array<UnitSpan, 7> kUnits = {{
    {RateLimitResponse::RateLimit::SECOND, kSecondUs, true},
    {RateLimitResponse::RateLimit::MINUTE, 60 * kSecondUs, true},
    {RateLimitResponse::RateLimit::HOUR, 3600 * kSecondUs, true},
    {RateLimitResponse::RateLimit::DAY, kDayUs, true},
    {RateLimitResponse::RateLimit::WEEK, 7 * kDayUs, false},
    {RateLimitResponse::RateLimit::MONTH, 30 * kDayUs, true},
    {RateLimitResponse::RateLimit::YEAR, 365 * kDayUs, true},
}};

// RateLimitUnit -> (window, the lower-case name rules::UnitMicros knows). The numbers of
// RateLimitUnit and RateLimit.Unit coincide (§2.2) but are mapped by name here, not cast.
struct OverrideUnit {
  int64_t window_us;
  std::string_view name;
};

bool OverrideUnitOf(int unit, OverrideUnit* out) {
  std::string_view name;
  switch (unit) {
    case ::envoy::type::v3::SECOND:
      name = "second";
      break;
    case ::envoy::type::v3::MINUTE:
      name = "minute";
      break;
    case ::envoy::type::v3::HOUR:
      name = "hour";
      break;
    case ::envoy::type::v3::DAY:
      name = "day";
      break;
    case ::envoy::type::v3::MONTH:
      name = "month";
      break;
    case ::envoy::type::v3::YEAR:
      name = "year";
      break;
    default:
      return false;
  }
  *out = {rules::UnitMicros(name), name};  // the same lengths as the YAML's `unit:`
  return true;
}

uint32_t ClampU32(int64_t value) {
  if (value <= 0) return 0;
  return value >= int64_t{kUnlimitedRemaining} ? kUnlimitedRemaining : static_cast<uint32_t>(value);
}

// floor(n * unit_us / window_us), capped at UINT32_MAX. n < 2^64, unit_us < 2^45: fits 128 bits.
uint32_t ScaledRequests(uint64_t n, int64_t unit_us, int64_t window_us) {
  __extension__ using u128 = unsigned __int128;
  const u128 v = static_cast<u128>(n) * static_cast<u128>(unit_us) / static_cast<u128>(window_us);
  return v >= kUnlimitedRemaining ? kUnlimitedRemaining : static_cast<uint32_t>(v);
}

// Seconds, rounded up, of a non-negative duration.
int64_t CeilSeconds(int64_t us) { return us <= 0 ? 0 : (us + kSecondUs - 1) / kSecondUs; }

void FillStatus(const engine::DescriptorResult& result,
                RateLimitResponse::DescriptorStatus* status) {
  status->set_code(result.code == engine::DescriptorResult::Code::kOverLimit
                       ? RateLimitResponse::OVER_LIMIT
                       : RateLimitResponse::OK);
  if (result.unlimited) {
    status->set_limit_remaining(kUnlimitedRemaining);
    return;
  }
  if (result.headline < 0) return;  // no limit applied: OK with nothing else (§3)
  const engine::AppliedLimit& limit = result.limits[static_cast<size_t>(result.headline)];
  RateLimitResponse::RateLimit* current = status->mutable_current_limit();
  *current = CurrentLimit(limit.limit);
  current->set_name(limit.name);
  status->set_limit_remaining(
      status->code() == RateLimitResponse::OVER_LIMIT ? 0 : ClampU32(limit.decision.remaining));
  status->mutable_duration_until_reset()->set_seconds(CeilSeconds(limit.decision.reset_after_us));
}

}  // namespace

absl::StatusOr<engine::Request> FromProto(const RateLimitRequest& request) {
  if (request.domain().empty()) {
    return absl::InvalidArgumentError("rate limit domain must not be empty");
  }
  if (request.descriptors().empty()) {
    return absl::InvalidArgumentError("rate limit descriptor list must not be empty");
  }
  if (static_cast<size_t>(request.descriptors_size()) > engine::kMaxRequestDescriptors) {
    return absl::InvalidArgumentError(
        absl::StrCat("rate limit descriptor list has ", request.descriptors_size(),
                     " descriptors, more than the maximum of ", engine::kMaxRequestDescriptors));
  }
  engine::Request out;
  out.domain = request.domain();
  out.hits_addend = std::max<uint64_t>(1, request.hits_addend());
  out.descriptors.reserve(static_cast<size_t>(request.descriptors_size()));
  for (int i = 0; i < request.descriptors_size(); ++i) {
    // A descriptor with no entries matches no rule: answered OK with no limit, as upstream.
    const RateLimitDescriptor& in = request.descriptors(i);
    if (static_cast<size_t>(in.entries_size()) > engine::kMaxDescriptorEntries) {
      return absl::InvalidArgumentError(
          absl::StrCat("rate limit descriptor ", i, " has ", in.entries_size(),
                       " entries, more than the maximum of ", engine::kMaxDescriptorEntries));
    }
    engine::Descriptor& d = out.descriptors.emplace_back();
    d.entries.reserve(static_cast<size_t>(in.entries_size()));
    for (int j = 0; j < in.entries_size(); ++j) {
      const RateLimitDescriptor::Entry& entry = in.entries(j);
      if (entry.key().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rate limit descriptor ", i, ", entry ", j, ": key must not be empty"));
      }
      d.entries.push_back({entry.key(), entry.value()});
    }
    if (in.has_limit()) {
      const int unit = in.limit().unit();
      OverrideUnit spec;
      if (!OverrideUnitOf(unit, &spec)) {
        const std::string name =
            ::envoy::type::v3::RateLimitUnit_IsValid(unit)
                ? ::envoy::type::v3::RateLimitUnit_Name(static_cast<RateLimitUnit>(unit))
                : absl::StrCat(unit);
        return absl::InvalidArgumentError(absl::StrCat(
            "rate limit descriptor ", i, ": limit override unit ", name,
            ::envoy::type::v3::RateLimitUnit_IsValid(unit) ? " is not a time unit"
                                                           : " is not a RateLimitUnit"));
      }
      d.limit = engine::LimitOverride{.requests_per_unit = in.limit().requests_per_unit(),
                                      .window_us = spec.window_us,
                                      .unit = std::string(spec.name)};
    }
    if (in.has_hits_addend()) d.hits_addend = in.hits_addend().value();
  }
  return out;
}

RateLimitResponse::RateLimit CurrentLimit(const Limit& limit) {
  RateLimitResponse::RateLimit out;
  const int64_t w = std::max<int64_t>(1, limit.window_us);
  for (const UnitSpan& u : kUnits) {
    if (u.us == w) {
      out.set_unit(u.unit);
      out.set_requests_per_unit(
          static_cast<uint32_t>(std::min<uint64_t>(limit.requests, kUnlimitedRemaining)));
      return out;
    }
  }
  // Not a single unit: the same rate over the longest scalable unit no longer than W.
  const UnitSpan* below = nullptr;
  const UnitSpan* above = nullptr;
  for (const UnitSpan& u : kUnits) {
    if (!u.scalable) continue;
    if (u.us <= w) {
      below = &u;
    } else if (above == nullptr) {
      above = &u;
    }
  }
  if (below == nullptr) below = kUnits.data();  // under a second: scale up to SECOND
  uint32_t n = ScaledRequests(limit.requests, below->us, w);
  const UnitSpan* unit = below;
  if (n == 0 && limit.requests > 0) {
    if (above != nullptr && below->us <= w) {
      unit = above;
      n = ScaledRequests(limit.requests, above->us, w);
    } else {
      n = 1;  // longer than a year: never read a positive limit as a block
    }
  }
  out.set_unit(unit->unit);
  out.set_requests_per_unit(n);
  return out;
}

RateLimitResponse ToProto(const engine::Response& response,
                          std::span<const HeaderField> response_headers) {
  RateLimitResponse out;
  out.mutable_statuses()->Reserve(static_cast<int>(response.descriptors.size()));
  for (const engine::DescriptorResult& result : response.descriptors) {
    FillStatus(result, out.add_statuses());
  }
  // The request's verdict, not "some status is OVER_LIMIT": in quota mode and in global shadow
  // mode a descriptor over its limit keeps its code while the request is admitted.
  out.set_overall_code(response.allowed ? RateLimitResponse::OK : RateLimitResponse::OVER_LIMIT);
  for (const HeaderField& field : response_headers) {
    ::envoy::config::core::v3::HeaderValue* header = out.add_response_headers_to_add();
    header->set_key(field.name);
    header->set_value(field.value);
  }
  return out;
}

namespace {

// The request as the engine takes it, or the error the RPC answers instead: no config,
// FromProto's, an unknown domain when the options reject it.
absl::StatusOr<engine::Request> Accept(const rules::Config* config, const RateLimitRequest& request,
                                       const RlsOptions& options) {
  if (config == nullptr) {
    return absl::FailedPreconditionError("no rate limit configuration loaded");
  }
  absl::StatusOr<engine::Request> converted = FromProto(request);
  if (!converted.ok()) return converted.status();
  if (options.reject_unknown_domain && config->FindDomain(converted->domain) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown rate limit domain \"", converted->domain, "\""));
  }
  return converted;
}

// The answer to `request` decided as `response`: the options' headers, the marker of a failure
// policy's answer, and the dynamic metadata when the options ask for it.
RateLimitResponse Answer(const RateLimitRequest& request, const engine::Response& response,
                         const RlsOptions& options) {
  std::vector<HeaderField> headers;
  if (options.response_headers) options.response_headers(response, &headers);
  RateLimitResponse out = ToProto(response, headers);
  const auto add = [&out](const std::string& name, std::string value) {
    auto* header = out.add_response_headers_to_add();
    header->set_key(name);
    header->set_value(std::move(value));
  };
  if (options.limit_headers) {  // from the statuses just made (one per descriptor, in order)
    int pick = -1;
    uint32_t lowest = std::numeric_limits<uint32_t>::max();
    for (int i = 0; i < out.statuses_size(); ++i) {
      const RateLimitResponse::DescriptorStatus& status = out.statuses(i);
      const engine::DescriptorResult& result = response.descriptors[static_cast<size_t>(i)];
      if (status.has_current_limit() && status.limit_remaining() < lowest) {
        lowest = status.limit_remaining();
        pick = i;
      }
      if (!result.unlimited && !result.quota && status.code() == RateLimitResponse::OVER_LIMIT) {
        lowest = 0;
        pick = i;
      }
    }
    if (pick >= 0 && out.statuses(pick).has_current_limit()) {
      const RateLimitResponse::DescriptorStatus& status = out.statuses(pick);
      add(options.limit_headers->limit, absl::StrCat(status.current_limit().requests_per_unit()));
      add(options.limit_headers->remaining, absl::StrCat(status.limit_remaining()));
      add(options.limit_headers->reset, absl::StrCat(status.duration_until_reset().seconds()));
    }
  }
  if (response.backend == engine::BackendState::kFailedOpen) {
    add("x-ratelimit-status", "degraded");
  } else if (response.backend == engine::BackendState::kLocal) {
    add("x-ratelimit-status", "local");
  }
  if (options.dynamic_metadata)
    *out.mutable_dynamic_metadata() = DynamicMetadata(request, response);
  return out;
}

}  // namespace

absl::StatusOr<RateLimitResponse> ShouldRateLimit(engine::Engine& engine,
                                                  const rules::Config* config,
                                                  const RateLimitRequest& request, int64_t now_us,
                                                  const RlsOptions& options) {
  absl::StatusOr<engine::Request> accepted = Accept(config, request, options);
  if (!accepted.ok()) return accepted.status();
  return Answer(request, engine.Check(*config, *accepted, now_us), options);
}

namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// Adds `from`'s keys that `into` lacks; where both hold a map, the maps are merged the same way;
// otherwise `into`'s value stays (the first one wins).
void MergeFirstWins(const Struct& from, Struct* into) {
  for (const auto& [key, value] : from.fields()) {
    auto it = into->mutable_fields()->find(key);
    if (it == into->mutable_fields()->end()) {
      (*into->mutable_fields())[key] = value;
    } else if (it->second.has_struct_value() && value.has_struct_value()) {
      MergeFirstWins(value.struct_value(), it->second.mutable_struct_value());
    }
  }
}

}  // namespace

Struct DynamicMetadata(const RateLimitRequest& request, const engine::Response& response) {
  Struct out;
  auto& fields = *out.mutable_fields();
  fields["domain"].set_string_value(request.domain());
  auto* descriptors = fields["descriptors"].mutable_list_value();
  for (const RateLimitDescriptor& d : request.descriptors()) {
    Struct& one = *descriptors->add_values()->mutable_struct_value();
    auto* entries = (*one.mutable_fields())["entries"].mutable_list_value();
    for (const auto& e : d.entries()) {
      entries->add_values()->set_string_value(absl::StrCat(e.key(), "=", e.value()));
    }
    if (d.has_limit()) {
      const int unit = d.limit().unit();
      (*one.mutable_fields())["limit"].set_string_value(
          absl::StrCat("requests_per_unit:", d.limit().requests_per_unit(), " unit:",
                       ::envoy::type::v3::RateLimitUnit_IsValid(unit)
                           ? ::envoy::type::v3::RateLimitUnit_Name(static_cast<RateLimitUnit>(unit))
                           : absl::StrCat(unit)));
    }
    if (d.has_hits_addend()) {
      (*one.mutable_fields())["hitsAddend"].set_number_value(
          static_cast<double>(d.hits_addend().value()));
    }
  }
  if (request.hits_addend() != 0) {
    fields["hitsAddend"].set_number_value(static_cast<double>(request.hits_addend()));
  }
  Struct merged;
  for (const engine::DescriptorResult& d : response.descriptors) {
    if (d.code == engine::DescriptorResult::Code::kOverLimit || d.unlimited || d.rule == nullptr ||
        d.rule->metadata_json.empty()) {
      continue;
    }
    Struct metadata;
    if (!google::protobuf::util::JsonStringToMessage(d.rule->metadata_json, &metadata).ok())
      continue;
    MergeFirstWins(metadata, &merged);
  }
  if (merged.fields_size() > 0) *fields["metadata"].mutable_struct_value() = std::move(merged);
  return out;
}

RlsOptions RlsOptionsFromSettings(const rules::Settings& settings) {
  RlsOptions options;
  options.reject_unknown_domain = settings.rls_reject_unknown_domain;
  options.dynamic_metadata = settings.rls_dynamic_metadata;
  if (settings.rls_response_headers) {
    options.response_headers = [](const engine::Response& response, std::vector<HeaderField>* out) {
      std::vector<render::Header> fields;
      render::AppendRateLimitHeaders(response, {.x_ratelimit = false, .ietf = true}, &fields);
      for (render::Header& f : fields) {
        if (f.name == "Retry-After") continue;  // Envoy sets its own on a 429
        out->push_back({std::move(f.name), std::move(f.value)});
      }
    };
  } else if (settings.rls_upstream_headers) {
    options.limit_headers = RlsOptions::LimitHeaderNames{.limit = settings.rls_limit_header,
                                                         .remaining = settings.rls_remaining_header,
                                                         .reset = settings.rls_reset_header};
  }
  return options;
}

void ShouldRateLimitAsync(engine::Engine& engine, std::shared_ptr<const rules::Config> config,
                          const RateLimitRequest& request, int64_t now_us,
                          const RlsOptions& options,
                          std::function<void(absl::StatusOr<RateLimitResponse>)> done) {
  absl::StatusOr<engine::Request> accepted = Accept(config.get(), request, options);
  if (!accepted.ok()) return done(accepted.status());
  std::vector<engine::Request> requests;
  requests.push_back(*std::move(accepted));
  std::string domain = requests.front().domain;
  // The request, for the dynamic metadata built with the answer (only then: a copy).
  std::shared_ptr<const RateLimitRequest> asked;
  if (options.dynamic_metadata) asked = std::make_shared<RateLimitRequest>(request);
  engine.CheckAllAsync(
      std::move(config), std::move(requests), now_us,
      [options, domain = std::move(domain), asked = std::move(asked),
       done = std::move(done)](std::vector<engine::Response> responses) {
        const engine::Response& response = responses.front();
        if (options.on_decision) options.on_decision(domain, response);
        if (response.backend == engine::BackendState::kFailedClosed && !response.allowed) {
          return done(
              absl::UnavailableError("rate limit backend unavailable (failure_mode: closed)"));
        }
        done(Answer(asked != nullptr ? *asked : RateLimitRequest::default_instance(), response,
                    options));
      });
}

namespace {

// Go's http.Error(w, http.StatusText(code), code): the text and a newline.
JsonResult TextAnswer(int status, std::string_view message) {
  std::string body(message);
  body += '\n';
  return JsonResult{
      .status = status, .content_type = kTextContentType, .body = std::move(body), .nosniff = true};
}

}  // namespace

std::variant<RateLimitRequest, JsonResult> ParseJsonRequest(std::string_view body) {
  // Go's protojson rejects an empty document; protobuf's C++ parser would accept it as `{}`.
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return TextAnswer(400, "Bad Request");
  }
  RateLimitRequest request;
  google::protobuf::util::JsonParseOptions parse_options;
  parse_options.ignore_unknown_fields = false;  // upstream's protojson is strict
  if (!google::protobuf::util::JsonStringToMessage(
           google::protobuf::StringPiece(body.data(), body.size()), &request, parse_options)
           .ok()) {
    return TextAnswer(400, "Bad Request");
  }
  return request;
}

JsonResult RenderJsonResponse(const absl::StatusOr<RateLimitResponse>& response) {
  if (absl::IsUnavailable(response.status())) return TextAnswer(503, "Service Unavailable");
  if (!response.ok()) return TextAnswer(400, "Bad Request");

  JsonResult result{.status = 200, .content_type = kJsonContentType, .body = {}, .nosniff = false};
  // As protojson.Marshal with default options (proto_json.h).
  if (!AppendProtoJson(*response, &result.body)) return TextAnswer(500, "Internal Server Error");
  switch (response->overall_code()) {
    case RateLimitResponse::OK:
      result.status = 200;
      break;
    case RateLimitResponse::OVER_LIMIT:
      result.status = 429;
      break;
    default:
      result.status = 500;
      break;
  }
  return result;
}

JsonResult HandleJson(std::string_view body, ShouldRateLimitFn should_rate_limit) {
  std::variant<RateLimitRequest, JsonResult> parsed = ParseJsonRequest(body);
  if (auto* answer = std::get_if<JsonResult>(&parsed)) return std::move(*answer);
  const absl::StatusOr<RateLimitResponse> response =
      should_rate_limit(std::get<RateLimitRequest>(parsed));
  // The synchronous path has no backend to fail: any error is the request's.
  if (!response.ok()) return TextAnswer(400, "Bad Request");
  return RenderJsonResponse(response);
}

void AnswerJson(std::string_view body, engine::Engine& engine,
                const rules::ConfigManager& config_manager, const Clock& clock,
                RecordDecisionFn record_decision, std::function<void(JsonResult)> done) {
  std::variant<RateLimitRequest, JsonResult> parsed = ParseJsonRequest(body);
  if (auto* answer = std::get_if<JsonResult>(&parsed)) return done(std::move(*answer));
  std::shared_ptr<const rules::Config> config = config_manager.Current();
  RlsOptions options = config ? RlsOptionsFromSettings(config->settings) : RlsOptions{};
  const int64_t now_us = clock.NowMicros();
  if (record_decision) {
    const int64_t start_us = clock.MonotonicMicros();  // for the latency
    options.on_decision = [&clock, start_us, record = std::move(record_decision)](
                              std::string_view domain, const engine::Response& decision) {
      record(domain, decision, clock.MonotonicMicros() - start_us);
    };
  }
  ShouldRateLimitAsync(engine, std::move(config), std::get<RateLimitRequest>(parsed), now_us,
                       options, [done = std::move(done)](absl::StatusOr<RateLimitResponse> result) {
                         done(RenderJsonResponse(result));
                       });
}

}  // namespace sluice::rls
