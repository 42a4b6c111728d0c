// The limits a configuration holds, one per (domain, limit label) as sluice_decisions_total labels
// them (the limit's name, or "100-per-1m"): for the sluice_limit gauges (docs/operations.md).
// A pure function of the config; the caller keeps the result per config version.

#ifndef SLUICE_ENGINE_CONFIGURED_LIMITS_H_
#define SLUICE_ENGINE_CONFIGURED_LIMITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "rules/config.h"

namespace sluice::engine {

struct ConfiguredLimit {
  std::string domain;
  std::string label;  // LimitName's: the configured name, or "REQUESTS-per-WINDOW"
  uint64_t requests = 0;
  int64_t window_us = 0;
};

// Every limit of every descriptor and plan, in domain and file order. Limits that share a label
// in a domain (one name on several descriptors) give one entry: the first. Unlimited descriptors
// have none.
std::vector<ConfiguredLimit> ConfiguredLimits(const rules::Config& config);

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_CONFIGURED_LIMITS_H_
