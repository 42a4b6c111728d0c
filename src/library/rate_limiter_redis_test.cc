// sluice::RateLimiter on a real redis-server (a throwaway one on a free loopback port): the same
// all-or-nothing decisions, refunds, peeks and resets as on memory, one budget shared by every
// limiter of the same name, asynchronous answers from the I/O thread, and the failure policy
// when Redis is unreachable. Limits are token buckets refilling over hours, so that no window
// boundary of the real clock (Redis's) falls inside a test.

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "sluice/rate_limiter.h"
#include "tests/support/limits.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/units.h"

namespace sluice {
namespace {

using sluice::testing::kHour;
using testing::TokenBucket;
const Limit kTwoPerHour = TokenBucket(2, kHour);
const Limit kFivePerDay = TokenBucket(5, 24 * kHour);

RateLimiter::Options OnRedis(std::string url, FailurePolicy on_failure = FailurePolicy::kOpen,
                             std::string name = "test") {
  RateLimiter::Options options;
  options.name = std::move(name);
  options.redis.emplace();
  options.redis->url = std::move(url);
  options.redis->timeout_us = 2000000;
  options.redis->on_failure = on_failure;
  return options;
}

std::unique_ptr<RateLimiter> Make(const RateLimiter::Options& options,
                                  std::vector<Limit> limits = {kTwoPerHour, kFivePerDay}) {
  auto limiter = RateLimiter::Create(std::move(limits), options);
  EXPECT_TRUE(limiter.ok()) << limiter.status();
  return limiter.ok() ? std::move(*limiter) : nullptr;
}

Verdict MustDecide(RateLimiter& limiter, std::string_view key, uint64_t cost = 1) {
  absl::StatusOr<Verdict> verdict = limiter.Decide(key, cost);
  EXPECT_TRUE(verdict.ok()) << verdict.status();
  return verdict.ok() ? std::move(*verdict) : Verdict{};
}

std::vector<int64_t> Remaining(RateLimiter& limiter, std::string_view key) {
  absl::StatusOr<Verdict> peek = limiter.Peek(key);
  EXPECT_TRUE(peek.ok()) << peek.status();
  std::vector<int64_t> remaining;
  if (peek.ok()) {
    for (const Decision& d : peek->decisions) remaining.push_back(d.remaining);
  }
  return remaining;
}

TEST(RateLimiterRedisTest, DecidesEveryLimitTogether) {
  testing::RedisServer server;
  auto limiter = Make(OnRedis(server.url()));
  ASSERT_NE(limiter, nullptr);
  EXPECT_EQ(limiter->where(), "redis 127.0.0.1:" + std::to_string(server.port()));
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  Verdict second = MustDecide(*limiter, "alice");
  EXPECT_TRUE(second.allowed);
  EXPECT_FALSE(second.fell_back);
  EXPECT_EQ(second.remaining, 0);
  for (int i = 0; i < 5; ++i) {
    Verdict denied = MustDecide(*limiter, "alice");
    EXPECT_FALSE(denied.allowed);
    EXPECT_FALSE(denied.fell_back);
    EXPECT_TRUE(denied.decisions[1].allowed) << "the daily limit would have admitted";
    EXPECT_GT(denied.retry_after_us, 0);
    EXPECT_TRUE(denied.consumption.empty());
  }
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 3}))
      << "the daily limit counts the two admitted requests only";
}

TEST(RateLimiterRedisTest, RefundPeekAndReset) {
  testing::RedisServer server;
  auto limiter = Make(OnRedis(server.url()));
  ASSERT_NE(limiter, nullptr);
  Verdict verdict = MustDecide(*limiter, "alice", 2);
  ASSERT_TRUE(verdict.allowed);
  ASSERT_FALSE(verdict.consumption.empty());
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 3})) << "peeks consume nothing";

  EXPECT_TRUE(limiter->Refund(verdict.consumption).ok());
  EXPECT_TRUE(verdict.consumption.empty());
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{2, 5}));

  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  absl::StatusOr<size_t> reset = limiter->Reset("alice");
  ASSERT_TRUE(reset.ok()) << reset.status();
  EXPECT_EQ(*reset, 2u) << "one state per limit";
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{2, 5}));
}

