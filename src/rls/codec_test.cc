// The RLS v3 codec (codec.h): request validation and conversion, the answer as envoyproxy/ratelimit
// fills it (docs/rls.md §3), current_limit for windows that are not one unit, the
// /json endpoint's exact bytes and statuses (§6.1), and a wire check of our .proto files against
// the field numbers of §2, with bytes encoded and decoded by hand in this file.
// Time is a ManualClock at t0 = 1700000000 s: on a second boundary, 20 s into a minute.

#include "rls/codec.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/memory/memory_store.h"
#include "envoy/extensions/common/ratelimit/v3/ratelimit.pb.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "envoy/type/v3/ratelimit_unit.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rls/wire_testing.h"
#include "rules/loader.h"
#include "sluice/clock.h"
#include "tests/support/limits.h"

namespace sluice::rls {
namespace {

using ::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using wire::Decode;
using wire::kLen;
using wire::kVarint;
using wire::LenField;
using wire::Shape;
using wire::VarintField;
using wire::WireField;
using RateLimit = RateLimitResponse::RateLimit;
using Status = RateLimitResponse::DescriptorStatus;

constexpr int64_t kSecondUs = 1000000;
constexpr int64_t kMinuteUs = 60 * kSecondUs;
constexpr int64_t kHourUs = 3600 * kSecondUs;
constexpr int64_t kDayUs = 86400 * kSecondUs;
constexpr int64_t kT0 = int64_t{1700000000} * kSecondUs;

// ---------------------------------------------------------------------------------------------
// Building requests.

RateLimitDescriptor* AddDescriptor(
    RateLimitRequest* request, const std::vector<std::pair<std::string, std::string>>& entries) {
  RateLimitDescriptor* d = request->add_descriptors();
  for (const auto& [key, value] : entries) {
    RateLimitDescriptor::Entry* e = d->add_entries();
    e->set_key(key);
    e->set_value(value);
  }
  return d;
}

RateLimitRequest Request1(std::string domain, std::string key, std::string value) {
  RateLimitRequest request;
  request.set_domain(std::move(domain));
  AddDescriptor(&request, {{std::move(key), std::move(value)}});
  return request;
}

// ---------------------------------------------------------------------------------------------
// FromProto.

TEST(FromProtoTest, CopiesDomainAndEntriesInOrder) {
  RateLimitRequest request;
  request.set_domain("edge");
  AddDescriptor(&request, {{"remote_address", "10.0.0.1"}, {"path", "/login"}});
  AddDescriptor(&request, {{"generic_key", ""}});
  const absl::StatusOr<engine::Request> r = FromProto(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->domain, "edge");
  ASSERT_THAT(r->descriptors, SizeIs(2));
  ASSERT_THAT(r->descriptors[0].entries, SizeIs(2));
  EXPECT_EQ(r->descriptors[0].entries[0].key, "remote_address");
  EXPECT_EQ(r->descriptors[0].entries[0].value, "10.0.0.1");
  EXPECT_EQ(r->descriptors[0].entries[1].key, "path");
  EXPECT_EQ(r->descriptors[0].entries[1].value, "/login");
  ASSERT_THAT(r->descriptors[1].entries, SizeIs(1));
  EXPECT_EQ(r->descriptors[1].entries[0].value, "");  // empty values are allowed
  EXPECT_FALSE(r->descriptors[0].limit.has_value());
  EXPECT_FALSE(r->descriptors[0].hits_addend.has_value());
}

TEST(FromProtoTest, EmptyDomainIsRejectedWithUpstreamsMessage) {
  const absl::StatusOr<engine::Request> r = FromProto(Request1("", "k", "v"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "rate limit domain must not be empty");
}

TEST(FromProtoTest, NoDescriptorsIsRejectedWithUpstreamsMessage) {
  RateLimitRequest request;
  request.set_domain("edge");
  const absl::StatusOr<engine::Request> r = FromProto(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "rate limit descriptor list must not be empty");
}

// Issue 19 (7): upstream takes a descriptor with no entries (it matches no rule); only an empty
// descriptor list is an error.
TEST(FromProtoTest, DescriptorWithoutEntriesIsTaken) {
  RateLimitRequest request = Request1("edge", "k", "v");
  request.add_descriptors();
  const absl::StatusOr<engine::Request> r = FromProto(request);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_THAT(r->descriptors, SizeIs(2));
  EXPECT_THAT(r->descriptors[1].entries, IsEmpty());
}

TEST(FromProtoTest, EmptyEntryKeyIsRejected) {
  RateLimitRequest request = Request1("edge", "k", "v");
  AddDescriptor(&request, {{"a", "1"}, {"", "2"}});
  const absl::StatusOr<engine::Request> r = FromProto(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "rate limit descriptor 1, entry 1: key must not be empty");
}

// A request is decided at once on one thread: its descriptors and their entries are bounded.
TEST(FromProtoTest, DescriptorsAndEntriesAreBounded) {
  RateLimitRequest request;
  request.set_domain("edge");
  for (int i = 0; i < 64; ++i) AddDescriptor(&request, {{"k", "v"}});
  EXPECT_TRUE(FromProto(request).ok());
  AddDescriptor(&request, {{"k", "v"}});
  absl::StatusOr<engine::Request> r = FromProto(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "rate limit descriptor list has 65 descriptors, more than the maximum of 64");

  RateLimitRequest wide = Request1("edge", "k", "v");
  std::vector<std::pair<std::string, std::string>> entries(32, {"k", "v"});
  AddDescriptor(&wide, entries);
  EXPECT_TRUE(FromProto(wide).ok());
  entries.emplace_back("k", "v");
  AddDescriptor(&wide, entries);
  r = FromProto(wide);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "rate limit descriptor 2 has 33 entries, more than the maximum of 32");
}

TEST(FromProtoTest, RequestHitsAddendZeroOrUnsetMeansOne) {
  RateLimitRequest request = Request1("edge", "k", "v");
  EXPECT_EQ(FromProto(request)->hits_addend, 1u);
  request.set_hits_addend(0);
  EXPECT_EQ(FromProto(request)->hits_addend, 1u);
  request.set_hits_addend(7);
  EXPECT_EQ(FromProto(request)->hits_addend, 7u);
  request.set_hits_addend(0xFFFFFFFFu);
  EXPECT_EQ(FromProto(request)->hits_addend, 0xFFFFFFFFu);
}

TEST(FromProtoTest, DescriptorHitsAddendOverridesOnlyWhenPresentAndZeroIsKept) {
  RateLimitRequest request = Request1("edge", "a", "1");
  request.set_hits_addend(5);
  AddDescriptor(&request, {{"b", "2"}})->mutable_hits_addend()->set_value(0);
  AddDescriptor(&request, {{"c", "3"}})->mutable_hits_addend()->set_value(3);
  AddDescriptor(&request, {{"d", "4"}})->mutable_hits_addend()->set_value(UINT64_MAX);
  const absl::StatusOr<engine::Request> r = FromProto(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hits_addend, 5u);
  EXPECT_FALSE(r->descriptors[0].hits_addend.has_value());               // the request's applies
  EXPECT_EQ(r->descriptors[1].hits_addend, std::optional<uint64_t>(0));  // peek
  EXPECT_EQ(r->descriptors[2].hits_addend, std::optional<uint64_t>(3));
  EXPECT_EQ(r->descriptors[3].hits_addend, std::optional<uint64_t>(UINT64_MAX));
}

TEST(FromProtoTest, OverrideUnitsBecomeWindows) {
  struct Case {
    ::envoy::type::v3::RateLimitUnit unit;
    int64_t window_us;
    std::string name;
  };
  const Case cases[] = {
      {::envoy::type::v3::SECOND, kSecondUs, "second"},
      {::envoy::type::v3::MINUTE, kMinuteUs, "minute"},
      {::envoy::type::v3::HOUR, kHourUs, "hour"},
      {::envoy::type::v3::DAY, kDayUs, "day"},
      {::envoy::type::v3::MONTH, 30 * kDayUs, "month"},
      {::envoy::type::v3::YEAR, 365 * kDayUs, "year"},
  };
  for (const Case& c : cases) {
    RateLimitRequest request = Request1("edge", "k", "v");
    auto* limit = request.mutable_descriptors(0)->mutable_limit();
    limit->set_requests_per_unit(42);
    limit->set_unit(c.unit);
    const absl::StatusOr<engine::Request> r = FromProto(request);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->descriptors[0].limit.has_value());
    EXPECT_EQ(r->descriptors[0].limit->requests_per_unit, 42u) << c.name;
    EXPECT_EQ(r->descriptors[0].limit->window_us, c.window_us) << c.name;
    EXPECT_EQ(r->descriptors[0].limit->unit, c.name);
    // The same windows as the YAML units.
    EXPECT_EQ(rules::UnitMicros(c.name), c.window_us);
  }
}

TEST(FromProtoTest, OverrideWithZeroRequestsIsKept) {
  RateLimitRequest request = Request1("edge", "k", "v");
  request.mutable_descriptors(0)->mutable_limit()->set_unit(::envoy::type::v3::HOUR);
  const absl::StatusOr<engine::Request> r = FromProto(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->descriptors[0].limit->requests_per_unit, 0u);  // a block, as upstream
}

TEST(FromProtoTest, OverrideWithUnknownUnitIsRejectedNotACrash) {
  RateLimitRequest request = Request1("edge", "k", "v");
  AddDescriptor(&request, {{"k", "w"}})->mutable_limit()->set_requests_per_unit(5);  // UNKNOWN
  const absl::StatusOr<engine::Request> r = FromProto(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "rate limit descriptor 1: limit override unit UNKNOWN is not a time unit");
}

TEST(FromProtoTest, OverrideWithUndefinedUnitNumberIsRejected) {
  // Proto3 enums are open: 7 (WEEK in RateLimit.Unit, not in RateLimitUnit) and 99 parse.
  for (int unit : {7, 99, -1}) {
    RateLimitRequest request = Request1("edge", "k", "v");
    auto* limit = request.mutable_descriptors(0)->mutable_limit();
    limit->set_requests_per_unit(5);
    limit->set_unit(static_cast<::envoy::type::v3::RateLimitUnit>(unit));
    const absl::StatusOr<engine::Request> r = FromProto(request);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << unit;
    EXPECT_EQ(r.status().message(), "rate limit descriptor 0: limit override unit " +
                                        std::to_string(unit) + " is not a RateLimitUnit");
  }
}

// ---------------------------------------------------------------------------------------------
// CurrentLimit: N per W as requests_per_unit + unit.

using testing::FixedWindow;

std::pair<uint32_t, RateLimit::Unit> Current(uint64_t n, int64_t window_us) {
  const RateLimit r = CurrentLimit(FixedWindow(n, window_us));
  EXPECT_EQ(r.name(), "");
  return {r.requests_per_unit(), r.unit()};
}

TEST(CurrentLimitTest, WindowOfExactlyOneUnitIsSentAsIs) {
  EXPECT_EQ(Current(10, kSecondUs), std::make_pair(10u, RateLimit::SECOND));
  EXPECT_EQ(Current(5, kMinuteUs), std::make_pair(5u, RateLimit::MINUTE));
  EXPECT_EQ(Current(1000, kHourUs), std::make_pair(1000u, RateLimit::HOUR));
  EXPECT_EQ(Current(7, kDayUs), std::make_pair(7u, RateLimit::DAY));
  EXPECT_EQ(Current(3, 7 * kDayUs), std::make_pair(3u, RateLimit::WEEK));
  EXPECT_EQ(Current(2, 30 * kDayUs), std::make_pair(2u, RateLimit::MONTH));
  EXPECT_EQ(Current(1, 365 * kDayUs), std::make_pair(1u, RateLimit::YEAR));
  EXPECT_EQ(Current(0, kSecondUs), std::make_pair(0u, RateLimit::SECOND));  // a block stays one
  EXPECT_EQ(Current(0xFFFFFFFFu, kSecondUs), std::make_pair(0xFFFFFFFFu, RateLimit::SECOND));
}

TEST(CurrentLimitTest, OtherWindowsKeepTheRateOverTheLongestUnitNotLongerThanTheWindow) {
  EXPECT_EQ(Current(100, 10 * kSecondUs), std::make_pair(10u, RateLimit::SECOND));
  EXPECT_EQ(Current(5, 90 * kMinuteUs), std::make_pair(3u, RateLimit::HOUR));  // 3.33, rounded down
  EXPECT_EQ(Current(1000, 10 * kDayUs),
            std::make_pair(100u, RateLimit::DAY));  // WEEK is not scaled to
  EXPECT_EQ(Current(600, kDayUs * 365 * 2), std::make_pair(300u, RateLimit::YEAR));
  EXPECT_EQ(Current(0, 10 * kSecondUs), std::make_pair(0u, RateLimit::SECOND));
}

TEST(CurrentLimitTest, APositiveLimitNeverReadsAsZero) {
  EXPECT_EQ(Current(1, 90 * kSecondUs), std::make_pair(40u, RateLimit::HOUR));
  EXPECT_EQ(Current(1, 5 * kSecondUs), std::make_pair(12u, RateLimit::MINUTE));
  EXPECT_EQ(Current(1, kDayUs * 365 * 3), std::make_pair(1u, RateLimit::YEAR));  // beyond a year
}

TEST(CurrentLimitTest, SubSecondWindowsScaleUpToASecondAndCap) {
  EXPECT_EQ(Current(1, 100000), std::make_pair(10u, RateLimit::SECOND));
  EXPECT_EQ(Current(3, 250000), std::make_pair(12u, RateLimit::SECOND));
  EXPECT_EQ(Current(0xFFFFFFFFu, 1), std::make_pair(0xFFFFFFFFu, RateLimit::SECOND));  // capped
}

TEST(CurrentLimitTest, TokenBucketReportsItsRateNotItsBurst) {
  const RateLimit r = CurrentLimit(Limit{
      .algorithm = Algorithm::kTokenBucket, .requests = 100, .window_us = kSecondUs, .burst = 200});
  EXPECT_EQ(r.requests_per_unit(), 100u);
  EXPECT_EQ(r.unit(), RateLimit::SECOND);
}

// ---------------------------------------------------------------------------------------------
// ToProto and ShouldRateLimit on a real engine.

constexpr std::string_view kConfig = R"yaml(domain: edge
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

RlsOptions RejectUnknown() {
  RlsOptions options;
  options.reject_unknown_domain = true;
  return options;
}

class RlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rules::LoadResult loaded = rules::LoadConfigText("test.yaml", kConfig);
    ASSERT_THAT(loaded.errors, IsEmpty())
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

TEST_F(RlsTest, WithinLimitReportsLimitRemainingAndReset) {
  const RateLimitResponse r = Ok(Request1("edge", "remote_address", "10.0.0.1"));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(r.statuses_size(), 1);
  const Status& s = r.statuses(0);
  EXPECT_EQ(s.code(), RateLimitResponse::OK);
  ASSERT_TRUE(s.has_current_limit());
  EXPECT_EQ(s.current_limit().requests_per_unit(), 10u);
  EXPECT_EQ(s.current_limit().unit(), RateLimit::SECOND);
  EXPECT_EQ(s.current_limit().name(), "");
  EXPECT_EQ(s.limit_remaining(), 9u);
  ASSERT_TRUE(s.has_duration_until_reset());
  EXPECT_EQ(s.duration_until_reset().seconds(), 1);
  EXPECT_EQ(s.duration_until_reset().nanos(), 0);
  EXPECT_EQ(r.response_headers_to_add_size(), 0);
  EXPECT_EQ(r.request_headers_to_add_size(), 0);
  EXPECT_FALSE(r.has_dynamic_metadata());
  EXPECT_FALSE(r.has_quota());
  EXPECT_EQ(r.raw_body(), "");
}

TEST_F(RlsTest, DurationUntilResetIsUpstreamsDividerMinusNowModDividerRoundedUp) {
  clock_.Set(kT0 + 500000);  // 20.5 s into the minute: upstream says 60 - 20 = 40
  const RateLimitResponse r = Ok(Request1("edge", "login", "alice"));
  EXPECT_EQ(r.statuses(0).duration_until_reset().seconds(), 40);
  EXPECT_EQ(r.statuses(0).duration_until_reset().nanos(), 0);
}

TEST_F(RlsTest, OverLimitReportsZeroRemainingAndOverallOverLimit) {
  for (int i = 0; i < 2; ++i) Ok(Request1("edge", "login", "alice"));
  const RateLimitResponse r = Ok(Request1("edge", "login", "alice"));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OVER_LIMIT);
  const Status& s = r.statuses(0);
  EXPECT_EQ(s.code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(s.current_limit().requests_per_unit(), 2u);
  EXPECT_EQ(s.current_limit().unit(), RateLimit::MINUTE);
  EXPECT_EQ(s.current_limit().name(), "login");  // the rule's name (Envoy's name="...")
  EXPECT_EQ(s.limit_remaining(), 0u);
  EXPECT_EQ(s.duration_until_reset().seconds(), 40);
}

TEST_F(RlsTest, OverLimitReportsZeroRemainingEvenWithUnitsLeft) {
  RateLimitRequest request = Request1("edge", "remote_address", "10.0.0.9");
  request.set_hits_addend(11);  // more than the 10 there are: denied, 10 left
  const RateLimitResponse r = Ok(request);
  EXPECT_EQ(r.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 0u);
}

TEST_F(RlsTest, NoRuleMatchedIsOkWithNothingElse) {
  const RateLimitResponse r = Ok(Request1("edge", "no_such_key", "x"));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  const Status& s = r.statuses(0);
  EXPECT_EQ(s.code(), RateLimitResponse::OK);
  EXPECT_FALSE(s.has_current_limit());
  EXPECT_EQ(s.limit_remaining(), 0u);
  EXPECT_FALSE(s.has_duration_until_reset());
}

TEST_F(RlsTest, UnknownDomainIsOkWithNoLimitByDefault) {
  RateLimitRequest request = Request1("nowhere", "remote_address", "10.0.0.1");
  AddDescriptor(&request, {{"login", "alice"}});
  const RateLimitResponse r = Ok(request);
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(r.statuses_size(), 2);
  for (const Status& s : r.statuses()) {
    EXPECT_EQ(s.code(), RateLimitResponse::OK);
    EXPECT_FALSE(s.has_current_limit());
    EXPECT_EQ(s.limit_remaining(), 0u);
    EXPECT_FALSE(s.has_duration_until_reset());
  }
}

TEST_F(RlsTest, UnknownDomainCanBeRejected) {
  const absl::StatusOr<RateLimitResponse> r = Call(Request1("nowhere", "k", "v"), RejectUnknown());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "unknown rate limit domain \"nowhere\"");
  // A known domain is unaffected.
  EXPECT_TRUE(Call(Request1("edge", "k", "v"), RejectUnknown()).ok());
}

