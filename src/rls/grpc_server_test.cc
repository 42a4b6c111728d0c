// The gRPC port (grpc_server.h) over a real loopback connection, with the generated C++ stubs:
// ShouldRateLimit answers as the codec does (allow, OVER_LIMIT, several descriptors, overrides,
// hits_addend at both levels, unknown domain, errors as gRPC statuses), health checking, and
// the transport edges (a deadline already passed, a port already in use).
// Time is a ManualClock at t0 = 1700000000 s: 20 s into a minute.

#include "rls/grpc_server.h"

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "backend/failover.h"
#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "rls/grpc_testing.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"
#include "tests/support/units.h"

namespace sluice::rls {
namespace {

using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using RateLimit = RateLimitResponse::RateLimit;
using grpc_testing::ApiName;
using grpc_testing::OptionsFor;
using grpc_testing::StartOnLoopback;

using sluice::testing::kT0;

constexpr char kConfig[] = R"yaml(domain: edge
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 10}
)yaml";

// A descriptor as (key, value) entries.
using Entries = std::vector<std::pair<std::string, std::string>>;

RateLimitRequest Request(std::string domain, const std::vector<Entries>& descriptors) {
  RateLimitRequest request;
  request.set_domain(std::move(domain));
  for (const Entries& entries : descriptors) {
    auto* d = request.add_descriptors();
    for (const auto& [key, value] : entries) {
      auto* e = d->add_entries();
      e->set_key(key);
      e->set_value(value);
    }
  }
  return request;
}

// A backend that is down and says so `delay` after being asked, from a thread of its own: the
// decision finishes off gRPC's threads, after the handler has returned.
class SlowDownRemote final : public backend::Backend {
 public:
  explicit SlowDownRemote(std::chrono::milliseconds delay) : delay_(delay) {}
  ~SlowDownRemote() override {
    for (std::thread& thread : threads_) thread.join();
  }

  void Decide(std::span<const backend::Item>, int64_t, std::span<Decision>, Done done) override {
    absl::MutexLock lock(&mu_);
    ++asked_;
    threads_.emplace_back([done = std::move(done), delay = delay_] {
      std::this_thread::sleep_for(delay);
      done({.status = absl::UnavailableError("down")});
    });
  }
  void Reset(std::span<const backend::Item>, ResetDone done) override {
    done(absl::UnavailableError("down"));
  }
  void Refund(std::span<const backend::Item>, int64_t, int64_t, RefundDone done) override {
    done(absl::UnavailableError("down"));
  }

  int asked() {
    absl::MutexLock lock(&mu_);
    return asked_;
  }

 private:
  const std::chrono::milliseconds delay_;
  absl::Mutex mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int asked_ ABSL_GUARDED_BY(mu_) = 0;
};

class GrpcServerTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    auto server = StartOnLoopback(GetParam(), &config_, &engine_, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->port(), 0);
    channel_ = ChannelTo(*server_);
    rls_ = RateLimitService::NewStub(channel_);
    health_ = Health::NewStub(channel_);
  }

  // Another server, with options of a test's own, on this test's config and clock, deciding on
  // `engine` (default: this test's, on its store).
  std::unique_ptr<GrpcServer> StartOwn(const GrpcServer::Options& options,
                                       engine::Engine* engine = nullptr) {
    auto server =
        GrpcServer::Start(options, &config_, engine != nullptr ? engine : &engine_, &clock_);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static std::shared_ptr<::grpc::Channel> ChannelTo(const GrpcServer& server) {
    return ::grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()),
                                 ::grpc::InsecureChannelCredentials());
  }

  // Every call has a deadline, so a broken server fails the test instead of hanging it.
  static void SetDeadline(::grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  ::grpc::Status Call(const RateLimitRequest& request, RateLimitResponse* response) {
    ::grpc::ClientContext context;
    SetDeadline(&context);
    return rls_->ShouldRateLimit(&context, request, response);
  }

  RateLimitResponse Ok(const RateLimitRequest& request) {
    RateLimitResponse response;
    const ::grpc::Status status = Call(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
    return response;
  }

  ::grpc::Status CheckHealth(const std::string& service, HealthCheckResponse* response) {
    ::grpc::ClientContext context;
    SetDeadline(&context);
    HealthCheckRequest request;
    request.set_service(service);
    return health_->Check(&context, request, response);
  }

  ManualClock clock_{kT0};
  rules::ConfigManager config_{{}, kConfig};
  store::MemoryStore store_{store::MemoryStore::Options{.max_entries = 1 << 12, .shards = 4},
                            &clock_};
  engine::Engine engine_{&store_};
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<::grpc::Channel> channel_;
  std::unique_ptr<RateLimitService::Stub> rls_;
  std::unique_ptr<Health::Stub> health_;
};

TEST_P(GrpcServerTest, AllowsWithinTheLimitAndReportsIt) {
  const RateLimitResponse r = Ok(Request("edge", {{{"user", "alice"}}}));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(r.statuses_size(), 1);
  EXPECT_EQ(r.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 2u);
  EXPECT_EQ(r.statuses(0).current_limit().unit(), RateLimit::MINUTE);
  EXPECT_EQ(r.statuses(0).current_limit().name(), "per-user");
  EXPECT_EQ(r.statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(r.statuses(0).duration_until_reset().seconds(), 40);
}

TEST_P(GrpcServerTest, DeniesOverTheLimitWithOverLimit) {
  const RateLimitRequest request = Request("edge", {{{"user", "bob"}}});
  Ok(request);
  Ok(request);
  const RateLimitResponse r = Ok(request);  // a gRPC OK carrying OVER_LIMIT: Envoy's 429
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OVER_LIMIT);
  ASSERT_EQ(r.statuses_size(), 1);
  EXPECT_EQ(r.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(r.statuses(0).duration_until_reset().seconds(), 40);
  // A new window allows again.
  clock_.Advance(int64_t{40} * 1000000);
  EXPECT_EQ(Ok(request).overall_code(), RateLimitResponse::OK);
}

TEST_P(GrpcServerTest, SeveralDescriptorsAnswerInRequestOrder) {
  const RateLimitResponse r =
      Ok(Request("edge", {{{"path", "/a"}}, {{"nothing", "matches"}}, {{"user", "carol"}}}));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(r.statuses_size(), 3);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 10u);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 9u);
  EXPECT_FALSE(r.statuses(1).has_current_limit());
  EXPECT_EQ(r.statuses(1).code(), RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(2).current_limit().name(), "per-user");
  EXPECT_EQ(r.statuses(2).limit_remaining(), 1u);
}

TEST_P(GrpcServerTest, LimitOverrideReplacesTheConfiguredLimit) {
  RateLimitRequest request = Request("edge", {{{"path", "/b"}}});
  auto* limit = request.mutable_descriptors(0)->mutable_limit();
  limit->set_requests_per_unit(1);
  limit->set_unit(::envoy::type::v3::HOUR);
  RateLimitResponse r = Ok(request);
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 1u);
  EXPECT_EQ(r.statuses(0).current_limit().unit(), RateLimit::HOUR);
  EXPECT_EQ(r.statuses(0).limit_remaining(), 0u);
  r = Ok(request);
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OVER_LIMIT);
}

TEST_P(GrpcServerTest, RequestHitsAddendConsumesThatMany) {
  RateLimitRequest request = Request("edge", {{{"path", "/c"}}});
  request.set_hits_addend(4);
  EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 6u);
  request.set_hits_addend(7);
  EXPECT_EQ(Ok(request).overall_code(), RateLimitResponse::OVER_LIMIT);  // 6 left
}

TEST_P(GrpcServerTest, DescriptorHitsAddendZeroPeeksAndOtherwiseWins) {
  RateLimitRequest request = Request("edge", {{{"path", "/d"}}});
  request.set_hits_addend(3);
  request.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 10u);
  EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 10u);
  request.mutable_descriptors(0)->mutable_hits_addend()->set_value(2);
  EXPECT_EQ(Ok(request).statuses(0).limit_remaining(), 8u);
}

