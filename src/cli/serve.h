// `sluice serve`: runs the HTTP service and the gRPC (Envoy RLS) port until SIGTERM or SIGINT.

#ifndef SLUICE_CLI_SERVE_H_
#define SLUICE_CLI_SERVE_H_

#include <optional>
#include <string>

namespace sluice::cli {

struct ServeFlags {
  std::string config;  // empty: the embedded default
  std::optional<std::string> listen, admin;
  std::optional<std::string> grpc;  // "0" (or empty): no gRPC port
  std::optional<int> threads;
  // Keys per domain and minute that GET /v1/top's sketches count (engine::TopKeys); 0: off.
  int top_keys = 1000;
  // One decision in this many is recorded for it, counted as many times (1: each).
  int top_keys_sample = 8;
  std::optional<std::string> redis;  // selects the Redis backend at this URL
  // Settings and rules from envoyproxy/ratelimit's environment variables (cli/envoy_env.h)
  // instead of `config`.
  bool envoy_env = false;
};

// Returns the process exit status: 0 after a graceful shutdown, 1 when it cannot start (with
// --envoy-env, also when a variable is refused).
int RunServe(const ServeFlags& flags);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_SERVE_H_