TEST_F(RlsTest, SettingsOptionsAreOffByDefault) {
  const RlsOptions options = RlsOptionsFromSettings(rules::Settings{});
  EXPECT_FALSE(options.reject_unknown_domain);
  EXPECT_FALSE(options.response_headers);
  const absl::StatusOr<RateLimitResponse> r = Call(Request1("nowhere", "k", "v"), options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->response_headers_to_add_size(), 0);
}

TEST_F(RlsTest, SettingsCanRejectUnknownDomainsAndAddTheIetfFields) {
  rules::Settings settings;
  settings.rls_reject_unknown_domain = true;
  settings.rls_response_headers = true;
  const RlsOptions options = RlsOptionsFromSettings(settings);
  EXPECT_EQ(Call(Request1("nowhere", "k", "v"), options).status().code(),
            absl::StatusCode::kNotFound);
  const absl::StatusOr<RateLimitResponse> r =
      Call(Request1("edge", "remote_address", "10.0.0.1"), options);
  ASSERT_TRUE(r.ok()) << r.status();
  std::map<std::string, std::string> fields;
  for (const auto& h : r->response_headers_to_add()) fields[h.key()] = h.value();
  EXPECT_THAT(fields, ::testing::Contains(::testing::Key("RateLimit-Policy")));
  EXPECT_THAT(fields, ::testing::Contains(::testing::Key("RateLimit")));
  EXPECT_THAT(fields, ::testing::Not(::testing::Contains(::testing::Key("X-RateLimit-Limit"))));
  EXPECT_THAT(fields, ::testing::Not(::testing::Contains(::testing::Key("Retry-After"))));
  EXPECT_THAT(fields["RateLimit-Policy"], ::testing::HasSubstr(";q="));
  EXPECT_THAT(fields["RateLimit"], ::testing::HasSubstr(";r="));
}

