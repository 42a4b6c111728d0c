// The RLS v3 codec's requests (codec.h, FromProto): a RateLimitRequest checked as
// envoyproxy/ratelimit checks it (its messages where it has them), bounded, and converted to the
// engine's request: domain, entries, hits_addend and overrides (docs/rls.md §3).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "envoy/type/v3/ratelimit_unit.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rls/codec.h"
#include "rls/codec_testing.h"

namespace sluice::rls {
namespace {

using test::AddDescriptor;
using test::kDayUs;
using test::kHourUs;
using test::kMinuteUs;
using test::kSecondUs;
using test::Request1;
using ::testing::IsEmpty;
using ::testing::SizeIs;

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

}  // namespace
}  // namespace sluice::rls
