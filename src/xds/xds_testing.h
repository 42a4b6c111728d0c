// A management server for the xDS client's tests (unit tests here, tests/xds_server.cc for the
// end-to-end ones): the state-of-the-world half of Envoy's AggregatedDiscoveryService, serving
// RateLimitConfig resources the way go-control-plane's snapshot server does. A stream gets the
// current resources when its request's version_info differs from the current version (so a
// client that resumes at the current version gets nothing until the next Publish), and every
// Publish goes to every open stream. Every request is recorded (ACKs, NACKs, resumptions). TLS
// and mutual TLS from PEM files.

#ifndef SLUICE_XDS_XDS_TESTING_H_
#define SLUICE_XDS_XDS_TESTING_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "util/pem_file.h"
#include "xds/rate_limit_config.h"

namespace sluice::xds::testing {

namespace discovery = envoy::service::discovery::v3;
using RateLimitConfig = ratelimit::config::ratelimit::v3::RateLimitConfig;

class TestAdsServer final : public discovery::AggregatedDiscoveryService::Service {
 public:
  struct Options {
    std::string address = "127.0.0.1:0";
    std::string cert_file = "";  // TLS when set (with key_file)
    std::string key_file = "";
    std::string client_ca_file = "";  // and mutual TLS (a client certificate required) when set
  };

  // Null when it cannot listen or read its TLS files.
  static std::unique_ptr<TestAdsServer> Start(const Options& options) {
    auto server = std::unique_ptr<TestAdsServer>(new TestAdsServer());
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    if (!options.cert_file.empty()) {
      grpc::SslServerCredentialsOptions tls(
          options.client_ca_file.empty()
              ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      auto key = util::ReadPemFile(options.key_file, "key");
      auto cert = util::ReadPemFile(options.cert_file, "certificate");
      if (!key.ok() || !cert.ok()) return nullptr;
      tls.pem_key_cert_pairs.push_back({*key, *cert});
      if (!options.client_ca_file.empty()) {
        auto ca = util::ReadPemFile(options.client_ca_file, "client CA file");
        if (!ca.ok()) return nullptr;
        tls.pem_root_certs = *ca;
      }
      credentials = grpc::SslServerCredentials(tls);
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options.address, credentials, &server->port_);
    builder.RegisterService(server.get());
    builder.SetMaxReceiveMessageSize(64 << 20);
    builder.SetMaxSendMessageSize(64 << 20);
    server->server_ = builder.BuildAndStart();
    if (server->server_ == nullptr || server->port_ == 0) return nullptr;
    return server;
  }

  ~TestAdsServer() override { Shutdown(); }

  int port() const { return port_; }

  // The state of the world becomes `configs` at `version`, sent to every open stream. `raw`
  // replaces the resources as sent (a resource of another type, bytes that do not decode).
  void Publish(std::string version, const std::vector<RateLimitConfig>& configs,
               std::vector<google::protobuf::Any> raw = {}) {
    absl::MutexLock lock(&mu_);
    version_ = std::move(version);
    resources_.clear();
    for (const RateLimitConfig& c : configs) resources_.emplace_back().PackFrom(c);
    for (auto& any : raw) resources_.push_back(std::move(any));
    ++generation_;
  }

  std::vector<discovery::DiscoveryRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  int streams() const {
    absl::MutexLock lock(&mu_);
    return streams_;
  }

  // Waits until `n` requests have come (all streams); false at the timeout.
  bool WaitForRequests(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    const auto enough = [this, n]()
                            ABSL_SHARED_LOCKS_REQUIRED(mu_) { return requests_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

  // Ends every stream at once (as a server that goes away) and stops listening.
  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) return;
      shut_down_ = true;
    }
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  grpc::Status StreamAggregatedResources(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<discovery::DiscoveryResponse, discovery::DiscoveryRequest>* stream)
      override {
    std::string sent_version;
    bool subscribed = false, reader_done = false;
    {
      absl::MutexLock lock(&mu_);
      ++streams_;
    }
    std::thread reader([&] {
      discovery::DiscoveryRequest request;
      while (stream->Read(&request)) {
        absl::MutexLock lock(&mu_);
        if (!subscribed) {
          subscribed = true;
          sent_version = request.version_info();
        }
        requests_.push_back(request);
      }
      absl::MutexLock lock(&mu_);
      reader_done = true;
    });
    uint64_t seen_generation = ~uint64_t{0};
    int nonce = 0;
    for (;;) {
      discovery::DiscoveryResponse response;
      {
        absl::MutexLock lock(&mu_);
        const auto wake = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return reader_done || shut_down_ || (subscribed && generation_ != seen_generation);
        };
        mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(100));
        if (reader_done || shut_down_ || context->IsCancelled()) break;
        if (!subscribed || generation_ == seen_generation) continue;
        seen_generation = generation_;
        if (version_.empty() || version_ == sent_version) continue;
        sent_version = version_;
        response.set_version_info(version_);
        response.set_type_url(kRateLimitConfigType);
        response.set_nonce(std::to_string(++nonce) + "-" + version_);
        for (const auto& any : resources_) *response.add_resources() = any;
      }
      if (!stream->Write(response)) break;
    }
    context->TryCancel();
    reader.join();
    return grpc::Status::OK;
  }

 private:
  TestAdsServer() = default;

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  mutable absl::Mutex mu_;
  std::string version_ ABSL_GUARDED_BY(mu_);
  std::vector<google::protobuf::Any> resources_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<discovery::DiscoveryRequest> requests_ ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::xds::testing

#endif  // SLUICE_XDS_XDS_TESTING_H_
