// Connecting to Redis the way every stack does (Stack::Build for `serve` and `sluice sim`,
// LibraryStack for the library): the seeds from URLs, TLS for rediss:// ones, the client, and a
// wait for its first connection, so that a refused login is an error at once; an unreachable
// server is not (the failure policy answers until it is up), nor is one whose TLS handshake
// fails (a certificate refused: the error says why, and the client keeps trying).
// (Without the settings, rules': the library's stack uses it too. The settings' TLS files are
// redis_tls.h's.)

#ifndef SLUICE_STACK_REDIS_CONNECT_H_
#define SLUICE_STACK_REDIS_CONNECT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "redis/client.h"
#include "redis/tls.h"

namespace sluice::stack {

struct RedisConnection {
  std::unique_ptr<redis::Client> client;
  std::string where;  // for messages: "redis 127.0.0.1:6379", "redis cluster via ..."
};

// `urls`: one server's, or seeds of a Redis Cluster (`cluster`); at least one. `timeout_us`:
// each call's. Waits up to `wait` for the first connection (0: not at all). `tls`: the context
// of rediss:// URLs (null: the system's CAs, each host's name checked); only with them, or with
// sentinels over TLS. `sentinel`: the master is the one these sentinels name, and `urls` is its
// login alone (one URL; its host is not used).
absl::StatusOr<RedisConnection> ConnectRedis(
    const std::vector<std::string>& urls, bool cluster, int64_t timeout_us,
    std::chrono::microseconds wait, std::shared_ptr<const redis::TlsContext> tls = nullptr,
    const std::optional<redis::SentinelOptions>& sentinel = std::nullopt);

}  // namespace sluice::stack

#endif  // SLUICE_STACK_REDIS_CONNECT_H_
