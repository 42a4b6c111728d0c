// The gRPC port's bytes against docs/rls.md, without generated message classes on
// the client side: requests are encoded by hand from the field numbers of §2 and §5, sent with
// grpc::GenericStub to the method paths of §1 and §5, and the answers are decoded by hand. A
// wrong field number, type or path in sluice's .proto files fails here even if the generated
// client and server agree with each other.

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "backend/memory/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rls/grpc_server.h"
#include "rls/grpc_testing.h"
#include "rls/wire_testing.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"
#include "tests/support/units.h"

namespace sluice::rls {
namespace {

using grpc_testing::ApiName;
using grpc_testing::StartOnLoopback;
using ::testing::ElementsAre;
using wire::Decode;
using wire::kLen;
using wire::kVarint;
using wire::LenField;
using wire::Shape;
using wire::VarintField;
using wire::WireField;

using sluice::testing::kT0;

constexpr char kWireConfig[] = R"yaml(domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
)yaml";

constexpr char kShouldRateLimit[] = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";

struct RawResult {
  ::grpc::Status status;
  std::string bytes;
};

class GrpcWireTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    auto server = StartOnLoopback(GetParam(), &config_, &engine_, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = std::make_unique<::grpc::GenericStub>(::grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), ::grpc::InsecureChannelCredentials()));
  }

  // One unary call of `method` with `request` as the exact message bytes.
  RawResult RawCall(const std::string& method, const std::string& request) {
    ::grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ::grpc::Slice slice(request);
    const ::grpc::ByteBuffer request_buffer(&slice, 1);
    ::grpc::ByteBuffer response_buffer;
    std::promise<::grpc::Status> done;
    stub_->UnaryCall(&context, method, ::grpc::StubOptions(), &request_buffer, &response_buffer,
                     [&done](::grpc::Status status) { done.set_value(std::move(status)); });
    RawResult result{done.get_future().get(), std::string()};
    std::vector<::grpc::Slice> slices;
    if (result.status.ok() && response_buffer.Dump(&slices).ok()) {
      for (const ::grpc::Slice& s : slices) {
        result.bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    return result;
  }

  ManualClock clock_{kT0};
  rules::ConfigManager config_{{}, kWireConfig};
  store::MemoryStore store_{store::MemoryStore::Options{.max_entries = 1 << 10, .shards = 2},
                            &clock_};
  engine::Engine engine_{&store_};
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<::grpc::GenericStub> stub_;
};

// RateLimitRequest{domain=1, descriptors=2 {entries=1 {key=1, value=2}}, hits_addend=3}
std::string UserRequest(std::string_view user, uint64_t hits_addend) {
  std::string wire = LenField(1, "edge");
  wire += LenField(2, LenField(1, LenField(1, "user") + LenField(2, user)));
  if (hits_addend != 0) wire += VarintField(3, hits_addend);
  return wire;
}

TEST_P(GrpcWireTest, ShouldRateLimitAnswersWithTheReferenceFieldNumbers) {
  const RawResult r = RawCall(kShouldRateLimit, UserRequest("alice", 2));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();

  // RateLimitResponse{overall_code=1 (OK=1), statuses=2}
  const std::vector<WireField> top = Decode(r.bytes);
  ASSERT_THAT(Shape(top), ElementsAre(std::pair(1u, kVarint), std::pair(2u, kLen)));
  EXPECT_EQ(top[0].varint, 1u);

  // DescriptorStatus{code=1, current_limit=2, limit_remaining=3, duration_until_reset=4}
  const std::vector<WireField> status = Decode(top[1].bytes);
  ASSERT_THAT(Shape(status), ElementsAre(std::pair(1u, kVarint), std::pair(2u, kLen),
                                         std::pair(3u, kVarint), std::pair(4u, kLen)));
  EXPECT_EQ(status[0].varint, 1u);  // OK
  EXPECT_EQ(status[2].varint, 1u);  // 3 - 2
  // RateLimit{requests_per_unit=1, unit=2 (MINUTE=2)}; the rule has no name, so no field 3.
  EXPECT_EQ(status[1].bytes, VarintField(1, 3) + VarintField(2, 2));
  // Duration{seconds=1}: 40 s to the end of the minute; nanos 0 is not written.
  EXPECT_EQ(status[3].bytes, VarintField(1, 40));
}

TEST_P(GrpcWireTest, OverLimitIsCodeTwoWithNoRemainingField) {
  ASSERT_TRUE(RawCall(kShouldRateLimit, UserRequest("bob", 3)).status.ok());
  const RawResult r = RawCall(kShouldRateLimit, UserRequest("bob", 0));  // 0: adds 1
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const std::vector<WireField> top = Decode(r.bytes);
  ASSERT_THAT(Shape(top), ElementsAre(std::pair(1u, kVarint), std::pair(2u, kLen)));
  EXPECT_EQ(top[0].varint, 2u);  // OVER_LIMIT
  const std::vector<WireField> status = Decode(top[1].bytes);
  // limit_remaining 0 is proto3's default: absent on the wire.
  ASSERT_THAT(Shape(status),
              ElementsAre(std::pair(1u, kVarint), std::pair(2u, kLen), std::pair(4u, kLen)));
  EXPECT_EQ(status[0].varint, 2u);
}

TEST_P(GrpcWireTest, DescriptorHitsAddendIsAWrapperAtFieldThree) {
  // RateLimitDescriptor{entries=1, hits_addend=3 UInt64Value{} (present, value 0: peek)}
  std::string wire = LenField(1, "edge");
  wire += LenField(2, LenField(1, LenField(1, "user") + LenField(2, "carol")) + LenField(3, ""));
  for (int i = 0; i < 2; ++i) {
    const RawResult r = RawCall(kShouldRateLimit, wire);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    const std::vector<WireField> status = Decode(Decode(r.bytes).at(1).bytes);
    ASSERT_GE(status.size(), 3u);
    EXPECT_EQ(status[2].number, 3u);
    EXPECT_EQ(status[2].varint, 3u);  // nothing consumed
  }
}

TEST_P(GrpcWireTest, EmptyDomainIsInvalidArgument) {
  const RawResult r = RawCall(kShouldRateLimit, LenField(2, LenField(1, LenField(1, "user"))));
  EXPECT_EQ(r.status.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.status.error_message(), "rate limit domain must not be empty");
}

TEST_P(GrpcWireTest, UnparsableRequestBytesAreAnErrorNotACrash) {
  // A length prefix that runs past the end of the message.
  const RawResult r = RawCall(kShouldRateLimit, std::string("\x0a\x7f", 2) + "edge");
  EXPECT_FALSE(r.status.ok());
  EXPECT_TRUE(RawCall(kShouldRateLimit, UserRequest("dave", 1)).status.ok());
}

TEST_P(GrpcWireTest, HealthCheckUsesTheReferenceNumbers) {
  // HealthCheckRequest{service=1}; HealthCheckResponse{status=1}, SERVING = 1.
  RawResult r = RawCall(kHealthCheck, LenField(1, "ratelimit"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.bytes, VarintField(1, 1));
  r = RawCall(kHealthCheck, "");  // service "" (the server)
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.bytes, VarintField(1, 1));
  r = RawCall(kHealthCheck, LenField(1, "other"));
  EXPECT_EQ(r.status.error_code(), ::grpc::StatusCode::NOT_FOUND);
}

TEST_P(GrpcWireTest, UnknownMethodIsUnimplemented) {
  const RawResult r = RawCall("/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit",
                              UserRequest("erin", 1));
  EXPECT_EQ(r.status.error_code(), ::grpc::StatusCode::UNIMPLEMENTED);
}

INSTANTIATE_TEST_SUITE_P(BothApis, GrpcWireTest, grpc_testing::BothApis(), ApiName);

}  // namespace
}  // namespace sluice::rls
