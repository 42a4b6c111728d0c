// Leases on real Redis (decide.lua's mode 4, RedisStore::Lease): what each algorithm grants and
// records, what a refund gives back, and, with leased units spent locally at random times while
// other callers decide exactly on the same state, that every admission together is one the exact
// algorithm admits (no over-admission).

#include <future>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "algo/algorithms.h"
#include "gtest/gtest.h"
#include "redis/redis_store.h"
#include "tests/support/redis_calls.h"
#include "tests/support/redis_server.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using Item = backend::Item;
using testing::MakeLimit;

constexpr int64_t kMs = 1000;
constexpr int64_t kSecond = 1000000;
constexpr int64_t kHour = 3600 * kSecond;

absl::StatusOr<backend::LeaseSource::Grant> TakeLease(RedisStore& store, const Item& item,
                                                      uint64_t want, int64_t life_us) {
  std::promise<absl::StatusOr<backend::LeaseSource::Grant>> got;
  store.Lease(item, want, life_us,
              [&](absl::StatusOr<backend::LeaseSource::Grant> grant) { got.set_value(grant); });
  return got.get_future().get();
}

int64_t Remaining(RedisStore& store, Item item) {
  item.cost = 0;
  auto result = testing::DecideNow(store, {item});
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->decisions[0].remaining : -1;
}

class LeaseTest : public ::testing::Test {
 protected:
  LeaseTest()
      : client_(testing::OpenRedis({server_.url()}, false, 2s, SystemClock::Get())),
        store_(client_.get(), {}) {}

  testing::RedisServer server_;
  std::unique_ptr<Client> client_;
  RedisStore store_;
};

TEST_F(LeaseTest, AWindowLeaseCountsNowAndEndsWithTheWindow) {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingWindow}) {
    SCOPED_TRACE(static_cast<int>(algorithm));
    const Limit limit = MakeLimit(algorithm, 25, kHour);
    const std::string key = absl::StrCat("w", static_cast<int>(algorithm));
    const Item item{.limit = &limit, .limit_id = 7, .key = key};
    auto lease = TakeLease(store_, item, 10, 100 * kMs);
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_EQ(lease->granted, 10u);
    EXPECT_EQ(lease->ends_us, lease->now_us + 100 * kMs);  // the hour's window ends later
    EXPECT_EQ(Remaining(store_, item), 15);
    lease = TakeLease(store_, item, 100, 100 * kMs);  // only what is left
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(lease->granted, 15u);
    EXPECT_EQ(TakeLease(store_, item, 1, 100 * kMs)->granted, 0u);
    EXPECT_EQ(Remaining(store_, item), 0);
    // Five unspent units go back: a refund at a time inside the lease.
    Item five = item;
    five.cost = 5;
    std::promise<absl::Status> refunded;
    store_.Refund(std::span(&five, 1), lease->now_us,
                  [&](absl::Status s) { refunded.set_value(s); });
    ASSERT_TRUE(refunded.get_future().get().ok());
    EXPECT_EQ(Remaining(store_, item), 5);
  }
  // A lease never outlives its window.
  const Limit second = MakeLimit(Algorithm::kFixedWindow, 5, kSecond);
  const Item item{.limit = &second, .limit_id = 8, .key = "s"};
  auto lease = TakeLease(store_, item, 2, 10 * kSecond);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->ends_us, lease->now_us - lease->now_us % kSecond + kSecond);
}

TEST_F(LeaseTest, ABucketLeaseIsRecordedAtItsEnd) {
  // 10 per second, a bucket of 10: a lease living 100 ms first moves the bucket on to its end
  // (1 token), then takes what a request could take now.
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 10, kSecond);
  const Item item{.limit = &limit, .limit_id = 9, .key = "b"};
  auto lease = TakeLease(store_, item, 5, 100 * kMs);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->granted, 5u);
  EXPECT_EQ(lease->ends_us, lease->now_us + 100 * kMs);
  EXPECT_EQ(Remaining(store_, item), 4);  // 10 - 1 (the lease's life) - 5
  lease = TakeLease(store_, item, 100, 100 * kMs);
  ASSERT_TRUE(lease.ok());
  EXPECT_LE(lease->granted, 4u);
  EXPECT_GE(lease->granted, 3u);  // (a few ms passed: the new lease ends a little later)
  // A bucket too small for the lease's life grants nothing and records nothing.
  const Limit slow = MakeLimit(Algorithm::kTokenBucket, 1, kSecond);
  const Item none{.limit = &slow, .limit_id = 10, .key = "slow"};
  EXPECT_EQ(TakeLease(store_, none, 1, 2 * kSecond)->granted, 0u);
  EXPECT_EQ(Remaining(store_, none), 1);
}

