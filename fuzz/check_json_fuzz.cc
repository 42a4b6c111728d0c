// libFuzzer target for the two JSON request bodies sluice accepts from clients: its own
// `POST /v1/check` (http::ParseCheckRequest) and envoyproxy/ratelimit's `/json`
// (rls::ParseJsonRequest, RLS v3 RateLimitRequest in proto3 JSON). Every input goes through both
// parsers; whatever parses is decided by an engine on a small in-memory config and rendered, as
// the endpoints do, so overrides, hits_addend and odd keys reach the algorithms and renderers.
// The two formats share their field names, so one corpus feeds both.
//
// The contract checked, beyond "no crash, no leak, no sanitizer report": a rejected /v1/check
// body is InvalidArgument; the rendered bodies are valid JSON.

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "http/check_json.h"
#include "rls/codec.h"
#include "rules/loader.h"
#include "sluice/clock.h"

namespace {

using namespace sluice;  // NOLINT(google-build-using-namespace): a fuzz target's file scope

constexpr std::string_view kConfig = R"yaml(domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-user}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: bucket
    rate_limit: {algorithm: token_bucket, requests: 100, window: 10s}
  - key: shadow
    rate_limit: {unit: minute, requests_per_unit: 1, shadow_mode: true}
  - key: plan
    limits:
      - {name: per-second, requests: 5, window: 1s}
      - {name: per-hour, requests: 3, window: 1h}
    descriptors:
      - key: path
        rate_limit: {algorithm: sliding_window, requests: 10, window: 1m}
)yaml";

// Small, like the endpoints' defaults would be, so long keys are rejected early and often.
constexpr size_t kMaxKeyBytes = 256;

struct Harness {
  Harness() {
    rules::LoadResult loaded = rules::LoadConfigText("fuzz.yaml", kConfig);
    if (!loaded.errors.empty()) abort();  // the target itself is broken
    config = loaded.config;
  }

  ManualClock clock{1'700'000'000'000'000};
  store::MemoryStore store{store::MemoryStore::Options{.max_entries = 1 << 10, .shards = 2},
                           &clock};
  engine::Engine engine{&store};
  std::shared_ptr<const rules::Config> config;
  simdjson::dom::parser checker;
};

void MustBeJson(Harness& h, const std::string& text) {
  simdjson::dom::element ignored;
  if (h.checker.parse(text).get(ignored) != simdjson::SUCCESS) abort();
}

void FuzzCheck(Harness& h, std::string_view body) {
  const absl::StatusOr<engine::Request> request = http::ParseCheckRequest(body, kMaxKeyBytes);
  if (!request.ok()) {
    if (!absl::IsInvalidArgument(request.status())) abort();
    MustBeJson(h, http::RenderError(std::string(request.status().message())));
    return;
  }
  MustBeJson(h,
             http::RenderCheckResponse(h.engine.Check(*h.config, *request, h.clock.NowMicros())));
}

void FuzzRls(Harness& h, std::string_view body) {
  std::variant<rls::RateLimitRequest, rls::JsonResult> parsed = rls::ParseJsonRequest(body);
  if (std::holds_alternative<rls::JsonResult>(parsed)) return;
  const rls::JsonResult answer = rls::RenderJsonResponse(rls::ShouldRateLimit(
      h.engine, h.config.get(), std::get<rls::RateLimitRequest>(parsed), h.clock.NowMicros()));
  if (answer.content_type == rls::kJsonContentType) MustBeJson(h, answer.body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* const harness = new Harness();  // one engine for the whole run, as a server
  harness->clock.Advance(10'000);                 // 10 ms between requests: windows move on
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  FuzzCheck(*harness, body);
  FuzzRls(*harness, body);
  return 0;
}
