// RedisHolds (redis_holds.h) on a real redis-server: many acquisitions of one key at once, from
// several threads, batched into few script calls, never more than N granted; a release answers
// once; a script flushed from the server is sent as text again; holds past their max_hold free
// their slots.

#include "backend/redis/redis_holds.h"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_store/redis_calls.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

backend::Acquisition AcquireNow(RedisHolds& holds, std::string_view key, uint64_t n,
                                int64_t max_hold_us = 60'000'000) {
  const backend::HoldRequest request{.limit_id = 7, .key = key, .n = n, .max_hold_us = max_hold_us};
  auto promise = std::make_shared<std::promise<backend::Acquisition>>();
  auto future = promise->get_future();
  holds.Acquire(std::span(&request, 1), 0,
                [promise](backend::Acquisition got) { promise->set_value(std::move(got)); });
  if (future.wait_for(10s) != std::future_status::ready) {
    backend::Acquisition none;
    none.status = absl::DeadlineExceededError("no answer");
    return none;
  }
  return future.get();
}

absl::StatusOr<size_t> ReleaseNow(RedisHolds& holds, const std::vector<backend::Hold>& held) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<size_t>>>();
  auto future = promise->get_future();
  holds.Release(held, 0, [promise](absl::StatusOr<size_t> n) { promise->set_value(n); });
  if (future.wait_for(10s) != std::future_status::ready) return absl::DeadlineExceededError("");
  return future.get();
}

int64_t ScriptCalls(Client& client) {
  auto info = testing::RedisCommand(client, {"INFO", "commandstats"});
  if (!info.ok()) return -1;
  int64_t calls = 0;
  for (const char* name : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
    const size_t at = info->str.find(name);
    if (at != std::string::npos) calls += std::atoll(info->str.c_str() + at + std::strlen(name));
  }
  return calls;
}

TEST(RedisHoldsTest, ManyAtOnceAreBatchedAndNeverMoreThanN) {
  testing::RedisServer server;
  auto client = testing::OpenRedis({server.url()}, false);
  RedisHolds holds(client.get(), "t:");
  const int64_t calls_before = ScriptCalls(*client);
  std::atomic<int> granted{0}, refused{0}, errors{0};
  auto all_done = std::make_shared<std::promise<void>>();
  std::atomic<int> left{200};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        const backend::HoldRequest request{
            .limit_id = 7, .key = "hot", .n = 5, .max_hold_us = 60'000'000};
        holds.Acquire(std::span(&request, 1), 0, [&, all_done](backend::Acquisition got) {
          if (!got.status.ok())
            ++errors;
          else if (got.ok)
            ++granted;
          else
            ++refused;
          if (--left == 0) all_done->set_value();
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(all_done->get_future().wait_for(10s), std::future_status::ready);
  EXPECT_EQ(granted.load(), 5);
  EXPECT_EQ(refused.load(), 195);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LT(ScriptCalls(*client) - calls_before, 100) << "200 acquisitions in far fewer calls";
}

TEST(RedisHoldsTest, AReleaseAnswersOnceAndAFlushedScriptIsSentAgain) {
  testing::RedisServer server;
  auto client = testing::OpenRedis({server.url()}, false);
  RedisHolds holds(client.get(), "t:");
  backend::Acquisition got = AcquireNow(holds, "k", 1);
  ASSERT_TRUE(got.status.ok()) << got.status;
  ASSERT_TRUE(got.ok);
  EXPECT_FALSE(AcquireNow(holds, "k", 1).ok) << "1 at once";
  ASSERT_TRUE(testing::RedisCommand(*client, {"SCRIPT", "FLUSH"}).ok());
  EXPECT_EQ(ReleaseNow(holds, got.holds).value_or(99), 1u) << "NOSCRIPT: sent as text";
  EXPECT_EQ(ReleaseNow(holds, got.holds).value_or(99), 0u);
  EXPECT_TRUE(AcquireNow(holds, "k", 1).ok);
}

absl::StatusOr<size_t> RenewNow(RedisHolds& holds, const std::vector<backend::Hold>& held) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<size_t>>>();
  auto future = promise->get_future();
  holds.Renew(held, 0, [promise](absl::StatusOr<size_t> n) { promise->set_value(n); });
  if (future.wait_for(10s) != std::future_status::ready) return absl::DeadlineExceededError("");
  return future.get();
}

std::future<backend::Acquisition> AcquireLater(RedisHolds& holds, const std::string& key,
                                               uint64_t n) {
  const backend::HoldRequest request{.limit_id = 7, .key = key, .n = n, .max_hold_us = 60'000'000};
  auto promise = std::make_shared<std::promise<backend::Acquisition>>();
  holds.Acquire(std::span(&request, 1), 0,
                [promise](backend::Acquisition got) { promise->set_value(std::move(got)); });
  return promise->get_future();
}

// The count of a Release (`renew` false) or a Renew of `held`, when it comes.
std::future<absl::StatusOr<size_t>> CountLater(RedisHolds& holds,
                                               const std::vector<backend::Hold>& held, bool renew) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<size_t>>>();
  auto done = [promise](absl::StatusOr<size_t> n) { promise->set_value(n); };
  if (renew) {
    holds.Renew(held, 0, done);
  } else {
    holds.Release(held, 0, done);
  }
  return promise->get_future();
}