TEST_P(GrpcServerTest, UnknownDomainIsOkWithoutLimits) {
  const RateLimitResponse r = Ok(Request("nowhere", {{{"user", "dave"}}}));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(r.statuses_size(), 1);
  EXPECT_EQ(r.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_FALSE(r.statuses(0).has_current_limit());
}

TEST_P(GrpcServerTest, InvalidRequestsAreInvalidArgumentWithTheCodecsMessage) {
  RateLimitResponse response;
  ::grpc::Status status = Call(Request("", {{{"user", "eve"}}}), &response);
  EXPECT_EQ(status.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "rate limit domain must not be empty");
  status = Call(Request("edge", {}), &response);
  EXPECT_EQ(status.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "rate limit descriptor list must not be empty");
}

TEST_P(GrpcServerTest, HealthServesEmptyAndRatelimitAndRejectsOtherNames) {
  HealthCheckResponse response;
  ASSERT_TRUE(CheckHealth("", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE(CheckHealth("ratelimit", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  EXPECT_EQ(CheckHealth("envoy.service.ratelimit.v3.RateLimitService", &response).error_code(),
            ::grpc::StatusCode::NOT_FOUND);
}

TEST_P(GrpcServerTest, DrainingTurnsHealthNotServingButStillAnswers) {
  server_->StartDraining();
  HealthCheckResponse response;
  ASSERT_TRUE(CheckHealth("ratelimit", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(CheckHealth("", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Ok(Request("edge", {{{"user", "frank"}}})).overall_code(), RateLimitResponse::OK);
}

TEST_P(GrpcServerTest, DeadlineAlreadyPassedIsDeadlineExceededAndTheServerCarriesOn) {
  ::grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() - std::chrono::seconds(1));
  RateLimitResponse response;
  const ::grpc::Status status =
      rls_->ShouldRateLimit(&context, Request("edge", {{{"user", "gina"}}}), &response);
  EXPECT_EQ(status.error_code(), ::grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(Ok(Request("edge", {{{"user", "gina"}}})).statuses(0).limit_remaining(), 1u);
}

TEST_P(GrpcServerTest, APortInUseIsAnErrorNotASharedPort) {
  const auto second =
      GrpcServer::Start(OptionsFor("127.0.0.1:" + std::to_string(server_->port()), GetParam()),
                        &config_, &engine_, &clock_);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST_P(GrpcServerTest, ShutdownIsIdempotentAndRefusesNewCalls) {
  server_->Shutdown(std::chrono::milliseconds(100));
  server_->Shutdown(std::chrono::milliseconds(100));
  RateLimitResponse response;
  ::grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const ::grpc::Status status =
      rls_->ShouldRateLimit(&context, Request("edge", {{{"user", "hank"}}}), &response);
  EXPECT_FALSE(status.ok());
}

// failure_mode open (the default) admits with the degraded marker; the answer comes from the
// backend's thread.
TEST_P(GrpcServerTest, AnswersFromTheBackendsThreadAfterTheHandlerReturned) {
  SlowDownRemote remote(std::chrono::milliseconds(20));
  backend::Failover failover(&remote, &store_);
  engine::Engine engine(&failover);
  const std::unique_ptr<GrpcServer> server =
      StartOwn(OptionsFor("127.0.0.1:0", GetParam()), &engine);
  ASSERT_NE(server, nullptr);
  auto rls = RateLimitService::NewStub(ChannelTo(*server));
  ::grpc::ClientContext context;
  SetDeadline(&context);
  RateLimitResponse response;
  const ::grpc::Status status =
      rls->ShouldRateLimit(&context, Request("edge", {{{"user", "ivy"}}}), &response);
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(response.response_headers_to_add_size(), 1);
  EXPECT_EQ(response.response_headers_to_add(0).key(), "x-ratelimit-status");
  EXPECT_EQ(response.response_headers_to_add(0).value(), "degraded");
  EXPECT_EQ(remote.asked(), 1);
}

// failure_mode local decides in this process's memory and says so, as over HTTP
// (X-RateLimit-Status: local).
TEST_P(GrpcServerTest, FailureModeLocalCarriesTheLocalMarker) {
  SlowDownRemote remote(std::chrono::milliseconds(1));
  rules::ConfigManager local{{}, std::string("failure_mode: local\n") + kConfig};
  ASSERT_TRUE(local.Reload().applied);
  backend::Failover failover(&remote, &store_);
  engine::Engine engine(&failover);
  auto server = GrpcServer::Start(OptionsFor("127.0.0.1:0", GetParam()), &local, &engine, &clock_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto rls = RateLimitService::NewStub(ChannelTo(**server));
  for (const auto expected :
       {RateLimitResponse::OK, RateLimitResponse::OK, RateLimitResponse::OVER_LIMIT}) {
    ::grpc::ClientContext context;
    SetDeadline(&context);
    RateLimitResponse response;
    const ::grpc::Status status =
        rls->ShouldRateLimit(&context, Request("edge", {{{"user", "kim"}}}), &response);
    ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
    EXPECT_EQ(response.overall_code(), expected);  // 2 per minute, decided here
    ASSERT_EQ(response.response_headers_to_add_size(), 1);
    EXPECT_EQ(response.response_headers_to_add(0).key(), "x-ratelimit-status");
    EXPECT_EQ(response.response_headers_to_add(0).value(), "local");
  }
}

// Shutdown with no grace while a decision is still with the backend: it returns once that
// decision is answered, and the client hears back (answer or cancellation), never a hang.
TEST_P(GrpcServerTest, ShutdownOutlivesADecisionStillWithTheBackend) {
  SlowDownRemote remote(std::chrono::milliseconds(200));
  backend::Failover failover(&remote, &store_);
  engine::Engine engine(&failover);
  const std::unique_ptr<GrpcServer> server =
      StartOwn(OptionsFor("127.0.0.1:0", GetParam()), &engine);
  ASSERT_NE(server, nullptr);
  auto rls = RateLimitService::NewStub(ChannelTo(*server));
  ::grpc::ClientContext context;
  SetDeadline(&context);
  const RateLimitRequest request = Request("edge", {{{"user", "jo"}}});
  RateLimitResponse response;
  std::promise<::grpc::Status> answered;
  rls->async()->ShouldRateLimit(&context, &request, &response,
                                [&answered](::grpc::Status s) { answered.set_value(s); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (remote.asked() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(remote.asked(), 1);
  server->Shutdown(std::chrono::milliseconds(0));
  std::future<::grpc::Status> status = answered.get_future();
  EXPECT_EQ(status.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  if (status.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    context.TryCancel();  // the callback refers to locals
    status.wait();
  }
}

// The hooks serve.cc uses: every decision reported (for /metrics), health following the backend.
TEST_P(GrpcServerTest, ReportsDecisionsAndHealthFollowsTheBackend) {
  struct {
    absl::Mutex mu;
    std::vector<std::string> list ABSL_GUARDED_BY(mu);
  } decided;
  std::atomic<bool> backend_ok{false};
  const std::unique_ptr<GrpcServer> hooked = StartOwn(
      {.address = "127.0.0.1:0",
       .max_message_bytes = 1 << 20,
       .backend_serving = [&] { return backend_ok.load(); },
       .on_decision =
           [&](std::string_view domain, const engine::Response& r, int64_t elapsed_us) {
             absl::MutexLock lock(&decided.mu);
             decided.list.push_back(std::string(domain) + (r.allowed ? ":allowed" : ":denied") +
                                    (elapsed_us >= 0 ? "" : ":negative"));
           },
       .threads = GetParam()});
  ASSERT_NE(hooked, nullptr);
  auto channel = ChannelTo(*hooked);
  auto rls = RateLimitService::NewStub(channel);
  auto health = Health::NewStub(channel);
  for (int i = 0; i < 3; ++i) {
    ::grpc::ClientContext context;
    SetDeadline(&context);
    RateLimitResponse response;
    ASSERT_TRUE(
        rls->ShouldRateLimit(&context, Request("edge", {{{"user", "carl"}}}), &response).ok());
  }
  {
    absl::MutexLock lock(&decided.mu);
    EXPECT_THAT(decided.list,
                ::testing::ElementsAre("edge:allowed", "edge:allowed", "edge:denied"));
  }
  const auto check = [&] {
    ::grpc::ClientContext context;
    SetDeadline(&context);
    HealthCheckResponse response;
    EXPECT_TRUE(health->Check(&context, HealthCheckRequest(), &response).ok());
    return response.status();
  };
  EXPECT_EQ(check(), HealthCheckResponse::NOT_SERVING);
  backend_ok = true;
  EXPECT_EQ(check(), HealthCheckResponse::SERVING);
  hooked->Shutdown(std::chrono::milliseconds(100));
}

INSTANTIATE_TEST_SUITE_P(BothApis, GrpcServerTest, grpc_testing::BothApis(), ApiName);

}  // namespace
}  // namespace sluice::rls
