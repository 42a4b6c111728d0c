#include "rls/grpc_server.h"

#include <grpc/grpc.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

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

// The one ShouldRateLimit path of both APIs: rls::ShouldRateLimitAsync on the config snapshot
// current when the call arrives, with the settings' RlsOptions and the metrics hook.
class RateLimitDecider {
 public:
  using Done = std::function<void(absl::StatusOr<RateLimitResponse>)>;

  RateLimitDecider(rules::ConfigManager* config, engine::Engine* engine,
                   const GrpcServer::Options& options, const Clock* clock)
      : config_(config),
        engine_(*engine),
        clock_(clock),
        on_decision_(options.on_decision),
        tracer_(options.tracer) {}

  // `request` must live until `done` has run; `done` runs once, now (memory) or from the
  // backend's thread (Redis). `context`: the call's, for its trace context metadata.
  void Decide(const RateLimitRequest& request, const ::grpc::ServerContextBase& context,
              Done done) {
    // Not sampled (or no tracer): nothing of the span is built.
    const std::optional<trace::Tracer::SampledTrace> sampled =
        tracer_ == nullptr ? std::nullopt : tracer_->Sample(MetadataValue(context, "traceparent"));
    if (!sampled) return DecideOnEngine(request, std::move(done));
    std::shared_ptr<trace::Span> span =
        tracer_->StartRequest(kShouldRateLimitSpan, trace::SpanKind::kServer, *sampled,
                              MetadataValue(context, "tracestate"));
    span->Set("rpc.system", "grpc");
    span->Set("rpc.service", "envoy.service.ratelimit.v3.RateLimitService");
    span->Set("rpc.method", "ShouldRateLimit");
    span->Set("sluice.domain", request.domain());
    trace::CurrentSpan scope(span.get());
    DecideOnEngine(
        request, [span, done = std::move(done)](absl::StatusOr<RateLimitResponse> answer) {
          span->Set("rpc.grpc.status_code", static_cast<int64_t>(answer.status().code()));
          if (!answer.ok()) span->SetError(std::string(answer.status().message()));
          span->End();
          done(std::move(answer));
        });
  }

 private:
  static constexpr char kShouldRateLimitSpan[] =
      "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

  // A metadata value, or "" (the first of its key; gRPC keeps keys in lowercase).
  static std::string_view MetadataValue(const ::grpc::ServerContextBase& context,
                                        std::string_view key) {
    const auto& metadata = context.client_metadata();
    const auto it = metadata.find(::grpc::string_ref(key.data(), key.size()));
    if (it == metadata.end()) return {};
    return std::string_view(it->second.data(), it->second.size());
  }

  // Decide's work on the engine (within the call's span, when it is traced).
  void DecideOnEngine(const RateLimitRequest& request, Done done) {
    std::shared_ptr<const rules::Config> config = config_->Current();
    RlsOptions options = config ? RlsOptionsFromSettings(config->settings) : RlsOptions{};
    const int64_t start_us = clock_->NowMicros();
    if (on_decision_) {
      const int64_t started_us = clock_->MonotonicMicros();  // for the latency
      options.on_decision = [this, started_us](std::string_view domain, const engine::Response& r) {
        on_decision_(domain, r, clock_->MonotonicMicros() - started_us);
      };
    }
    rls::ShouldRateLimitAsync(engine_, std::move(config), request, start_us, options,
                              std::move(done));
  }

  rules::ConfigManager* config_;
  engine::Engine& engine_;
  const Clock* clock_;
  const std::function<void(std::string_view, const engine::Response&, int64_t)> on_decision_;
  trace::Tracer* const tracer_;
};

// Options::threads == 0.
class RateLimitHandler final
    : public ::envoy::service::ratelimit::v3::RateLimitService::CallbackService {
 public:
  explicit RateLimitHandler(RateLimitDecider* decider) : decider_(decider) {}

  ::grpc::ServerUnaryReactor* ShouldRateLimit(::grpc::CallbackServerContext* context,
                                              const RateLimitRequest* request,
                                              RateLimitResponse* response) override {
    ::grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    // The reactor, `request` and `response` live until Finish.
    decider_->Decide(*request, *context,
                     [reactor, response](absl::StatusOr<RateLimitResponse> answer) {
                       if (!answer.ok()) return reactor->Finish(ToGrpcStatus(answer.status()));
                       *response = *std::move(answer);
                       reactor->Finish(::grpc::Status::OK);
                     });
    return reactor;
  }

 private:
  RateLimitDecider* decider_;
};

// Options::threads > 0: the async API. Each completion queue has kCallsPerQueue calls
// requested at all times (a call re-requests its successor as soon as it arrives), and one
// thread that runs whatever completes on it.
class AsyncRateLimit {
 public:
  using Service = ::envoy::service::ratelimit::v3::RateLimitService::AsyncService;

  explicit AsyncRateLimit(RateLimitDecider* decider) : decider_(decider) {}

  Service* service() { return &service_; }

