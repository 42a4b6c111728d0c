#include "rls/grpc_server.h"

#include <grpc/grpc.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>

#include <atomic>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rls/codec.h"

namespace sluice::rls {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

// absl::StatusCode and grpc::StatusCode share their numbers (both are the canonical codes).
::grpc::Status ToGrpcStatus(const absl::Status& status) {
  return ::grpc::Status(static_cast<::grpc::StatusCode>(status.code()),
                        std::string(status.message()));
}

class RateLimitHandler final
    : public ::envoy::service::ratelimit::v3::RateLimitService::CallbackService {
 public:
  RateLimitHandler(rules::ConfigManager* config, store::MemoryStore* store,
                   const GrpcServer::Options& options, const Clock* clock)
      : config_(config), engine_(store, options.remote), clock_(clock),
        on_decision_(options.on_decision) {}

  ::grpc::ServerUnaryReactor* ShouldRateLimit(::grpc::CallbackServerContext* context,
                                              const RateLimitRequest* request,
                                              RateLimitResponse* response) override {
    ::grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    // Answered now (memory) or from the backend's thread (Redis): the reactor and `response`
    // live until Finish.
    std::shared_ptr<const rules::Config> config = config_->Current();
    RlsOptions options = config ? RlsOptionsFromSettings(config->settings) : RlsOptions{};
    const int64_t start_us = clock_->NowMicros();
    if (on_decision_) {
      options.on_decision = [this, start_us](std::string_view domain, const engine::Response& r) {
        on_decision_(domain, r, clock_->NowMicros() - start_us);
      };
    }
    rls::ShouldRateLimitAsync(engine_, std::move(config), *request, start_us, options,
                              [reactor, response](absl::StatusOr<RateLimitResponse> answer) {
                                if (!answer.ok()) return reactor->Finish(ToGrpcStatus(answer.status()));
                                *response = *std::move(answer);
                                reactor->Finish(::grpc::Status::OK);
                              });
    return reactor;
  }

 private:
  rules::ConfigManager* config_;
  engine::Engine engine_;
  const Clock* clock_;
  const std::function<void(std::string_view, const engine::Response&, int64_t)> on_decision_;
};

class HealthHandler final : public ::grpc::health::v1::Health::CallbackService {
 public:
  HealthHandler(rules::ConfigManager* config, std::function<bool()> backend_serving)
      : config_(config), backend_serving_(std::move(backend_serving)) {}

  void StartDraining() { draining_.store(true, std::memory_order_relaxed); }

  ::grpc::ServerUnaryReactor* Check(::grpc::CallbackServerContext* context,
                                    const HealthCheckRequest* request,
                                    HealthCheckResponse* response) override {
    ::grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (!request->service().empty() && request->service() != "ratelimit") {
      reactor->Finish(::grpc::Status(::grpc::StatusCode::NOT_FOUND,
                                     absl::StrCat("unknown service \"", request->service(), "\"")));
      return reactor;
    }
    const bool serving = config_->Current() != nullptr &&
                         !draining_.load(std::memory_order_relaxed) &&
                         (!backend_serving_ || backend_serving_());
    response->set_status(serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
    reactor->Finish(::grpc::Status::OK);
    return reactor;
  }

 private:
  rules::ConfigManager* config_;
  std::function<bool()> backend_serving_;
  std::atomic<bool> draining_{false};
};

}  // namespace

struct GrpcServer::Impl {
  Impl(const Options& options, rules::ConfigManager* config, store::MemoryStore* store,
       const Clock* clock)
      : rate_limit(config, store, options, clock), health(config, options.backend_serving) {}

  RateLimitHandler rate_limit;
  HealthHandler health;
  std::unique_ptr<::grpc::Server> server;  // declared last: shut down before the handlers go
  bool shut_down = false;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const Options& options,
                                                              rules::ConfigManager* config,
                                                              store::MemoryStore* store,
                                                              const Clock* clock) {
  auto impl = std::make_unique<Impl>(options, config, store, clock);
  int port = 0;
  ::grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, ::grpc::InsecureServerCredentials(), &port);
  // gRPC sets SO_REUSEPORT by default: a second sluice on the same port would then share it
  // silently instead of failing to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.RegisterService(&impl->rate_limit);
  builder.RegisterService(&impl->health);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || port == 0) {
    if (impl->server != nullptr) impl->server->Shutdown();
    return absl::UnavailableError(absl::StrCat("grpc: cannot listen on ", options.address));
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl), port));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::milliseconds(0)); }

void GrpcServer::StartDraining() { impl_->health.StartDraining(); }

void GrpcServer::Shutdown(std::chrono::milliseconds grace) {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->health.StartDraining();
  impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->server->Wait();
}

}  // namespace sluice::rls
