#include "stack/redis_connect.h"

#include <utility>

#include "absl/status/status.h"

namespace sluice::stack {

absl::StatusOr<RedisConnection> ConnectRedis(const std::vector<std::string>& urls, bool cluster,
                                             int64_t timeout_us, std::chrono::microseconds wait) {
  if (urls.empty()) return absl::InvalidArgumentError("no Redis URL");
  redis::Client::Options options;
  options.cluster = cluster;
  for (const std::string& url : urls) {
    auto endpoint = redis::ParseUrl(url);
    if (!endpoint.ok()) return endpoint.status();
    options.seeds.push_back(*endpoint);
  }
  options.connection.timeout = std::chrono::microseconds(timeout_us);
  RedisConnection out;
  out.where = redis::DescribeRedis(options.cluster, options.seeds[0]);
  auto client = redis::Client::Create(options);
  if (!client.ok()) return client.status();
  out.client = *std::move(client);
  if (auto s = redis::AwaitFirstConnection(*out.client, wait, out.where); !s.ok()) return s;
  return out;
}

}  // namespace sluice::stack
