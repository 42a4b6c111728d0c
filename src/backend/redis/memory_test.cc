// Redis memory per limiter key: decides K distinct keys through RedisStore on a fresh
// redis-server and reads INFO memory used_memory before and after, for token_bucket and
// fixed_window, with a key per state and with the states packed into hashes (redis.buckets). K is
// 100000 here (a few seconds); SLUICE_REDIS_MEMORY_KEYS=1000000 runs the 1M measurement
// docs/performance.md reports. The naive layouts of bench/anchors/redis/memory.sh take
// ≈97 B (string counter + TTL) and ≈145 B (2-field hash + TTL) at 1M keys.

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backend/redis/redis_store.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_store/redis_calls.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using Item = backend::Item;

// A field of INFO ("used_memory:123\r\n"), or -1.
int64_t InfoField(Client& client, std::string_view section, std::string_view field) {
  auto info = testing::RedisCommand(client, {"INFO", std::string(section)});
  if (!info.ok()) return -1;
  const std::string name = std::string(field) + ":";
  const size_t at = info->str.find("\n" + name);
  if (at == std::string::npos) return -1;
  return std::atoll(info->str.c_str() + at + 1 + name.size());
}

size_t KeysToDecide() {
  const char* env = std::getenv("SLUICE_REDIS_MEMORY_KEYS");
  return env != nullptr && std::atoll(env) > 0 ? static_cast<size_t>(std::atoll(env)) : 100000;
}

struct Measured {
  int64_t keys = 0;    // Redis keys made
  int64_t states = 0;  // states stored (packed: fields of those keys)
  double bytes_per_key = 0;
  int64_t errors = 0;
};

// Decides `count` distinct keys once each (at most 4096 in flight; bounded to 5 minutes), then
// the growth of used_memory per key. The store's script is loaded before the first reading.
Measured MeasureKeys(Client& client, const Limit& limit, size_t count, uint32_t buckets) {
  RedisStore store(&client, {.buckets = buckets});
  Measured m;
  const Item warm{.limit = &limit, .limit_id = 1, .key = "warm-up", .cost = 1};
  {
    auto promise = std::make_shared<std::promise<void>>();
    store.DecideAll(std::span(&warm, 1),
                    [promise](absl::StatusOr<DecideResult>) { promise->set_value(); });
    promise->get_future().wait_for(10s);
    std::this_thread::sleep_for(100ms);  // the store's own SCRIPT LOAD, for the SHA
  }
  EXPECT_EQ(
      testing::RedisCommand(client, {"DEL", store.StatePlace(limit, 1, "warm-up").key})->integer,
      1);
  const int64_t before = InfoField(client, "memory", "used_memory");
  const int64_t keys_before = testing::RedisCommand(client, {"DBSIZE"})->integer;

  struct Flight {
    absl::Mutex mu;
    size_t in_flight ABSL_GUARDED_BY(mu) = 0;
    size_t done ABSL_GUARDED_BY(mu) = 0;
  } flight;
  std::atomic<int64_t> errors{0};
  const auto give_up = std::chrono::steady_clock::now() + 5min;
  for (size_t i = 0; i < count && std::chrono::steady_clock::now() < give_up; ++i) {
    {
      absl::MutexLock lock(&flight.mu);
      flight.mu.AwaitWithTimeout(
          absl::Condition(
              +[](size_t* in_flight) { return *in_flight < 4096; }, &flight.in_flight),
          absl::Seconds(10));
      ++flight.in_flight;
    }
    const std::string key = fmt::format("client:{}", i);
    const Item item{.limit = &limit, .limit_id = 1, .key = key, .cost = 1};
    store.DecideAll(std::span(&item, 1), [&](absl::StatusOr<DecideResult> r) {
      if (!r.ok()) ++errors;
      absl::MutexLock lock(&flight.mu);
      --flight.in_flight;
      ++flight.done;
    });
  }
  {
    absl::MutexLock lock(&flight.mu);
    flight.mu.AwaitWithTimeout(
        absl::Condition(
            +[](size_t* in_flight) { return *in_flight == 0; }, &flight.in_flight),
        absl::Seconds(60));
  }
  const int64_t after = InfoField(client, "memory", "used_memory");
  m.keys = testing::RedisCommand(client, {"DBSIZE"})->integer - keys_before;
  m.states = m.keys;
  if (buckets > 0) {  // every field of every hash
    auto fields =
        testing::RedisCommand(client, {"EVAL",
                                       "local n = 0 for _, k in ipairs(redis.call('KEYS', '*')) do "
                                       "n = n + redis.call('HLEN', k) end return n",
                                       "0"});
    m.states = fields.ok() ? fields->integer : -1;
  }
  m.errors = errors.load();
  m.bytes_per_key =
      m.states > 0 ? static_cast<double>(after - before) / static_cast<double>(m.states) : 0;
  return m;
}

TEST(RedisMemoryTest, BytesPerKeyOfEachAlgorithm) {
  testing::RedisServer server;
  Client::Options o;
  o.seeds.push_back(*ParseUrl(server.url()));
  o.connection.timeout = 5s;
  o.connection.max_pending = 1000000;
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 500 && !(*client)->Ready(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE((*client)->Ready());
  const size_t count = KeysToDecide();
  const int64_t day = int64_t{86400} * 1000000;
  // A key per state; then packed, about 32 states a hash (buckets = keys / 32).
  const uint32_t packed = static_cast<uint32_t>(std::max<size_t>(1, count / 32));
  for (uint32_t buckets : {uint32_t{0}, packed}) {
    for (Algorithm algorithm : {Algorithm::kTokenBucket, Algorithm::kFixedWindow}) {
      Limit limit;
      limit.algorithm = algorithm;
      limit.requests = 1000;
      limit.window_us = day;
      ASSERT_EQ(testing::RedisCommand(**client, {"FLUSHALL"})->str, "OK");
      const Measured m = MeasureKeys(**client, limit, count, buckets);
      std::printf(
          "redis memory: %s, buckets %u, %lld states in %lld keys, %.1f bytes per state "
          "(used_memory growth / states)\n",
          std::string(AlgorithmName(algorithm)).c_str(), buckets, static_cast<long long>(m.states),
          static_cast<long long>(m.keys), m.bytes_per_key);
      EXPECT_EQ(m.errors, 0);
      EXPECT_EQ(m.states, static_cast<int64_t>(count));
      if (buckets > 0) {
        EXPECT_LE(m.keys, static_cast<int64_t>(buckets));
      }
      // Every key has its TTL (memory cleans itself): INFO keyspace "db0:keys=K,expires=E,...".
      auto keyspace = testing::RedisCommand(**client, {"INFO", "keyspace"});
      ASSERT_TRUE(keyspace.ok());
      EXPECT_NE(keyspace->str.find(fmt::format("keys={},expires={},", m.keys, m.keys)),
                std::string::npos)
          << keyspace->str;
      EXPECT_GT(m.bytes_per_key, 16.0);
      if (buckets == 0) {
        // One string key per state: Redis's own per-key cost (two dict entries, the key's SDS,
        // the value's object, the bucket arrays) dominates. See docs/performance.md for the figures
        // at 1M keys.
        EXPECT_LT(m.bytes_per_key, 200.0);
      } else {
        // Packed, the states of a hash share that cost: the target is 64 B a state.
        EXPECT_LE(m.bytes_per_key, 64.0);
      }
    }
  }
}

}  // namespace
}  // namespace sluice::redis