  // Call after BuildAndStart: requests the first calls and starts one thread per queue.
  void Start(std::vector<std::unique_ptr<::grpc::ServerCompletionQueue>> queues) {
    queues_ = std::move(queues);
    for (auto& queue : queues_) {
      for (int i = 0; i < kCallsPerQueue; ++i) new Call(this, queue.get());
      threads_.emplace_back([cq = queue.get()] {
        void* tag = nullptr;
        bool ok = false;
        while (cq->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
      });
    }
  }

  // Call after Server::Shutdown has returned: every call then completes (requested ones fail,
  // arrived ones are answered, perhaps after the backend's timeout) while the threads still
  // drain the queues. Once the last call is gone, nothing can add to a queue: shuts them down,
  // lets the threads drain them and joins the threads.
  void Stop() {
    for (int live = live_calls_.load(); live != 0; live = live_calls_.load()) {
      live_calls_.wait(live);
    }
    for (auto& queue : queues_) queue->Shutdown();
    for (std::thread& thread : threads_) thread.join();
    threads_.clear();
  }

 private:
  static constexpr int kCallsPerQueue = 8;

  // One ShouldRateLimit call; owns itself from the request until its Finish completes (or the
  // request fails because the server shuts down), and is the tag of both.
  class Call {
   public:
    Call(AsyncRateLimit* owner, ::grpc::ServerCompletionQueue* cq)
        : owner_(owner), cq_(cq), responder_(&context_) {
      owner_->live_calls_.fetch_add(1, std::memory_order_relaxed);
      owner_->service_.RequestShouldRateLimit(&context_, &request_, &responder_, cq_, cq_, this);
    }

    ~Call() {
      if (owner_->live_calls_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        owner_->live_calls_.notify_all();
      }
    }

    void Proceed(bool ok) {
      if (!ok || finishing_) {  // no call (shutdown), or Finish done (sent or not)
        delete this;
        return;
      }
      new Call(owner_, cq_);
      finishing_ = true;
      // Answered now or from the backend's thread; Finish is safe from any thread, and `this`
      // may be deleted as soon as it is called.
      owner_->decider_->Decide(
          request_, context_, [this](absl::StatusOr<RateLimitResponse> answer) {
            if (!answer.ok())
              return responder_.FinishWithError(ToGrpcStatus(answer.status()), this);
            response_ = *std::move(answer);
            responder_.Finish(response_, ::grpc::Status::OK, this);
          });
    }

   private:
    AsyncRateLimit* owner_;
    ::grpc::ServerCompletionQueue* cq_;
    ::grpc::ServerContext context_;
    RateLimitRequest request_;
    RateLimitResponse response_;
    ::grpc::ServerAsyncResponseWriter<RateLimitResponse> responder_;
    bool finishing_ = false;
  };

  RateLimitDecider* decider_;
  Service service_;
  std::vector<std::unique_ptr<::grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  std::atomic<int> live_calls_{0};  // Calls constructed and not yet deleted
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
    const bool serving = config_->Current() != nullptr && !config_->awaiting_remote() &&
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

// The port's credentials: insecure, or TLS from files gRPC re-reads every second.
std::shared_ptr<::grpc::ServerCredentials> Credentials(const GrpcServer::Options& options) {
  if (!options.tls) return ::grpc::InsecureServerCredentials();
  const GrpcServer::Options::Tls& tls = *options.tls;
  constexpr unsigned kRefreshSeconds = 1;
  const bool mutual = !tls.client_ca_file.empty();
  auto provider = mutual ? std::make_shared<::grpc::experimental::FileWatcherCertificateProvider>(
                               tls.key_file, tls.cert_file, tls.client_ca_file, kRefreshSeconds)
                         : std::make_shared<::grpc::experimental::FileWatcherCertificateProvider>(
                               tls.key_file, tls.cert_file, kRefreshSeconds);
  ::grpc::experimental::TlsServerCredentialsOptions tls_options(provider);
  tls_options.watch_identity_key_cert_pairs();
  if (mutual) {
    tls_options.watch_root_certs();
    tls_options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls_options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return ::grpc::experimental::TlsServerCredentials(tls_options);
}

}  // namespace

struct GrpcServer::Impl {
  Impl(const Options& options, rules::ConfigManager* config, engine::Engine* engine,
       const Clock* clock)
      : decider(config, engine, options, clock), health(config, options.backend_serving) {
    if (options.threads > 0) {
      async_rate_limit = std::make_unique<AsyncRateLimit>(&decider);
    } else {
      rate_limit = std::make_unique<RateLimitHandler>(&decider);
    }
  }

  RateLimitDecider decider;
  std::unique_ptr<RateLimitHandler> rate_limit;      // threads == 0
  std::unique_ptr<AsyncRateLimit> async_rate_limit;  // threads > 0
  HealthHandler health;
  std::unique_ptr<::grpc::Server> server;  // declared last: shut down before the handlers go
  bool shut_down = false;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const Options& options,
                                                              rules::ConfigManager* config,
                                                              engine::Engine* engine,
                                                              const Clock* clock) {
  auto impl = std::make_unique<Impl>(options, config, engine, clock);
  int port = 0;
  ::grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, Credentials(options), &port);
  // gRPC sets SO_REUSEPORT by default: a second sluice on the same port would then share it
  // silently instead of failing to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  std::vector<std::unique_ptr<::grpc::ServerCompletionQueue>> queues;
  if (impl->async_rate_limit) {
    builder.RegisterService(impl->async_rate_limit->service());
    for (int i = 0; i < options.threads; ++i) queues.push_back(builder.AddCompletionQueue());
  } else {
    builder.RegisterService(impl->rate_limit.get());
  }
  builder.RegisterService(&impl->health);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || port == 0) {
    if (impl->server != nullptr) impl->server->Shutdown();
    impl->server.reset();         // before its queues
    for (auto& queue : queues) {  // a queue must be drained before it is destroyed
      queue->Shutdown();
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) {
      }
    }
    return absl::UnavailableError(absl::StrCat("grpc: cannot listen on ", options.address));
  }
  if (impl->async_rate_limit) impl->async_rate_limit->Start(std::move(queues));
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
  if (impl_->async_rate_limit) impl_->async_rate_limit->Stop();
}

}  // namespace sluice::rls