// Issue 19: upstream's LIMIT_RESPONSE_HEADERS_ENABLED (`rls.response_headers: upstream`): the
// limit, remaining and reset of the descriptor closest to its limit, picked as upstream picks it
// (the lowest remaining, unless one is over its limit), under configurable names.
TEST_F(RlsTest, SettingsCanAddUpstreamsLimitHeaders) {
  rules::Settings settings;
  settings.rls_upstream_headers = true;
  RlsOptions options = RlsOptionsFromSettings(settings);
  const auto fields = [&](const RateLimitRequest& request) {
    std::vector<std::pair<std::string, std::string>> out;
    const absl::StatusOr<RateLimitResponse> r = Call(request, options);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      for (const auto& h : r->response_headers_to_add()) out.emplace_back(h.key(), h.value());
    }
    return out;
  };
  using Fields = std::vector<std::pair<std::string, std::string>>;
  RateLimitRequest two = Request1("edge", "remote_address", "10.9.9.9");
  AddDescriptor(&two, {{"login", "u"}});
  // login (2 per minute, 1 left, 40 s to the minute's end) is closer than the address (9 left).
  EXPECT_EQ(
      fields(two),
      (Fields{{"RateLimit-Limit", "2"}, {"RateLimit-Remaining", "1"}, {"RateLimit-Reset", "40"}}));
  // Over its limit, login is picked whatever the others have left.
  fields(Request1("edge", "login", "u"));
  RateLimitRequest over = Request1("edge", "login", "u");
  AddDescriptor(&over, {{"remote_address", "10.9.9.8"}});
  EXPECT_EQ(
      fields(over),
      (Fields{{"RateLimit-Limit", "2"}, {"RateLimit-Remaining", "0"}, {"RateLimit-Reset", "40"}}));
  // No descriptor with a limit: no header.
  EXPECT_EQ(fields(Request1("edge", "nothing", "matches")), Fields{});
  settings.rls_limit_header = "X-Limit";
  settings.rls_remaining_header = "X-Left";
  settings.rls_reset_header = "X-Reset";
  options = RlsOptionsFromSettings(settings);
  EXPECT_EQ(fields(Request1("edge", "remote_address", "10.9.9.7")),
            (Fields{{"X-Limit", "10"}, {"X-Left", "9"}, {"X-Reset", "1"}}));
}