// Acquisitions, renewals and releases queued while the calls in flight wait go together in one
// call, each op's arguments and answer as long as its kind needs: each is answered as if alone,
// in the order sent.
TEST(RedisHoldsTest, MixedOpsInOneCallAreEachAnsweredAsAlone) {
  testing::RedisServer server;
  auto client = testing::OpenRedis({server.url()}, false);
  auto admin = testing::OpenRedis({server.url()}, false);
  RedisHolds holds(client.get(), "t:");
  const backend::Acquisition x = AcquireNow(holds, "x", 1);
  const backend::Acquisition y = AcquireNow(holds, "y", 1);
  const backend::Acquisition z = AcquireNow(holds, "z", 1);
  ASSERT_TRUE(x.ok && y.ok && z.ok);
  const int64_t calls_before = ScriptCalls(*admin);
  ASSERT_TRUE(testing::RedisCommand(*admin, {"CLIENT", "PAUSE", "300", "ALL"}).ok());
  // Two calls take the call slots and wait for Redis; the rest queue behind them.
  auto p1 = AcquireLater(holds, "p1", 1);
  auto p2 = AcquireLater(holds, "p2", 1);
  auto release_x = CountLater(holds, x.holds, /*renew=*/false);
  auto renew_y = CountLater(holds, y.holds, /*renew=*/true);
  auto x_again = AcquireLater(holds, "x", 1);  // after x's release: free
  auto release_z = CountLater(holds, z.holds, /*renew=*/false);
  auto release_z_again = CountLater(holds, z.holds, /*renew=*/false);
  auto y_again = AcquireLater(holds, "y", 1);  // y is held (and renewed): refused
  auto z_again = AcquireLater(holds, "z", 1);  // after z's release: free
  for (auto* f : {&p1, &p2, &x_again, &y_again, &z_again}) {
    ASSERT_EQ(f->wait_for(10s), std::future_status::ready);
  }
  EXPECT_TRUE(p1.get().ok);
  EXPECT_TRUE(p2.get().ok);
  EXPECT_EQ(release_x.get().value_or(99), 1u);
  EXPECT_EQ(renew_y.get().value_or(99), 1u);
  EXPECT_TRUE(x_again.get().ok);
  EXPECT_EQ(release_z.get().value_or(99), 1u);
  EXPECT_EQ(release_z_again.get().value_or(99), 0u);
  const backend::Acquisition refused = y_again.get();
  EXPECT_TRUE(refused.status.ok()) << refused.status;
  EXPECT_FALSE(refused.ok);
  EXPECT_GT(refused.retry_after_us, 0);
  EXPECT_TRUE(z_again.get().ok);
  // 9 ops in at most 4 calls: the 7 queued went together (or in two, had one slot come back).
  const int64_t calls = ScriptCalls(*admin) - calls_before;
  EXPECT_LE(calls, 4) << calls << " script calls";
}

// A hold past its max_hold is not brought back by a renewal: its slot may be another's by now.
TEST(RedisHoldsTest, AnEndedHoldIsNotRenewed) {
  testing::RedisServer server;
  auto client = testing::OpenRedis({server.url()}, false);
  RedisHolds holds(client.get(), "t:");
  backend::Acquisition a = AcquireNow(holds, "k", 1, 50'000);
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(RenewNow(holds, a.holds).value_or(99), 1u) << "live: renewed";
  std::this_thread::sleep_for(80ms);  // past the renewed max_hold of 50 ms
  ASSERT_TRUE(AcquireNow(holds, "k", 1, 60'000'000).ok) << "the slot is free again";
  EXPECT_EQ(RenewNow(holds, a.holds).value_or(99), 0u) << "ended: not renewed";
  EXPECT_FALSE(AcquireNow(holds, "k", 1, 60'000'000).ok) << "still one at once";
}

TEST(RedisHoldsTest, HoldsPastTheirMaxHoldFreeTheirSlots) {
  testing::RedisServer server;
  auto client = testing::OpenRedis({server.url()}, false);
  RedisHolds holds(client.get(), "t:");
  ASSERT_TRUE(AcquireNow(holds, "k", 2, 50'000).ok);
  ASSERT_TRUE(AcquireNow(holds, "k", 2, 50'000).ok);
  backend::Acquisition refused = AcquireNow(holds, "k", 2, 50'000);
  ASSERT_FALSE(refused.ok);
  EXPECT_GT(refused.retry_after_us, 0);
  EXPECT_LE(refused.retry_after_us, 50'000);
  std::this_thread::sleep_for(60ms);  // both ended (their max_hold), never released
  EXPECT_TRUE(AcquireNow(holds, "k", 2, 60'000'000).ok);
  EXPECT_TRUE(AcquireNow(holds, "k", 2, 60'000'000).ok);
  EXPECT_FALSE(AcquireNow(holds, "k", 2, 60'000'000).ok);  // the refusal drops the ended ones
  EXPECT_EQ(testing::RedisCommand(*client, {"ZCARD", holds.KeyOf(7, "k")})->integer, 2);
}

}  // namespace
}  // namespace sluice::redis
