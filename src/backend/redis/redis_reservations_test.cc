// RedisReservations (redis_reservations.h) on a real redis-server: taken once whichever client
// takes it, any bytes kept as they were, gone once its ttl has passed (the key expires), and
// Redis down is an error, not "no such reservation".

#include "backend/redis/redis_reservations.h"

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_store/redis_calls.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

absl::Status Put(RedisReservations& r, const std::string& id, const std::string& text,
                 int64_t ttl_us) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  auto future = promise->get_future();
  r.Put(id, text, 0, ttl_us, [promise](absl::Status s) { promise->set_value(s); });
  if (future.wait_for(10s) != std::future_status::ready) return absl::InternalError("no answer");
  return future.get();
}

absl::StatusOr<std::string> Take(RedisReservations& r, const std::string& id) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
  auto future = promise->get_future();
  r.Take(id, 0, [promise](absl::StatusOr<std::string> s) { promise->set_value(std::move(s)); });
  if (future.wait_for(10s) != std::future_status::ready) return absl::InternalError("no answer");
  return future.get();
}

TEST(RedisReservationsTest, TakenOnceByAnyInstance) {
  testing::RedisServer server;
  auto one = testing::OpenRedis({server.url()}, false);
  auto two = testing::OpenRedis({server.url()}, false);
  RedisReservations a(one.get(), "t:"), b(two.get(), "t:");
  const std::string text("any\0bytes\n\r", 11);
  ASSERT_TRUE(Put(a, "r1", text, 60'000'000).ok());
  auto ttl = testing::RedisCommand(*one, {"PTTL", a.KeyOf("r1")});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl->integer, 59'000);
  EXPECT_LE(ttl->integer, 60'000);
  auto taken = Take(b, "r1");
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, text);
  EXPECT_EQ(Take(a, "r1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Take(a, "never").status().code(), absl::StatusCode::kNotFound);
}

TEST(RedisReservationsTest, GoneWhenItsTtlHasPassed) {
  testing::RedisServer server;
  auto client = testing::OpenRedis({server.url()}, false);
  RedisReservations r(client.get(), "t:");
  ASSERT_TRUE(Put(r, "short", "x", 50'000).ok());
  // Wait for the key to go (bounded), then it cannot be taken.
  for (int i = 0; i < 200; ++i) {
    if (testing::RedisCommand(*client, {"EXISTS", r.KeyOf("short")})->integer == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(Take(r, "short").status().code(), absl::StatusCode::kNotFound);
}

TEST(RedisReservationsTest, RedisDownIsAnErrorNotNotFound) {
  testing::RedisServer server;
  auto client = testing::OpenRedis({server.url()}, false, 300ms);
  RedisReservations r(client.get(), "t:");
  ASSERT_TRUE(Put(r, "kept", "x", 60'000'000).ok());
  server.Stop();
  auto taken = Take(r, "kept");
  EXPECT_FALSE(taken.ok());
  EXPECT_NE(taken.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Put(r, "new", "x", 60'000'000).ok());
}

}  // namespace
}  // namespace sluice::redis