TEST_F(RlsTest, NoConfigIsUpstreamsError) {
  const absl::StatusOr<RateLimitResponse> r =
      ShouldRateLimit(engine_, nullptr, Request1("edge", "k", "v"), kT0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "no rate limit configuration loaded");
}

TEST_F(RlsTest, InvalidRequestsAreErrors) {
  EXPECT_EQ(Call(Request1("", "k", "v")).status().message(), "rate limit domain must not be empty");
  RateLimitRequest none;
  none.set_domain("edge");
  EXPECT_EQ(Call(none).status().message(), "rate limit descriptor list must not be empty");
}

TEST_F(RlsTest, UnlimitedReportsMaxRemainingAndNoLimit) {
  const RateLimitResponse r = Ok(Request1("edge", "monitor", "host"));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  const Status& s = r.statuses(0);
  EXPECT_EQ(s.code(), RateLimitResponse::OK);
  EXPECT_FALSE(s.has_current_limit());
  EXPECT_EQ(s.limit_remaining(), 4294967295u);
  EXPECT_FALSE(s.has_duration_until_reset());
}

TEST_F(RlsTest, ShadowModeOverLimitIsOkWithTheLimitAndZeroRemaining) {
  Ok(Request1("edge", "shadow", "s"));
  const RateLimitResponse r = Ok(Request1("edge", "shadow", "s"));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  const Status& s = r.statuses(0);
  EXPECT_EQ(s.code(), RateLimitResponse::OK);
  ASSERT_TRUE(s.has_current_limit());
  EXPECT_EQ(s.current_limit().requests_per_unit(), 1u);
  EXPECT_EQ(s.limit_remaining(), 0u);
  EXPECT_TRUE(s.has_duration_until_reset());
}

TEST_F(RlsTest, StatusesFollowRequestOrderAndOneDenialDeniesAll) {
  RateLimitRequest request = Request1("edge", "remote_address", "10.0.0.1");
  AddDescriptor(&request, {{"no_such_key", "x"}});
  AddDescriptor(&request, {{"blocked", "b"}});
  AddDescriptor(&request, {{"monitor", "m"}});
  const RateLimitResponse r = Ok(request);
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OVER_LIMIT);
  ASSERT_EQ(r.statuses_size(), 4);
  EXPECT_EQ(r.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 10u);  // all-or-nothing: nothing consumed
  EXPECT_EQ(r.statuses(1).code(), RateLimitResponse::OK);
  EXPECT_FALSE(r.statuses(1).has_current_limit());
  EXPECT_EQ(r.statuses(2).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(r.statuses(2).current_limit().requests_per_unit(), 0u);
  EXPECT_EQ(r.statuses(3).limit_remaining(), 4294967295u);
  // Nothing was consumed by the denied request.
  EXPECT_EQ(Ok(Request1("edge", "remote_address", "10.0.0.1")).statuses(0).limit_remaining(), 9u);
}

TEST_F(RlsTest, SeveralLimitsReportTheMostConstrainedOne) {
  const RateLimitResponse first = Ok(Request1("edge", "plan", "p"));
  // per-second has 4 left, per-hour 2: the lower remaining speaks.
  EXPECT_EQ(first.statuses(0).current_limit().name(), "per-hour");
  EXPECT_EQ(first.statuses(0).current_limit().requests_per_unit(), 3u);
  EXPECT_EQ(first.statuses(0).current_limit().unit(), RateLimit::HOUR);
  EXPECT_EQ(first.statuses(0).limit_remaining(), 2u);
  EXPECT_EQ(first.statuses(0).duration_until_reset().seconds(), 3600 - 800);
  Ok(Request1("edge", "plan", "p"));
  Ok(Request1("edge", "plan", "p"));
  const RateLimitResponse denied = Ok(Request1("edge", "plan", "p"));
  EXPECT_EQ(denied.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(denied.statuses(0).current_limit().name(), "per-hour");
}

TEST_F(RlsTest, WeekUnitIsSentAsWeek) {
  const RateLimitResponse r = Ok(Request1("edge", "weekly", "w"));
  EXPECT_EQ(r.statuses(0).current_limit().unit(), RateLimit::WEEK);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 3u);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 2u);
}

TEST_F(RlsTest, TokenBucketWindowIsScaledToAUnit) {
  const RateLimitResponse r = Ok(Request1("edge", "bucket", "b"));
  EXPECT_EQ(r.statuses(0).current_limit().unit(), RateLimit::SECOND);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 10u);  // 100 per 10 s
  EXPECT_EQ(r.statuses(0).limit_remaining(), 99u);
  EXPECT_EQ(r.statuses(0).duration_until_reset().seconds(), 1);  // 0.1 s to refill, rounded up
}

TEST_F(RlsTest, HitsAddendConsumesThatMany) {
  RateLimitRequest request = Request1("edge", "remote_address", "10.0.0.1");
  request.set_hits_addend(4);
  EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 6u);
  request.set_hits_addend(0);  // 0 means 1
  EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 5u);
}

