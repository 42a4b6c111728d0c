// A wire check of sluice's .proto files against the field numbers of docs/rls.md §2: bytes built
// and read by hand (rls/wire_testing.h), never by generated code, parsed into and serialized from
// the generated classes; enum numbers and full names as Envoy's.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "envoy/extensions/common/ratelimit/v3/ratelimit.pb.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "envoy/type/v3/ratelimit_unit.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rls/codec.h"
#include "rls/codec_testing.h"
#include "rls/wire_testing.h"

namespace sluice::rls {
namespace {

using ::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
using ::testing::ElementsAre;
using wire::Decode;
using wire::kLen;
using wire::kVarint;
using wire::LenField;
using wire::Shape;
using wire::VarintField;
using wire::WireField;
using RateLimit = RateLimitResponse::RateLimit;
using Status = RateLimitResponse::DescriptorStatus;
using test::kMinuteUs;

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
