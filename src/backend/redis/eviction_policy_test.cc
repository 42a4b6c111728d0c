// The maxmemory-policy check: which policies can drop live limiter states, and reading the
// policy from a real redis-server (one that refuses CONFIG included).

#include "backend/redis/eviction_policy.h"

#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_store/redis_calls.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

absl::StatusOr<std::string> ReadPolicy(Client& client) {
  std::promise<absl::StatusOr<std::string>> promise;
  auto future = promise.get_future();
  ReadMaxmemoryPolicy(client, "sluice:x", [&promise](absl::StatusOr<std::string> p) {
    promise.set_value(std::move(p));
  });
  if (future.wait_for(10s) != std::future_status::ready) return absl::InternalError("no answer");
  return future.get();
}

TEST(EvictionPolicyTest, OnlyNoevictionKeepsEveryLiveState) {
  EXPECT_EQ(EvictionPolicyWarning("noeviction"), std::nullopt);
  for (const char* policy : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru",
                             "volatile-lfu", "volatile-random", "volatile-ttl", "something-new"}) {
    const auto warning = EvictionPolicyWarning(policy);
    ASSERT_TRUE(warning.has_value()) << policy;
    EXPECT_THAT(*warning, HasSubstr(policy));
    EXPECT_THAT(*warning, HasSubstr("noeviction"));
  }
  EXPECT_THAT(*EvictionPolicyWarning("volatile-ttl"), HasSubstr("with a TTL"));
}

TEST(EvictionPolicyTest, ReadsThePolicyOfTheServer) {
  testing::RedisServer plain;
  testing::RedisServer lru({"--maxmemory-policy", "allkeys-lru"});
  auto a = testing::OpenRedis({plain.url()}, false, 2s);
  auto b = testing::OpenRedis({lru.url()}, false, 2s);
  EXPECT_EQ(ReadPolicy(*a).value_or("?"), "noeviction");
  EXPECT_EQ(ReadPolicy(*b).value_or("?"), "allkeys-lru");
}

TEST(EvictionPolicyTest, AServerThatRefusesConfigIsAnError) {
  testing::RedisServer server({"--rename-command", "CONFIG", ""});
  auto client = testing::OpenRedis({server.url()}, false, 2s);
  const auto policy = ReadPolicy(*client);
  EXPECT_FALSE(policy.ok());
}

}  // namespace
}  // namespace sluice::redis