TEST_F(RlsTest, DescriptorHitsAddendZeroPeeksWithoutConsuming) {
  RateLimitRequest request = Request1("edge", "remote_address", "10.0.0.1");
  request.set_hits_addend(3);
  request.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 10u);
  request.mutable_descriptors(0)->mutable_hits_addend()->set_value(2);  // wins over the 3
  EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 8u);
  request.mutable_descriptors(0)->clear_hits_addend();  // the request's 3
  EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 5u);
}

TEST_F(RlsTest, OverrideIsAppliedAndReportedWithItsUnit) {
  RateLimitRequest request = Request1("edge", "remote_address", "10.0.0.1");
  auto* limit = request.mutable_descriptors(0)->mutable_limit();
  limit->set_requests_per_unit(2);
  limit->set_unit(::envoy::type::v3::MINUTE);
  RateLimitResponse r = Ok(request);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 2u);
  EXPECT_EQ(r.statuses(0).current_limit().unit(), RateLimit::MINUTE);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(r.statuses(0).duration_until_reset().seconds(), 40);
  Ok(request);
  r = Ok(request);
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OVER_LIMIT);
  // The configured 10/s of the same descriptor is untouched.
  EXPECT_EQ(Ok(Request1("edge", "remote_address", "10.0.0.1")).statuses(0).limit_remaining(), 9u);
}

TEST_F(RlsTest, OverrideWithUnknownUnitIsAnError) {
  RateLimitRequest request = Request1("edge", "remote_address", "10.0.0.1");
  request.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(3);
  EXPECT_EQ(Call(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RlsTest, ResponseHeadersAreOffByDefaultAndCarriedInOrderWhenGiven) {
  EXPECT_EQ(Ok(Request1("edge", "login", "a")).response_headers_to_add_size(), 0);
  RlsOptions options;
  options.response_headers = [](const engine::Response& response, std::vector<HeaderField>* out) {
    ASSERT_NE(response.Headline(), nullptr);
    out->push_back({"RateLimit-Policy", "\"login\";q=2;w=60"});
    out->push_back({"RateLimit", "\"login\";r=0;t=40"});
  };
  const absl::StatusOr<RateLimitResponse> r = Call(Request1("edge", "login", "a"), options);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->response_headers_to_add_size(), 2);
  EXPECT_EQ(r->response_headers_to_add(0).key(), "RateLimit-Policy");
  EXPECT_EQ(r->response_headers_to_add(0).value(), "\"login\";q=2;w=60");
  EXPECT_EQ(r->response_headers_to_add(0).raw_value(), "");
  EXPECT_EQ(r->response_headers_to_add(1).key(), "RateLimit");
  EXPECT_EQ(r->request_headers_to_add_size(), 0);
}

TEST(ToProtoTest, EmptyEngineResponseIsOk) {
  engine::Response response;
  const RateLimitResponse r = ToProto(response);
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(r.statuses_size(), 0);
}

TEST(ToProtoTest, DeniedEngineResponseIsOverLimitEvenWithoutADescriptorSayingSo) {
  engine::Response response;
  response.allowed = false;
  response.descriptors.resize(1);
  EXPECT_EQ(ToProto(response).overall_code(), RateLimitResponse::OVER_LIMIT);
}

TEST(ToProtoTest, RemainingIsClampedToUint32) {
  engine::Response response;
  engine::DescriptorResult& d = response.descriptors.emplace_back();
  d.limits.push_back({.limit = FixedWindow(10, kSecondUs),
                      .name = "",
                      .unit = "",
                      .shadow = false,
                      .decision = {.allowed = true,
                                   .remaining = int64_t{1} << 40,
                                   .retry_after_us = 0,
                                   .reset_after_us = 1,
                                   .delay_us = 0}});
  d.headline = 0;
  const RateLimitResponse r = ToProto(response);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 4294967295u);
  EXPECT_EQ(r.statuses(0).duration_until_reset().seconds(), 1);  // 1 µs rounds up
}

// ---------------------------------------------------------------------------------------------
// /json (§6.1).

constexpr std::string_view kBadRequest = "Bad Request\n";

void ExpectBadRequest(const JsonResult& r) {
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(r.body, kBadRequest);
  EXPECT_TRUE(r.nosniff);
}

TEST_F(RlsTest, JsonAllowed) {
  const JsonResult r = Json(
      R"({"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_FALSE(r.nosniff);
  EXPECT_EQ(r.body,
            R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,)"
            R"("unit":"SECOND"},"limitRemaining":9,"durationUntilReset":"1s"}]})");
}

// The request and response of the reference's example, byte for byte.
TEST_F(RlsTest, JsonReferenceExampleOverLimit) {
  // Prime: one hit on the address, 4 of the 5 on /login.
  ASSERT_EQ(
      Json(
          R"({"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]})")
          .status,
      200);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(
        Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"}],)"
             R"("limit":{"requests_per_unit":5,"unit":"MINUTE"},"hitsAddend":"2"}]})")
            .status,
        200);
  }
  const JsonResult r = Json(R"({"domain":"edge","hits_addend":1,
 "descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]},
                {"entries":[{"key":"path","value":"/login"}],
                 "limit":{"requests_per_unit":5,"unit":"MINUTE"},"hitsAddend":"2"}]})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(
      r.body,
      R"({"overallCode":"OVER_LIMIT","statuses":[)"
      R"({"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"SECOND"},"limitRemaining":9,"durationUntilReset":"1s"},)"
      R"({"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":5,"unit":"MINUTE"},"durationUntilReset":"40s"}]})");
}

// Issue 19 (7): a descriptor with no entries is answered OK with no limit, as upstream answers
// it ({"code":"OK"}); with a limit in the request, that limit applies to it, as upstream's does
// (on the domain alone).
TEST_F(RlsTest, JsonDescriptorWithNoEntriesIsOkWithoutALimit) {
  const JsonResult r = Json(R"({"domain":"edge","descriptors":[{"entries":[]},)"
                            R"({"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(
      r.body,
      R"({"overallCode":"OK","statuses":[{"code":"OK"},{"code":"OK","currentLimit":)"
      R"({"requestsPerUnit":10,"unit":"SECOND"},"limitRemaining":9,"durationUntilReset":"1s"}]})");
  const std::string with_limit =
      R"({"domain":"edge","descriptors":[{"entries":[],"limit":{"requests_per_unit":1,"unit":"HOUR"}}]})";
  EXPECT_EQ(Json(with_limit).status, 200);
  EXPECT_EQ(Json(with_limit).status, 429);
  EXPECT_EQ(Json(R"({"domain":"edge","descriptors":[]})").status, 400);
}

TEST_F(RlsTest, JsonWithTooManyDescriptorsIsBadRequest) {
  std::string body = R"({"domain":"edge","descriptors":[)";
  for (int i = 0; i < 10000; ++i) {
    body += i == 0 ? "" : ",";
    body += R"({"entries":[{"key":"remote_address","value":"10.0.0.1"}]})";
  }
  body += "]}";
  ExpectBadRequest(Json(body));
}

// Issue 19 (6): protojson writes fields in declaration order, and rls.proto declares the
// limit's `name` before `requests_per_unit` (proto_json_test checks every message).
TEST_F(RlsTest, JsonPrintsTheLimitNameFirst) {
  const JsonResult r =
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"login","value":"a"}]}]})");
  EXPECT_EQ(
      r.body,
      R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"login",)"
      R"("requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"40s"}]})");
}

