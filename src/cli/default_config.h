// The configuration `sluice serve` runs with when given none (`make run`).

#ifndef SLUICE_CLI_DEFAULT_CONFIG_H_
#define SLUICE_CLI_DEFAULT_CONFIG_H_

#include <string_view>

namespace sluice::cli {

// envoyproxy/ratelimit-style rules with sluice's extensions: per client IP a token bucket of
// 100 r/s with bursts of 200, and per API key the limits of its plan (free unless the request
// names another). The same limits on every endpoint: /v1/check, /json and gRPC with the domain
// `default`, and forward-auth (/v1/auth) through the `http:` routes, which turn the client's
// address and its X-Api-Key header into those descriptors.
inline constexpr std::string_view kDefaultConfig = R"yaml(# sluice embedded default configuration
domain: default
plans:
  free:
    limits:
      - {name: free-per-second, requests: 10, window: 1s, algorithm: token_bucket, burst: 20}
      - {name: free-per-day, requests: 1000, window: 1d}
  pro:
    limits:
      - {name: pro-per-second, requests: 100, window: 1s, algorithm: token_bucket, burst: 200}
      - {name: pro-per-day, requests: 100000, window: 1d}
  enterprise:
    limits:
      - {name: enterprise-per-second, requests: 1000, window: 1s, algorithm: token_bucket, burst: 2000}
default_plan: free
descriptors:
  # per client IP
  - key: remote_address
    rate_limit: {name: per-ip, requests: 100, window: 1s, algorithm: token_bucket, burst: 200}
  # per API key, on its plan: [api_key=K] is on the free plan, [plan=pro, api_key=K] on pro
  - key: api_key
    plan_from: plan
  - key: plan
    descriptors:
      - key: api_key
        plan_from: plan
http:
  routes:
    - match: {prefix: /}
      rate_limits:
        - actions: [{remote_address: {}}]
        - actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: api_key}}]
)yaml";

}  // namespace sluice::cli

#endif  // SLUICE_CLI_DEFAULT_CONFIG_H_
