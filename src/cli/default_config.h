// The configuration `sluice serve` runs with when given none (`make run`).

#ifndef SLUICE_CLI_DEFAULT_CONFIG_H_
#define SLUICE_CLI_DEFAULT_CONFIG_H_

#include <string_view>

namespace sluice::cli {

// envoyproxy/ratelimit-style rules with sluice's extensions: per client IP a token bucket of
// 100 r/s with bursts of 200, and per API key the limits of its plan.
inline constexpr std::string_view kDefaultConfig = R"yaml(# sluice embedded default configuration
domain: default
plans:
  free:
    limits:
      - {requests: 10, window: 1s, algorithm: token_bucket, burst: 20}
      - {requests: 1000, window: 1d}
  pro:
    limits:
      - {requests: 100, window: 1s, algorithm: token_bucket, burst: 200}
      - {requests: 100000, window: 1d}
  enterprise:
    limits:
      - {requests: 1000, window: 1s, algorithm: token_bucket, burst: 2000}
default_plan: free
descriptors:
  - key: remote_address
    rate_limit: {requests: 100, window: 1s, algorithm: token_bucket, burst: 200}
  - key: plan
    descriptors:
      - key: api_key
        plan_from: plan
)yaml";

}  // namespace sluice::cli

#endif  // SLUICE_CLI_DEFAULT_CONFIG_H_
