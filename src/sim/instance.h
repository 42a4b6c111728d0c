// The simulated instances of `sluice sim`: each one what `sluice serve` would decide on, built
// from settings of its own (its own Redis client and connections, its own over-limit cache), all
// sharing one Redis or Redis Cluster and one key prefix, hence the same states.
//
// The consistency mode is chosen here, in BuildInstance: the one place a new mode's
// backend is put together.

#ifndef SLUICE_SIM_INSTANCE_H_
#define SLUICE_SIM_INSTANCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/clock.h"
#include "stack/stack.h"

namespace sluice::sim {

// How instances share a limit (docs/hybrid.md).
enum class Mode {
  kExact,     // every decision on Redis (batched), as `serve` decides today
  kLeased,    // leases of quota taken from Redis, spent locally (backend/hybrid/leases.h)
  kEventual,  // decisions on local copies, merged into Redis every sync interval (eventual.h)
};

// "exact", "leased", "eventual"; InvalidArgument otherwise.
absl::StatusOr<Mode> ParseMode(std::string_view name);
std::string_view ModeName(Mode mode);

struct InstanceConfig {
  Mode mode = Mode::kExact;
  std::vector<std::string> redis_urls;  // one server, or a cluster's seed nodes
  bool cluster = false;
  bool over_limit_cache = true;
  std::string key_prefix;  // the same for every instance of a run
  int64_t timeout_us = 1000000;
  int64_t lease_interval_us = 100000;       // leased: a lease's longest life (redis.lease_interval)
  int64_t window_lease_life_us = 60000000;  // leased: redis.window_lease_life (0: 10 intervals)
  int64_t sync_interval_us = 100000;        // eventual: T (redis.sync_interval)
};

// One instance's stack, connected (as Stack::Build: a wrong password is an error, an unreachable
// Redis is not).
absl::StatusOr<std::unique_ptr<stack::Stack>> BuildInstance(const InstanceConfig& config,
                                                            const Clock* clock);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_INSTANCE_H_