TEST_F(RlsTest, JsonUnknownDomainIsOkWithBareStatuses) {
  const JsonResult r = Json(
      R"({"domain":"nowhere","descriptors":[{"entries":[{"key":"a","value":"1"}]},{"entries":[{"key":"b"}]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"overallCode":"OK","statuses":[{"code":"OK"},{"code":"OK"}]})");
}

TEST_F(RlsTest, JsonUnknownDomainRejectedIsBadRequestWhenConfigured) {
  ExpectBadRequest(
      Json(R"({"domain":"nowhere","descriptors":[{"entries":[{"key":"a"}]}]})", RejectUnknown()));
}

TEST_F(RlsTest, JsonUnlimited) {
  const JsonResult r =
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"monitor","value":"m"}]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body,
            R"({"overallCode":"OK","statuses":[{"code":"OK","limitRemaining":4294967295}]})");
}

TEST_F(RlsTest, JsonUnknownFieldIsBadRequest) {
  ExpectBadRequest(
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}],"extra":1})"));
  ExpectBadRequest(
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a","val":"1"}]}]})"));
}

TEST_F(RlsTest, JsonMalformedIsBadRequest) {
  ExpectBadRequest(Json("}"));
  ExpectBadRequest(Json("{"));
  ExpectBadRequest(Json(R"({"domain":"edge",})"));
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}]} trailing)"));
  ExpectBadRequest(Json(R"({"domain":5,"descriptors":[{"entries":[{"key":"a"}]}]})"));
  ExpectBadRequest(Json(R"(["domain"])"));
  ExpectBadRequest(Json("not json"));
}

TEST_F(RlsTest, JsonEmptyBodyIsBadRequest) {
  ExpectBadRequest(Json(""));
  ExpectBadRequest(Json(" \n"));
}

TEST_F(RlsTest, JsonServiceErrorsAreBadRequest) {
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[]})"));  // empty descriptors
  ExpectBadRequest(Json(R"({"domain":"edge"})"));
  ExpectBadRequest(Json("{}"));  // empty domain
  ExpectBadRequest(
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"","value":"v"}]}]})"));
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[{"entries":[{"value":"v"}]}]})"));
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a"}],)"
                        R"("limit":{"requests_per_unit":5}}]})"));  // UNKNOWN unit
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a"}],)"
                        R"("limit":{"requests_per_unit":5,"unit":"WEEK"}}]})"));  // no WEEK here
}

TEST_F(RlsTest, JsonAcceptsBothNameSpellingsAndEnumNumbers) {
  const JsonResult r = Json(
      R"({"domain":"edge","hitsAddend":2,"descriptors":[{"entries":[{"key":"remote_address","value":"x"}],)"
      R"("limit":{"requestsPerUnit":7,"unit":2},"hits_addend":3}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body,
            R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":7,)"
            R"("unit":"MINUTE"},"limitRemaining":4,"durationUntilReset":"40s"}]})");
}

TEST_F(RlsTest, JsonDescriptorHitsAddendZeroPeeks) {
  const std::string_view peek =
      R"({"domain":"edge","descriptors":[{"entries":[{"key":"login","value":"p"}],"hitsAddend":"0"}]})";
  for (int i = 0; i < 3; ++i) {
    const JsonResult r = Json(peek);
    EXPECT_EQ(r.status, 200);
    EXPECT_THAT(r.body, ::testing::HasSubstr(R"("limitRemaining":2,)"));
  }
}

TEST_F(RlsTest, JsonHugeHitsAddendIsDeniedNotACrash) {
  const JsonResult r =
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"h"}],)"
           R"("hitsAddend":"18446744073709551615"}]})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.body,
            R"({"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":)"
            R"({"requestsPerUnit":10,"unit":"SECOND"},"durationUntilReset":"1s"}]})");
}

TEST_F(RlsTest, JsonCarriesResponseHeadersOnlyWhenEnabled) {
  RlsOptions options;
  options.response_headers = [](const engine::Response&, std::vector<HeaderField>* out) {
    out->push_back({"RateLimit-Policy", "\"login\";q=2;w=60"});
  };
  const JsonResult r = Json(
      R"({"domain":"edge","descriptors":[{"entries":[{"key":"login","value":"h"}]}]})", options);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(
      r.body,
      R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"login",)"
      R"("requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"40s"}],)"
      R"("responseHeadersToAdd":[{"key":"RateLimit-Policy","value":"\"login\";q=2;w=60"}]})");
}

// Issue 19 (10): dynamic metadata, as upstream's RESPONSE_DYNAMIC_METADATA builds it; the
// cases of its TestRatelimitToMetadata (src/service/ratelimit_test.go), decided for real.
class DynamicMetadataTest : public RlsTest {
 protected:
  void SetUp() override {
    rules::LoadResult loaded = rules::LoadConfigText("md.yaml", R"yaml(domain: md
descriptors:
  - key: key1
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {name: never}
  - key: regular_key
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {name: service_1}
  - key: quota_key
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: service_2, nested: {a: 1}}
  - key: another_quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: "service_3", nested: {a: 2, b: "2"}, flag: true, list: [1, x]}
  - key: test_key
    rate_limit: {unit: minute, requests_per_unit: 10}
)yaml");
    ASSERT_THAT(loaded.errors, IsEmpty())
        << (loaded.errors.empty() ? "" : loaded.errors[0].ToString());
    config_ = loaded.config;
  }
  // The dynamicMetadata of /json's answer to `body` (the last field written).
  std::string Metadata(std::string_view body) {
    RlsOptions options;
    options.dynamic_metadata = true;
    const std::string answer = Json(body, options).body;
    const size_t at = answer.find(R"("dynamicMetadata":)");
    if (at == std::string::npos) return "none in " + answer;
    return answer.substr(at + 18, answer.size() - at - 19);
  }
};

TEST_F(DynamicMetadataTest, ADescriptorOverItsLimitGivesNoMetadata) {
  EXPECT_EQ(
      Metadata(R"({"domain":"md","descriptors":[{"entries":[{"key":"key1","value":"val1"}]}]})"),
      R"({"descriptors":[{"entries":["key1=val1"]}],"domain":"md"})");
}

TEST_F(DynamicMetadataTest, APassedQuotaGivesItsMetadata) {
  EXPECT_EQ(
      Metadata(R"({"domain":"md","descriptors":[{"entries":[{"key":"quota_key","value":"q"}]}]})"),
      R"({"descriptors":[{"entries":["quota_key=q"]}],"domain":"md","metadata":)"
      R"({"name":"service_2","nested":{"a":1}}})");
}

