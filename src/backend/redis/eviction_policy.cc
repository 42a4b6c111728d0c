#include "backend/redis/eviction_policy.h"

#include <utility>

#include "fmt/format.h"
#include "redis/resp.h"

namespace sluice::redis {

std::optional<std::string> EvictionPolicyWarning(std::string_view policy) {
  if (policy == "noeviction") return std::nullopt;
  const bool evicts = policy.starts_with("allkeys-") || policy.starts_with("volatile-");
  return fmt::format(
      "maxmemory-policy is {}{}: when Redis reaches maxmemory it {} and a deleted limiter state "
      "is a reset limit (a packed hash holds many). Set maxmemory-policy noeviction for exact "
      "limits; when full, Redis then refuses writes and failure_mode applies (docs/redis.md)",
      policy, evicts ? "" : " (unknown)",
      policy.starts_with("allkeys-") ? "deletes any key"
                                     : "may delete keys with a TTL, which every sluice key has");
}

void ReadMaxmemoryPolicy(Client& client, std::string_view key,
                         std::function<void(absl::StatusOr<std::string>)> done) {
  std::string command;
  AppendCommand(&command, {"CONFIG", "GET", "maxmemory-policy"});
  client.Send(key, std::move(command), [done = std::move(done)](absl::StatusOr<Reply> reply) {
    if (!reply.ok()) return done(reply.status());
    if (reply->IsError()) return done(absl::FailedPreconditionError(reply->str));
    // RESP2: [name, value]; an empty array when the name is unknown.
    if (reply->type != Reply::Type::kArray || reply->elements.size() != 2) {
      return done(absl::FailedPreconditionError("unexpected answer to CONFIG GET"));
    }
    done(reply->elements[1].str);
  });
}

}  // namespace sluice::redis
