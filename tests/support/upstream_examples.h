// envoyproxy/ratelimit's example configurations A-D, unchanged, as tests use them: the same
// documents as tests/rules/examples/ (edge, api, files, checkout; rules_test's
// LoaderExamplesTest checks that they stay the same). A: a per-IP limit with block and allow
// entries. B: nesting, key-only defaults, no backtracking. C: wildcards, unlimited, shadow, a
// shared threshold. D: several descriptors, replaces, hits_addend, override.

#ifndef SLUICE_TESTS_SUPPORT_UPSTREAM_EXAMPLES_H_
#define SLUICE_TESTS_SUPPORT_UPSTREAM_EXAMPLES_H_

#include <string_view>

namespace sluice::testing {

inline constexpr std::string_view kExampleA = R"yaml(domain: edge
descriptors:
  - key: remote_address          # every IP: 10 req/s, counted per IP
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address          # blocked IP
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address          # monitoring host, never limited
    value: 10.1.1.1
)yaml";

inline constexpr std::string_view kExampleB = R"yaml(domain: api
descriptors:
  - key: tenant                      # any tenant
    descriptors:
      - key: method
        value: POST
        rate_limit: {unit: minute, requests_per_unit: 100}
      - key: method                  # any other method
        rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: tenant
    value: acme
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 5000}
  - key: generic_key
    value: global
    rate_limit: {unit: second, requests_per_unit: 2000}
)yaml";

inline constexpr std::string_view kExampleC = R"yaml(domain: files
descriptors:
  - key: path
    value: /downloads/free/*         # listed first: first matching wildcard wins
    rate_limit: {unlimited: true}
  - key: path
    value: /downloads/*
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /downloads/big.iso        # exact match beats any wildcard
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: api_key
    detailed_metric: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: bucket
    value: reports-*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 10}
)yaml";

inline constexpr std::string_view kExampleD = R"yaml(domain: checkout
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 20}
  - key: plan
    value: premium
    descriptors:
      - key: user
        rate_limit:
          unit: minute
          requests_per_unit: 100
          replaces: [{name: per_user}]
  - key: route
    value: /pay
    rate_limit: {unit: second, requests_per_unit: 5}
)yaml";

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_UPSTREAM_EXAMPLES_H_