TEST_F(DynamicMetadataTest, PassedDescriptorsMergeInOrderTheFirstValueWinning) {
  EXPECT_EQ(Metadata(R"({"domain":"md","descriptors":[)"
                     R"({"entries":[{"key":"regular_key","value":"regular_val"}]},)"
                     R"({"entries":[{"key":"quota_key","value":"quota_val"}]},)"
                     R"({"entries":[{"key":"another_quota","value":"another_val"}]}]})"),
            R"({"descriptors":[{"entries":["regular_key=regular_val"]},)"
            R"({"entries":["quota_key=quota_val"]},{"entries":["another_quota=another_val"]}],)"
            R"("domain":"md","metadata":{"flag":true,"list":[1,"x"],"name":"service_2",)"
            R"("nested":{"a":1,"b":"2"}}})");
}

TEST_F(DynamicMetadataTest, HitsAddendsAndOverridesAreCarried) {
  EXPECT_EQ(
      Metadata(R"({"domain":"md","hitsAddend":5,"descriptors":[)"
               R"({"entries":[{"key":"test_key","value":"test_val"}]},)"
               R"({"entries":[{"key":"x","value":"y"}],"hitsAddend":"0",)"
               R"("limit":{"requestsPerUnit":7,"unit":"HOUR"}}]})"),
      R"({"descriptors":[{"entries":["test_key=test_val"]},{"entries":["x=y"],)"
      R"("hitsAddend":0,"limit":"requests_per_unit:7 unit:HOUR"}],"domain":"md","hitsAddend":5})");
}

TEST_F(DynamicMetadataTest, OffByDefault) {
  const JsonResult r =
      Json(R"({"domain":"md","descriptors":[{"entries":[{"key":"quota_key","value":"q"}]}]})");
  EXPECT_EQ(r.body.find("dynamicMetadata"), std::string::npos) << r.body;
}

// The cases of envoyproxy/ratelimit's own TestJsonHandler (test/server/server_impl_test.go),
// with a stand-in for the RPC.
TEST(HandleJsonTest, UpstreamHandlerCases) {
  int calls = 0;
  absl::StatusOr<RateLimitResponse> answer = RateLimitResponse();
  const auto rpc = [&](const RateLimitRequest& request) -> absl::StatusOr<RateLimitResponse> {
    ++calls;
    EXPECT_EQ(request.domain(), "foo");
    return answer;
  };
  ExpectBadRequest(HandleJson("", rpc));   // missing body
  ExpectBadRequest(HandleJson("}", rpc));  // not JSON
  EXPECT_EQ(calls, 0);

  JsonResult r = HandleJson(R"({"domain": "foo"})", rpc);  // unknown overall code
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, "{}");

  answer = absl::UnknownError("some error");
  ExpectBadRequest(HandleJson(R"({"domain": "foo"})", rpc));

  RateLimitResponse ok;
  ok.set_overall_code(RateLimitResponse::OK);
  answer = ok;
  r = HandleJson(R"({"domain": "foo"})", rpc);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, R"({"overallCode":"OK"})");

  RateLimitResponse over;
  over.set_overall_code(RateLimitResponse::OVER_LIMIT);
  answer = over;
  r = HandleJson(R"({"domain": "foo"})", rpc);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, R"({"overallCode":"OVER_LIMIT"})");
  EXPECT_EQ(calls, 4);
}

// ---------------------------------------------------------------------------------------------
// Wire check: bytes built and read from the field numbers of §2 (rls/wire_testing.h), never by
// generated code.

TEST(WireTest, HandEncodedRequestParsesIntoTheGeneratedClass) {
  // RateLimitRequest{domain=1, descriptors=2, hits_addend=3}
  //   RateLimitDescriptor{entries=1 {key=1, value=2}, limit=2 {requests_per_unit=1, unit=2},
  //                       hits_addend=3 UInt64Value{value=1}}
  std::string d0 = LenField(1, LenField(1, "remote_address") + LenField(2, "10.0.0.1"));
  d0 += LenField(1, LenField(1, "path") + LenField(2, "/login"));
  d0 += LenField(2, VarintField(1, 5) + VarintField(2, 2));  // 5 per MINUTE
  d0 += LenField(3, VarintField(1, 300));
  std::string d1 = LenField(1, LenField(1, "generic_key") + LenField(2, "x"));
  d1 += LenField(3, "");  // an explicit 0: the wrapper is present with its default value
  std::string wire = LenField(1, "edge");
  wire += LenField(2, d0);
  wire += LenField(2, d1);
  wire += VarintField(3, 7);

  RateLimitRequest request;
  ASSERT_TRUE(request.ParseFromString(wire));
  EXPECT_EQ(request.domain(), "edge");
  EXPECT_EQ(request.hits_addend(), 7u);
  ASSERT_EQ(request.descriptors_size(), 2);
  const RateLimitDescriptor& a = request.descriptors(0);
  ASSERT_EQ(a.entries_size(), 2);
  EXPECT_EQ(a.entries(0).key(), "remote_address");
  EXPECT_EQ(a.entries(0).value(), "10.0.0.1");
  EXPECT_EQ(a.entries(1).key(), "path");
  EXPECT_EQ(a.entries(1).value(), "/login");
  ASSERT_TRUE(a.has_limit());
  EXPECT_EQ(a.limit().requests_per_unit(), 5u);
  EXPECT_EQ(a.limit().unit(), ::envoy::type::v3::MINUTE);
  ASSERT_TRUE(a.has_hits_addend());
  EXPECT_EQ(a.hits_addend().value(), 300u);
  const RateLimitDescriptor& b = request.descriptors(1);
  EXPECT_FALSE(b.has_limit());
  ASSERT_TRUE(b.has_hits_addend());
  EXPECT_EQ(b.hits_addend().value(), 0u);
  // Nothing was left over as an unknown field (a wrong number would land there).
  EXPECT_EQ(request.GetReflection()->GetUnknownFields(request).field_count(), 0);
  EXPECT_EQ(a.GetReflection()->GetUnknownFields(a).field_count(), 0);

  // And the generated class writes the very same bytes (fields in number order).
  EXPECT_EQ(request.SerializeAsString(), wire);

  // Through the codec.
  const absl::StatusOr<engine::Request> converted = FromProto(request);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->hits_addend, 7u);
  EXPECT_EQ(converted->descriptors[0].limit->window_us, kMinuteUs);
  EXPECT_EQ(converted->descriptors[0].hits_addend, std::optional<uint64_t>(300));
  EXPECT_EQ(converted->descriptors[1].hits_addend, std::optional<uint64_t>(0));
}