TEST_F(LeaseTest, LeakyBucketAndSlidingLogAreNotLeased) {
  for (Algorithm algorithm : {Algorithm::kLeakyBucket, Algorithm::kSlidingLog}) {
    const Limit limit = MakeLimit(algorithm, 10, kHour);
    const Item item{.limit = &limit, .limit_id = 11, .key = "n"};
    auto lease = TakeLease(store_, item, 5, 100 * kMs);
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_EQ(lease->granted, 0u);
  }
}

TEST_F(LeaseTest, LeasesSurviveAFlushedScriptCache) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 10, kHour);
  const Item item{.limit = &limit, .limit_id = 12, .key = "f"};
  ASSERT_EQ(TakeLease(store_, item, 2, 100 * kMs)->granted, 2u);  // sent as text: learns the SHA
  std::this_thread::sleep_for(200ms);  // (its SCRIPT LOAD, after the reply)
  ASSERT_TRUE(testing::RedisCommand(*client_, {"SCRIPT", "FLUSH"}).ok());
  auto lease = TakeLease(store_, item, 2, 100 * kMs);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->granted, 2u);
  EXPECT_EQ(store_.GetStats().noscript_reloads, 1u);
  EXPECT_EQ(store_.GetStats().lease_calls, 3u);  // the second one sent again with its text
}

// Two callers lease (want 3, short lives) and spend their units at random moments of each
// lease; two decide exactly on the same state. Every admission, at the wall-clock time it was
// made (Redis's TIME and this process's clock are the same clock here), replayed in time order
// into the exact algorithm, must be admitted.
TEST_F(LeaseTest, LeasedAndExactCallersTogetherNeverOverAdmit) {
  for (Algorithm algorithm :
       {Algorithm::kTokenBucket, Algorithm::kFixedWindow, Algorithm::kSlidingWindow}) {
    SCOPED_TRACE(static_cast<int>(algorithm));
    const Limit limit = MakeLimit(algorithm, 40, 200 * kMs);  // 200 per second
    const std::string key = absl::StrCat("race", static_cast<int>(algorithm));
    const Item item{.limit = &limit, .limit_id = 20, .key = key};
    absl::Mutex mu;
    std::vector<int64_t> admitted;  // wall-clock µs of each admitted unit
    const auto record = [&](int64_t at) {
      absl::MutexLock lock(&mu);
      admitted.push_back(at);
    };
    const int64_t stop = SystemClock::Get()->NowMicros() + 600 * kMs;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {  // leasing: spend each unit at a random moment of the lease
        std::mt19937_64 random(t);
        while (SystemClock::Get()->NowMicros() < stop) {
          auto lease = TakeLease(store_, item, 3, 30 * kMs);
          if (!lease.ok() || lease->granted == 0) {
            std::this_thread::sleep_for(2ms);
            continue;
          }
          for (uint64_t u = 0; u < lease->granted; ++u) {
            const int64_t now = SystemClock::Get()->NowMicros();
            const int64_t left = lease->ends_us - now;
            if (left <= 0) break;  // unspent: the lease is over
            std::this_thread::sleep_for(std::chrono::microseconds(random() % (left / 2 + 1)));
            const int64_t at = SystemClock::Get()->NowMicros();
            if (at >= lease->ends_us) break;
            record(at);
          }
        }
      });
      threads.emplace_back([&] {  // exact
        while (SystemClock::Get()->NowMicros() < stop) {
          auto result = testing::DecideNow(store_, {item});
          if (result.ok() && result->allowed) record(result->now_us);
          std::this_thread::sleep_for(1ms);
        }
      });
    }
    for (auto& thread : threads) thread.join();
    absl::MutexLock lock(&mu);
    std::sort(admitted.begin(), admitted.end());
    ASSERT_GT(admitted.size(), 100u);  // the limit was reached often: 200/s for 0.6 s
    algo::CompactState state{};
    for (size_t i = 0; i < admitted.size(); ++i) {
      const Decision d = algo::DecideCompact(state, admitted[i], limit, 1);
      ASSERT_TRUE(d.allowed) << "admission " << i << " of " << admitted.size() << " at +"
                             << admitted[i] - admitted[0] << " µs is over the limit";
    }
  }
}

}  // namespace
}  // namespace sluice::redis
