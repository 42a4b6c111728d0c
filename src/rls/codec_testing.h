// Helpers shared by the RLS codec's tests (codec_*_test.cc): times in µs and t0 (a ManualClock's
// 1700000000 s: on a second boundary, 20 s into a minute), requests built in one expression, and
// the RlsTest fixture: a real engine on a MemoryStore with a config of one domain, `edge`, and
// ShouldRateLimit and HandleJson called on it. A fixture belongs to one test.

#ifndef SLUICE_RLS_CODEC_TESTING_H_
#define SLUICE_RLS_CODEC_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "envoy/extensions/common/ratelimit/v3/ratelimit.pb.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rls/codec.h"
#include "rules/loader.h"
#include "sluice/clock.h"
#include "tests/support/units.h"

namespace sluice::rls::test {

using ::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

inline constexpr int64_t kSecondUs = 1000000;
inline constexpr int64_t kMinuteUs = 60 * kSecondUs;
inline constexpr int64_t kHourUs = 3600 * kSecondUs;
inline constexpr int64_t kDayUs = 86400 * kSecondUs;
using sluice::testing::kT0;

// A descriptor of `entries` (key, value), added to `request`.
inline RateLimitDescriptor* AddDescriptor(
    RateLimitRequest* request, const std::vector<std::pair<std::string, std::string>>& entries) {
  RateLimitDescriptor* d = request->add_descriptors();
  for (const auto& [key, value] : entries) {
    RateLimitDescriptor::Entry* e = d->add_entries();
    e->set_key(key);
    e->set_value(value);
  }
  return d;
}

// A request of one descriptor, key=value, in `domain`.
inline RateLimitRequest Request1(std::string domain, std::string key, std::string value) {
  RateLimitRequest request;
  request.set_domain(std::move(domain));
  AddDescriptor(&request, {{std::move(key), std::move(value)}});
  return request;
}

// The fixture's config: one domain, `edge`, of one limit of each kind.
inline constexpr std::string_view kConfig = R"yaml(domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: monitor
    rate_limit: {unlimited: true}
  - key: login
    rate_limit: {name: login, unit: minute, requests_per_unit: 2}
  - key: shadow
    rate_limit: {unit: minute, requests_per_unit: 1, shadow_mode: true}
  - key: bucket
    rate_limit: {algorithm: token_bucket, requests: 100, window: 10s}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 3}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: plan
    limits:
      - {name: per-second, requests: 5, window: 1s}
      - {name: per-hour, requests: 3, window: 1h}
)yaml";

inline RlsOptions RejectUnknown() {
  RlsOptions options;
  options.reject_unknown_domain = true;
  return options;
}

class RlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rules::LoadResult loaded = rules::LoadConfigText("test.yaml", kConfig);
    ASSERT_THAT(loaded.errors, ::testing::IsEmpty())
        << (loaded.errors.empty() ? "" : loaded.errors[0].ToString());
    config_ = loaded.config;
  }

  absl::StatusOr<RateLimitResponse> Call(const RateLimitRequest& request,
                                         const RlsOptions& options = {}) {
    return ShouldRateLimit(engine_, config_.get(), request, clock_.NowMicros(), options);
  }

  RateLimitResponse Ok(const RateLimitRequest& request) {
    absl::StatusOr<RateLimitResponse> r = Call(request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RateLimitResponse();
  }

  JsonResult Json(std::string_view body, const RlsOptions& options = {}) {
    return HandleJson(body,
                      [&](const RateLimitRequest& request) { return Call(request, options); });
  }

  ManualClock clock_{kT0};
  store::MemoryStore store_{store::MemoryStore::Options{.max_entries = 1 << 12, .shards = 4},
                            &clock_};
  engine::Engine engine_{&store_};
  std::shared_ptr<const rules::Config> config_;
};

}  // namespace sluice::rls::test

#endif  // SLUICE_RLS_CODEC_TESTING_H_
