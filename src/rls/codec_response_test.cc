// The RLS v3 codec's answers (codec.h, ShouldRateLimit and ToProto) on a real engine, as
// envoyproxy/ratelimit fills them (docs/rls.md §3): statuses, the current limit, what remains and
// when it resets, unknown domains, shadow mode, hits_addend, overrides, and the settings' response
// headers. Time is a ManualClock at t0 = 1700000000 s: on a second boundary, 20 s into a minute.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "envoy/type/v3/ratelimit_unit.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rls/codec.h"
#include "rls/codec_testing.h"
#include "tests/support/limits.h"

namespace sluice::rls {
namespace {

using RateLimit = RateLimitResponse::RateLimit;
using Status = RateLimitResponse::DescriptorStatus;
using test::AddDescriptor;
using test::kSecondUs;
using test::kT0;
using test::RejectUnknown;
using test::Request1;
using test::RlsTest;
using testing::FixedWindow;

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

}  // namespace
}  // namespace sluice::rls