// Costs known after the work, on Redis: settled lower (given back) and higher (recorded past the
// limits), and a cost recorded whatever the limits say.
TEST(RateLimiterRedisTest, SettleAndRecord) {
  testing::RedisServer server;
  auto limiter = Make(OnRedis(server.url()));
  ASSERT_NE(limiter, nullptr);
  Verdict estimate = MustDecide(*limiter, "alice", 2);
  ASSERT_TRUE(estimate.allowed);
  EXPECT_TRUE(limiter->Settle(estimate.consumption, 1).ok());
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{1, 4}));
  Verdict under = MustDecide(*limiter, "alice", 1);
  EXPECT_TRUE(limiter->Settle(under.consumption, 4).ok());  // 3 more: past both
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 0}));
  EXPECT_FALSE(MustDecide(*limiter, "alice").allowed);

  absl::StatusOr<Verdict> recorded = limiter->Record("bob", 9);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_FALSE(recorded->allowed);
  EXPECT_EQ(Remaining(*limiter, "bob"), (std::vector<int64_t>{0, 0}));
}

// A cluster: url names one node, the client finds the others; keys spread over the masters
// and each is still decided all-or-nothing (its limits share a slot).
TEST(RateLimiterRedisTest, DecidesOnACluster) {
  testing::RedisCluster cluster(3);
  ASSERT_TRUE(cluster.created());
  RateLimiter::Options options = OnRedis(cluster.url(0));
  options.redis->cluster = true;
  options.redis->connect_wait_us = 5000000;
  auto limiter = Make(options);
  ASSERT_NE(limiter, nullptr);
  EXPECT_EQ(limiter->where().rfind("redis cluster via 127.0.0.1:", 0), 0u) << limiter->where();
  for (int k = 0; k < 8; ++k) {
    const std::string key = "user-" + std::to_string(k);
    SCOPED_TRACE(key);
    EXPECT_TRUE(MustDecide(*limiter, key, 2).allowed);
    Verdict denied = MustDecide(*limiter, key);
    EXPECT_FALSE(denied.allowed);
    EXPECT_FALSE(denied.fell_back);
    EXPECT_EQ(Remaining(*limiter, key), (std::vector<int64_t>{0, 3}));
  }
}

// Limiters of one name share a budget per key, as processes on one Redis do; another name is
// another budget.
TEST(RateLimiterRedisTest, LimitersOfOneNameShareTheirStates) {
  testing::RedisServer server;
  auto a = Make(OnRedis(server.url()));
  auto b = Make(OnRedis(server.url()));
  auto other = Make(OnRedis(server.url(), FailurePolicy::kOpen, "other"));
  ASSERT_TRUE(a && b && other);
  EXPECT_TRUE(MustDecide(*a, "alice").allowed);
  EXPECT_TRUE(MustDecide(*b, "alice").allowed);
  EXPECT_FALSE(MustDecide(*a, "alice").allowed);
  EXPECT_FALSE(MustDecide(*b, "alice").allowed);
  EXPECT_TRUE(MustDecide(*other, "alice").allowed);
}

TEST(RateLimiterRedisTest, AsynchronousCallsAnswerFromTheIoThread) {
  testing::RedisServer server;
  auto limiter = Make(OnRedis(server.url()));
  ASSERT_NE(limiter, nullptr);
  std::promise<std::pair<bool, std::thread::id>> answered;
  limiter->DecideAsync("alice", 1, [&](absl::StatusOr<Verdict> verdict) {
    answered.set_value({verdict.ok() && verdict->allowed, std::this_thread::get_id()});
  });
  auto future = answered.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const auto [allowed, thread] = future.get();
  EXPECT_TRUE(allowed);
  EXPECT_NE(thread, std::this_thread::get_id());
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{1, 4}));
}

TEST(RateLimiterRedisTest, AWrongPasswordIsCreatesError) {
  testing::RedisServer server({"--requirepass", "secret"});
  auto options = OnRedis("redis://:wrong@127.0.0.1:" + std::to_string(server.port()));
  auto limiter = RateLimiter::Create({kTwoPerHour}, options);
  ASSERT_FALSE(limiter.ok());
  EXPECT_EQ(limiter.status().code(), absl::StatusCode::kPermissionDenied) << limiter.status();
  options.redis->url = "redis://:secret@127.0.0.1:" + std::to_string(server.port());
  auto right = Make(options, {kTwoPerHour});
  ASSERT_NE(right, nullptr);
  EXPECT_TRUE(MustDecide(*right, "alice").allowed);
}

