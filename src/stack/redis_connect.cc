#include "stack/redis_connect.h"

#include <utility>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace sluice::stack {

absl::StatusOr<RedisConnection> ConnectRedis(
    const std::vector<std::string>& urls, bool cluster, int64_t timeout_us,
    std::chrono::microseconds wait, std::shared_ptr<const redis::TlsContext> tls,
    const std::optional<redis::SentinelOptions>& sentinel) {
  if (urls.empty()) return absl::InvalidArgumentError("no Redis URL");
  redis::Client::Options options;
  options.cluster = cluster;
  for (const std::string& url : urls) {
    auto endpoint = redis::ParseUrl(url);
    if (!endpoint.ok()) return endpoint.status();
    options.seeds.push_back(*endpoint);
  }
  const bool sentinels_tls =
      sentinel && !sentinel->sentinels.empty() && sentinel->sentinels.front().tls;
  if (tls != nullptr && !options.seeds.front().tls && !sentinels_tls) {
    return absl::InvalidArgumentError(
        fmt::format("redis.tls is set, and {} is plain TCP: TLS needs rediss://", urls.front()));
  }
  options.connection.timeout = std::chrono::microseconds(timeout_us);
  options.connection.tls = std::move(tls);
  options.sentinel = sentinel;
  RedisConnection out;
  out.where = sentinel ? redis::DescribeRedis(*sentinel, options.seeds[0])
                       : redis::DescribeRedis(options.cluster, options.seeds[0]);
  auto client = redis::Client::Create(options);
  if (!client.ok()) return client.status();
  out.client = *std::move(client);
  if (auto s = redis::AwaitFirstConnection(*out.client, wait, out.where); !s.ok()) return s;
  return out;
}

}  // namespace sluice::stack
