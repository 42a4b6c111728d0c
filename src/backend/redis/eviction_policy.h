// Redis's own eviction and sluice's exactness.
//
// With a maxmemory eviction policy Redis deletes keys when it reaches maxmemory: allkeys-* any
// key, volatile-* any key with a TTL — and every key sluice writes has one. A deleted state is
// that key's limit reset; a deleted packed hash (redis.buckets) resets every state in it, however
// live. So exact limits need `maxmemory-policy noeviction`: Redis then refuses writes with OOM
// errors when full, and those get each domain's failure_mode like any other backend error
// (docs/redis.md). sluice cannot change the policy (it is the operator's, and often shared): it
// reads it at start and warns.

#ifndef SLUICE_BACKEND_REDIS_EVICTION_POLICY_H_
#define SLUICE_BACKEND_REDIS_EVICTION_POLICY_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "redis/client.h"

namespace sluice::redis {

// The warning to log for `policy` (as CONFIG GET maxmemory-policy answers it), or nullopt when
// it never drops a key (noeviction). An unknown policy gets a warning too.
std::optional<std::string> EvictionPolicyWarning(std::string_view policy);

// Asks the server that serves `key` (on a cluster, that node only) for its maxmemory-policy
// (CONFIG GET maxmemory-policy). `done` runs once, on the client's I/O thread, with the policy,
// or an error when the server could not be asked or refuses CONFIG (managed services often
// rename it).
void ReadMaxmemoryPolicy(Client& client, std::string_view key,
                         std::function<void(absl::StatusOr<std::string>)> done);

}  // namespace sluice::redis

#endif  // SLUICE_BACKEND_REDIS_EVICTION_POLICY_H_