// Unreachable Redis (nothing listens on the port): Create still succeeds, and the policy
// answers every decision; refunds and resets fail (nothing to give back to, nothing forgotten).
RateLimiter::Options Unreachable(FailurePolicy policy) {
  RateLimiter::Options options =
      OnRedis("redis://127.0.0.1:" + std::to_string(testing::RedisServer::FreePort()), policy);
  options.redis->timeout_us = 100000;
  options.redis->connect_wait_us = 0;
  return options;
}

TEST(RateLimiterRedisTest, FailOpenAdmitsWhileRedisIsUnreachable) {
  auto limiter = Make(Unreachable(FailurePolicy::kOpen));
  ASSERT_NE(limiter, nullptr);
  for (int i = 0; i < 4; ++i) {
    Verdict verdict = MustDecide(*limiter, "alice");
    EXPECT_TRUE(verdict.allowed) << "more than the limit's 2: nothing counts them";
    EXPECT_TRUE(verdict.fell_back);
    EXPECT_TRUE(verdict.consumption.empty()) << "Redis consumed nothing to refund";
  }
  EXPECT_FALSE(limiter->Reset("alice").ok());
}

TEST(RateLimiterRedisTest, FailClosedDeniesWhileRedisIsUnreachable) {
  auto limiter = Make(Unreachable(FailurePolicy::kClosed));
  ASSERT_NE(limiter, nullptr);
  Verdict verdict = MustDecide(*limiter, "alice");
  EXPECT_FALSE(verdict.allowed);
  EXPECT_TRUE(verdict.fell_back);
  EXPECT_EQ(verdict.retry_after_us, 1000000);
  std::promise<bool> denied;
  limiter->DecideAsync("alice", 1, [&](absl::StatusOr<Verdict> v) {
    denied.set_value(v.ok() && !v->allowed && v->fell_back);
  });
  auto future = denied.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(future.get());
}

// Redis comes back: the same limiter decides on it again, without being made anew.
TEST(RateLimiterRedisTest, DecidesOnRedisOnceItIsUp) {
  const int port = testing::RedisServer::FreePort();
  RateLimiter::Options options =
      OnRedis("redis://127.0.0.1:" + std::to_string(port), FailurePolicy::kClosed);
  options.redis->timeout_us = 100000;
  options.redis->connect_wait_us = 0;
  auto limiter = Make(options);
  ASSERT_NE(limiter, nullptr);
  EXPECT_TRUE(MustDecide(*limiter, "alice").fell_back);
  testing::RedisServer server({}, port);
  ASSERT_TRUE(server.running());
  bool decided = false;
  for (int i = 0; i < 100 && !decided; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    decided = !MustDecide(*limiter, "bob", 0).fell_back;
  }
  EXPECT_TRUE(decided) << "still failing over 5 s after Redis came up";
  Verdict verdict = MustDecide(*limiter, "alice");
  EXPECT_TRUE(verdict.allowed);
  EXPECT_FALSE(verdict.fell_back);
}

// Overrides are the object's own: two limiters of one name with the same override for a key
// share its state on Redis (it is named by the limiter's name and the key); one without it
// keeps deciding the key against the limiter's limits.
TEST(RateLimiterRedisTest, OverridesOfOneNameShareTheirStatesOnRedis) {
  testing::RedisServer server;
  auto a = Make(OnRedis(server.url()));
  auto b = Make(OnRedis(server.url()));
  auto plain = Make(OnRedis(server.url()));
  ASSERT_TRUE(a && b && plain);
  ASSERT_TRUE(a->SetOverride("acme", {TokenBucket(3, kHour)}).ok());
  ASSERT_TRUE(b->SetOverride("acme", {TokenBucket(3, kHour)}).ok());
  EXPECT_TRUE(MustDecide(*a, "acme").allowed);
  EXPECT_TRUE(MustDecide(*b, "acme").allowed);
  EXPECT_TRUE(MustDecide(*a, "acme").allowed);
  EXPECT_FALSE(MustDecide(*b, "acme").allowed);
  EXPECT_EQ(Remaining(*plain, "acme"), (std::vector<int64_t>{2, 5}));
}

}  // namespace
}  // namespace sluice
