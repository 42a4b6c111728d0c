// libFuzzer target for RLS v3 requests as the gRPC port receives them: protobuf wire bytes of a
// RateLimitRequest, through the codec (FromProto), the in-memory engine and back (ToProto), then
// rendered as upstream's /json answer.
//
// Contracts checked (any breach aborts):
//   - a request the codec accepts gets one status per descriptor, in order;
//   - overall_code is never UNKNOWN, and it is OVER_LIMIT whenever a status is;
//   - the answer serializes, parses back to the same message, and renders as JSON with 200 or
//     429 (never the 500 of a printing failure); a rejected request is a 400 there.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "rls/codec.h"
#include "rules/loader.h"

namespace {

using namespace sluice;
using ::envoy::service::ratelimit::v3::RateLimitResponse_Code_OK;
using ::envoy::service::ratelimit::v3::RateLimitResponse_Code_OVER_LIMIT;

constexpr std::string_view kConfig = R"yaml(domain: edge
plans:
  free:
    limits:
      - {requests: 2, window: 1s, algorithm: token_bucket, burst: 2}
      - {requests: 5, window: 1m, algorithm: sliding_log}
default_plan: free
descriptors:
  - key: remote_address
    rate_limit: {requests: 3, window: 1s, algorithm: leaky_bucket, burst: 1}
  - key: api_key
    plan_from: plan
  - key: generic_key
    value: unlimited
    rate_limit: {unlimited: true}
  - key: generic_key
    rate_limit: {requests: 4, unit: minute}
    descriptors:
      - key: path
        rate_limit: {requests: 1, window: 10s, algorithm: sliding_window}
  - key: shadow
    rate_limit: {requests: 1, unit: hour}
    shadow_mode: true
)yaml";

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_rls: %s\n", what);
  std::abort();
}

struct Harness {
  ManualClock clock{1'700'000'000'000'000};
  store::MemoryStore store{{.max_entries = 4096, .shards = 4}, &clock};
  engine::Engine engine{&store};
  std::shared_ptr<const rules::Config> config;

  Harness() {
    rules::LoadResult loaded = rules::LoadConfigText("fuzz.yaml", kConfig);
    for (const rules::ConfigError& e : loaded.errors) {
      std::fprintf(stderr, "%s\n", e.ToString().c_str());
    }
    if (loaded.config == nullptr) Fail("the fuzzing config does not load");
    config = loaded.config;
  }
};

Harness& GetHarness() {
  static Harness* harness = new Harness();
  return *harness;
}

void CheckAnswer(const rls::RateLimitRequest& request, const rls::RateLimitResponse& response) {
  if (response.statuses_size() != request.descriptors_size()) Fail("one status per descriptor");
  if (response.overall_code() != RateLimitResponse_Code_OK &&
      response.overall_code() != RateLimitResponse_Code_OVER_LIMIT) {
    Fail("overall_code is neither OK nor OVER_LIMIT");
  }
  for (const auto& status : response.statuses()) {
    if (status.code() == RateLimitResponse_Code_OVER_LIMIT &&
        response.overall_code() != RateLimitResponse_Code_OVER_LIMIT) {
      Fail("a descriptor over its limit, the answer not");
    }
  }
  std::string wire;
  if (!response.SerializeToString(&wire)) Fail("the answer does not serialize");
  rls::RateLimitResponse back;
  if (!back.ParseFromString(wire) || back.SerializeAsString() != wire) {
    Fail("the answer does not parse back to itself");
  }
  const rls::JsonResult json = rls::RenderJsonResponse(response);
  if (json.status != 200 && json.status != 429) Fail("the /json rendering is not 200 or 429");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness& h = GetHarness();
  rls::RateLimitRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  h.clock.Advance(1000);
  const absl::StatusOr<rls::RateLimitResponse> answer =
      rls::ShouldRateLimit(h.engine, h.config.get(), request, h.clock.NowMicros());
  if (!answer.ok()) {
    if (rls::RenderJsonResponse(answer).status != 400) Fail("a rejected request is not a 400");
    return 0;
  }
  CheckAnswer(request, *answer);
  return 0;
}
