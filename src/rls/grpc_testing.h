// Test helpers shared by the gRPC server's tests: every test runs on both ShouldRateLimit APIs,
// the callback API (threads 0) and the async API with two completion queues (threads 2).

#ifndef SLUICE_RLS_GRPC_TESTING_H_
#define SLUICE_RLS_GRPC_TESTING_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "rls/grpc_server.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"

namespace sluice::rls::grpc_testing {

// The parameter of the fixtures: GrpcServer::Options::threads.
inline auto BothApis() { return ::testing::Values(0, 2); }

inline std::string ApiName(const ::testing::TestParamInfo<int>& info) {
  return info.param == 0 ? "Callback" : "Async" + std::to_string(info.param) + "Queues";
}

inline GrpcServer::Options OptionsFor(std::string address, int threads) {
  GrpcServer::Options options;
  options.address = std::move(address);
  options.threads = threads;
  return options;
}

// Loads `config` and starts a server on a free loopback port with the API `threads` names.
inline absl::StatusOr<std::unique_ptr<GrpcServer>> StartOnLoopback(int threads,
                                                                   rules::ConfigManager* config,
                                                                   engine::Engine* engine,
                                                                   const Clock* clock) {
  const auto loaded = config->Reload();
  if (!loaded.errors.empty()) return absl::InvalidArgumentError(loaded.errors[0].ToString());
  return GrpcServer::Start(OptionsFor("127.0.0.1:0", threads), config, engine, clock);
}

}  // namespace sluice::rls::grpc_testing

#endif  // SLUICE_RLS_GRPC_TESTING_H_