TEST(WireTest, ResponseBytesHaveTheReferenceFieldNumbers) {
  RateLimitResponse response;
  response.set_overall_code(RateLimitResponse::OVER_LIMIT);
  Status* s = response.add_statuses();
  s->set_code(RateLimitResponse::OVER_LIMIT);
  s->mutable_current_limit()->set_requests_per_unit(10);
  s->mutable_current_limit()->set_unit(RateLimit::WEEK);
  s->mutable_current_limit()->set_name("per-ip");
  s->set_limit_remaining(3);
  s->mutable_duration_until_reset()->set_seconds(40);
  s->mutable_duration_until_reset()->set_nanos(5);
  s->mutable_quota()->set_requests(9);
  s->mutable_quota()->mutable_valid_until()->set_seconds(11);
  s->mutable_quota()->set_id("q");
  auto* h = response.add_response_headers_to_add();
  h->set_key("RateLimit");
  h->set_value("v");
  h->set_raw_value("r");
  response.add_request_headers_to_add()->set_key("x-req");
  response.set_raw_body("body");
  (*response.mutable_dynamic_metadata()->mutable_fields())["k"].set_string_value("s");
  response.mutable_quota()->set_requests(1);

  const std::vector<WireField> top = Decode(response.SerializeAsString());
  EXPECT_THAT(Shape(top), ElementsAre(std::pair(1u, kVarint), std::pair(2u, kLen),
                                      std::pair(3u, kLen), std::pair(4u, kLen), std::pair(5u, kLen),
                                      std::pair(6u, kLen), std::pair(7u, kLen)));
  if (top.size() != 7) return;
  EXPECT_EQ(top[0].varint, 2u);  // Code.OVER_LIMIT
  EXPECT_EQ(top[4].bytes, "body");

  // DescriptorStatus{code=1, current_limit=2, limit_remaining=3, duration_until_reset=4, quota=5}
  const std::vector<WireField> status = Decode(top[1].bytes);
  EXPECT_THAT(Shape(status),
              ElementsAre(std::pair(1u, kVarint), std::pair(2u, kLen), std::pair(3u, kVarint),
                          std::pair(4u, kLen), std::pair(5u, kLen)));
  if (status.size() != 5) return;
  EXPECT_EQ(status[0].varint, 2u);
  EXPECT_EQ(status[2].varint, 3u);

  // RateLimit{requests_per_unit=1, unit=2, name=3}; WEEK = 7.
  const std::vector<WireField> limit = Decode(status[1].bytes);
  EXPECT_THAT(Shape(limit),
              ElementsAre(std::pair(1u, kVarint), std::pair(2u, kVarint), std::pair(3u, kLen)));
  if (limit.size() == 3) {
    EXPECT_EQ(limit[0].varint, 10u);
    EXPECT_EQ(limit[1].varint, 7u);
    EXPECT_EQ(limit[2].bytes, "per-ip");
  }

  // google.protobuf.Duration{seconds=1, nanos=2}
  const std::vector<WireField> duration = Decode(status[3].bytes);
  EXPECT_THAT(Shape(duration), ElementsAre(std::pair(1u, kVarint), std::pair(2u, kVarint)));
  if (duration.size() == 2) {
    EXPECT_EQ(duration[0].varint, 40u);
    EXPECT_EQ(duration[1].varint, 5u);
  }

  // Quota{requests=1, valid_until=2 (Timestamp{seconds=1}), id=3}
  const std::vector<WireField> quota = Decode(status[4].bytes);
  EXPECT_THAT(Shape(quota),
              ElementsAre(std::pair(1u, kVarint), std::pair(2u, kLen), std::pair(3u, kLen)));
  if (quota.size() == 3) {
    EXPECT_EQ(quota[0].varint, 9u);
    EXPECT_EQ(quota[1].bytes, VarintField(1, 11));
    EXPECT_EQ(quota[2].bytes, "q");
  }

  // HeaderValue{key=1, value=2, raw_value=3}
  EXPECT_EQ(top[2].bytes, LenField(1, "RateLimit") + LenField(2, "v") + LenField(3, "r"));
  EXPECT_EQ(top[3].bytes, LenField(1, "x-req"));
  // Struct{fields=1: map entry {key=1, value=2: Value{string_value=3}}}
  EXPECT_EQ(top[5].bytes, LenField(1, LenField(1, "k") + LenField(2, LenField(3, "s"))));
  EXPECT_EQ(top[6].bytes, VarintField(1, 1));
}

TEST(WireTest, EnumNumbersMatchTheReference) {
  EXPECT_EQ(RateLimitResponse::UNKNOWN, 0);
  EXPECT_EQ(RateLimitResponse::OK, 1);
  EXPECT_EQ(RateLimitResponse::OVER_LIMIT, 2);
  const std::pair<RateLimit::Unit, int> units[] = {{RateLimit::UNKNOWN, 0}, {RateLimit::SECOND, 1},
                                                   {RateLimit::MINUTE, 2},  {RateLimit::HOUR, 3},
                                                   {RateLimit::DAY, 4},     {RateLimit::MONTH, 5},
                                                   {RateLimit::YEAR, 6},    {RateLimit::WEEK, 7}};
  for (const auto& [unit, number] : units) EXPECT_EQ(static_cast<int>(unit), number);
  EXPECT_EQ(::envoy::type::v3::UNKNOWN, 0);
  EXPECT_EQ(::envoy::type::v3::SECOND, 1);
  EXPECT_EQ(::envoy::type::v3::MINUTE, 2);
  EXPECT_EQ(::envoy::type::v3::HOUR, 3);
  EXPECT_EQ(::envoy::type::v3::DAY, 4);
  EXPECT_EQ(::envoy::type::v3::MONTH, 5);
  EXPECT_EQ(::envoy::type::v3::YEAR, 6);
  EXPECT_FALSE(::envoy::type::v3::RateLimitUnit_IsValid(7));  // no WEEK in RateLimitUnit
}

TEST(WireTest, FullNamesMatchEnvoys) {
  // The gRPC path and Any/JSON type names derive from these.
  EXPECT_EQ(RateLimitRequest::descriptor()->full_name(),
            "envoy.service.ratelimit.v3.RateLimitRequest");
  EXPECT_EQ(RateLimitResponse::descriptor()->full_name(),
            "envoy.service.ratelimit.v3.RateLimitResponse");
  EXPECT_EQ(RateLimitDescriptor::descriptor()->full_name(),
            "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor");
  EXPECT_EQ(::envoy::config::core::v3::HeaderValue::descriptor()->full_name(),
            "envoy.config.core.v3.HeaderValue");
  EXPECT_EQ(::envoy::type::v3::RateLimitUnit_descriptor()->full_name(),
            "envoy.type.v3.RateLimitUnit");
  const auto* service =
      RateLimitRequest::descriptor()->file()->FindServiceByName("RateLimitService");
  ASSERT_NE(service, nullptr);
  const auto* method = service->FindMethodByName("ShouldRateLimit");
  ASSERT_NE(method, nullptr);
  EXPECT_EQ(method->full_name(), "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit");
  EXPECT_EQ(method->input_type(), RateLimitRequest::descriptor());
  EXPECT_EQ(method->output_type(), RateLimitResponse::descriptor());
  EXPECT_FALSE(method->client_streaming());
  EXPECT_FALSE(method->server_streaming());
}

}  // namespace
}  // namespace sluice::rls
