// RedisStore on real Redis: one limit held exactly by many concurrent callers, all-or-nothing
// across slots of a cluster, NOSCRIPT after SCRIPT FLUSH and after a crash and restart, the
// circuit breaker opening on timeouts and closing once Redis answers again, calls that ran late
// (Redis stopped or busy) consuming nothing, one timeout per decision, and health that follows
// what decisions get.

#include "backend/redis/redis_store.h"

#include <future>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/delay_relay.h"
#include "tests/support/jump_clock.h"
#include "tests/support/limits.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_store/cluster_batch.h"
#include "tests/support/redis_store/redis_calls.h"
#include "tests/support/units.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using Item = backend::Item;

using testing::MakeLimit;

using sluice::testing::kHour;

std::unique_ptr<Client> Open(std::vector<std::string> urls, bool cluster,
                             std::chrono::microseconds timeout = 2s,
                             const Clock* clock = SystemClock::Get()) {
  return testing::OpenRedis(urls, cluster, timeout, clock);
}

absl::StatusOr<DecideResult> Decide(RedisStore& store, std::vector<Item> items) {
  return testing::DecideNow(store, items);
}

absl::StatusOr<Reply> Command(Client& client, std::vector<std::string> args) {
  return testing::RedisCommand(client, args);
}

// A key name starting with `prefix` whose limit-1 state lands in another cluster slot than
// "global"'s limit-2 state.
std::string KeyInAnotherSlot(const RedisStore& store, std::string_view prefix) {
  std::string key = fmt::format("{}:0", prefix);
  for (int i = 1; KeySlot(store.RedisKey(1, key)) == KeySlot(store.RedisKey(2, "global")); ++i) {
    key = fmt::format("{}:{}", prefix, i);
  }
  return key;
}

TEST(RedisStoreTest, KeysAreShortAndTaggedByDescriptor) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false);
  RedisStore store(client.get(), {});
  const std::string a = store.RedisKey(0xabc, "3:key5:value");
  EXPECT_THAT(a, ::testing::MatchesRegex("sluice:\\{[0-9a-f]{16}\\}abc"));
  EXPECT_EQ(KeySlot(a),
            KeySlot(store.RedisKey(0xdef, "3:key5:value")));  // one descriptor, one slot
  EXPECT_EQ(store.RedisKey(1, std::string(4096, 'k')).size(), a.size() - 2);
}

// The names of states already in Redis must not change from one version to the next (their
// states would be lost): pinned here, for both layouts.
TEST(RedisStoreTest, KeyNamesAreStable) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false);
  RedisStore store(client.get(), {});
  EXPECT_EQ(store.RedisKey(0xabc, "3:key5:value"), "sluice:{4855cc667960e75b}abc");
  EXPECT_EQ(store.RedisKey(0, ""), "sluice:{2d06800538d394c2}0");
  RedisStore packed(client.get(), {.key_prefix = "p:", .buckets = 1000});
  EXPECT_EQ(packed.RedisKey(0x10, "3:key5:value"), "p:{1d3}4855cc667960e75b:10");
  const Limit bucket = MakeLimit(Algorithm::kTokenBucket, 5, kHour);
  EXPECT_EQ(packed.StatePlace(bucket, 0x10, "3:key5:value").key, "p:{1d3}");
}

// Packed (buckets > 0): bounded states are fields of one of `buckets` hashes, named by the
// descriptor's hash and the limit id; sliding_log keeps a key, in the same slot.
TEST(RedisStoreTest, PackedStatesShareHashesInTheDescriptorsSlot) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false);
  RedisStore store(client.get(), {.buckets = 16});
  const Limit bucket = MakeLimit(Algorithm::kTokenBucket, 5, kHour);
  const Limit log = MakeLimit(Algorithm::kSlidingLog, 5, kHour);
  const RedisStore::Place a = store.StatePlace(bucket, 0xabc, "3:key5:value");
  EXPECT_THAT(a.key, ::testing::MatchesRegex("sluice:\\{[0-9a-f]\\}"));
  EXPECT_EQ(a.field.size(), 16u);
  const RedisStore::Place b = store.StatePlace(bucket, 0xdef, "3:key5:value");
  EXPECT_EQ(b.key, a.key);
  EXPECT_NE(b.field, a.field);
  const RedisStore::Place l = store.StatePlace(log, 0xabc, "3:key5:value");
  EXPECT_TRUE(l.field.empty());
  EXPECT_EQ(KeySlot(l.key), KeySlot(a.key));
  EXPECT_EQ(KeySlot(store.RedisKey(0xabc, "3:key5:value")), KeySlot(a.key));
  // 100 descriptors in at most 16 hashes; reset is per state.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(
        Decide(store, {{.limit = &bucket, .limit_id = 1, .key = fmt::format("u{}", i), .cost = 2}})
            .ok());
  }
  EXPECT_LE(Command(*client, {"DBSIZE"})->integer, 16);
  const Item u7{.limit = &bucket, .limit_id = 1, .key = "u7", .cost = 0};
  EXPECT_EQ(Decide(store, {u7})->decisions[0].remaining, 3);
  std::promise<absl::StatusOr<size_t>> reset;
  store.Reset(std::span(&u7, 1), [&](absl::StatusOr<size_t> n) { reset.set_value(n); });
  auto reset_count = reset.get_future().get();
  ASSERT_TRUE(reset_count.ok());
  EXPECT_EQ(*reset_count, 1u);
  EXPECT_EQ(Decide(store, {u7})->decisions[0].remaining, 5);
  const Item u8{.limit = &bucket, .limit_id = 1, .key = "u8", .cost = 0};
  EXPECT_EQ(Decide(store, {u8})->decisions[0].remaining, 3);  // its neighbours keep theirs
}

// Every reset moves the reset epoch, which other instances read (backend::OverLimitCache), and
// so does a Redis that lost its states: the epoch starts at a random value where it is missing.
TEST(RedisStoreTest, ResetMovesTheResetEpoch) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false);
  RedisStore store(client.get(), {.key_prefix = "p:"});
  const auto read_epoch = [&store] {
    std::promise<absl::StatusOr<int64_t>> epoch;
    store.ReadResetEpoch([&](absl::StatusOr<int64_t> e) { epoch.set_value(e); });
    return epoch.get_future().get();
  };
  const absl::StatusOr<int64_t> start = read_epoch();
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(*read_epoch(), *start);  // never reset: the start stays
  const Limit bucket = MakeLimit(Algorithm::kTokenBucket, 5, kHour);
  const Item item{.limit = &bucket, .limit_id = 1, .key = "k", .cost = 1};
  for (int round = 1; round <= 2; ++round) {
    std::promise<absl::StatusOr<size_t>> reset;
    store.Reset(std::span(&item, 1), [&](absl::StatusOr<size_t> n) { reset.set_value(n); });
    ASSERT_TRUE(reset.get_future().get().ok());
    EXPECT_EQ(*read_epoch(), *start + round);
  }
  EXPECT_EQ(Command(*client, {"GET", "p:resets"})->str, absl::StrCat(*start + 2));
  // Redis loses everything (as a restart without persistence does): a new epoch, which lasts.
  ASSERT_EQ(Command(*client, {"FLUSHALL"})->str, "OK");
  const absl::StatusOr<int64_t> after = read_epoch();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(*after, *start + 2);
  EXPECT_EQ(*read_epoch(), *after);
}

// Every algorithm that is exact holds its limit exactly under concurrent callers, a key per
// state and packed.
TEST(RedisStoreTest, ConcurrentCallersGetExactlyTheLimit) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false);
  for (uint32_t buckets : {0u, 4u}) {
    RedisStore store(client.get(), {.buckets = buckets});
    for (Algorithm algorithm :
         {Algorithm::kTokenBucket, Algorithm::kFixedWindow, Algorithm::kSlidingLog}) {
      const Limit limit = MakeLimit(algorithm, 50, kHour);
      std::atomic<int> allowed{0}, errors{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
          for (int i = 0; i < 40; ++i) {
            auto r = Decide(store, {{.limit = &limit,
                                     .limit_id = 7 + buckets,
                                     .key = AlgorithmName(algorithm),
                                     .cost = 1}});
            if (!r.ok()) ++errors;
            if (r.ok() && r->allowed) ++allowed;
          }
        });
      }
      for (auto& t : threads) t.join();
      EXPECT_EQ(errors.load(), 0) << AlgorithmName(algorithm);
      EXPECT_EQ(allowed.load(), 50) << AlgorithmName(algorithm) << " buckets " << buckets;
    }
  }
}

TEST(RedisStoreTest, ScriptIsReloadedAfterFlushAndAfterARestart) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false, 500ms);
  RedisStore store(client.get(), {});
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 100, kHour);
  const Item item{.limit = &limit, .limit_id = 1, .key = "k", .cost = 1};
  ASSERT_TRUE(Decide(store, {item}).ok());
  ASSERT_TRUE(Decide(store, {item}).ok());
  std::this_thread::sleep_for(100ms);  // the store's own SCRIPT LOAD (for the SHA) is done
  ASSERT_EQ(Command(*client, {"SCRIPT", "FLUSH"})->str, "OK");
  auto r = Decide(store, {item});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decisions[0].remaining, 97);
  EXPECT_EQ(store.GetStats().noscript_reloads, 1u);

  // kill -9: calls fail fast; after the restart (a new, empty server) they work again.
  const int port = server.port();
  server.Kill();
  auto down = Decide(store, {item});
  EXPECT_FALSE(down.ok());
  testing::RedisServer again({}, port);
  for (int i = 0; i < 300 && !client->Ready(); ++i) std::this_thread::sleep_for(10ms);
  absl::StatusOr<DecideResult> back = absl::UnavailableError("not yet");
  for (int i = 0; i < 300 && !(back = Decide(store, {item})).ok(); ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->decisions[0].remaining, 99);  // the state went with the old server
  EXPECT_GE(store.GetStats().noscript_reloads, 2u);
}

TEST(RedisStoreTest, BreakerOpensOnTimeoutsAndClosesWhenRedisIsBack) {
  testing::RedisServer server;
  // A timeout far below the pause, and far above a command on a loaded machine (20 ms could fail
  // the first, unpaused call).
  auto client = Open({server.url()}, false, 150ms);
  auto admin = Open({server.url()}, false);
  RedisStore store(client.get(), {.breaker = {.failures_to_open = 3, .open_for = 300ms}});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 1000, kHour);
  const Item item{.limit = &limit, .limit_id = 1, .key = "k", .cost = 1};
  ASSERT_TRUE(Decide(store, {item}).ok());
  ASSERT_EQ(Command(*admin, {"CLIENT", "PAUSE", "1000", "ALL"})->str, "OK");
  for (int i = 0; i < 3; ++i) {
    auto r = Decide(store, {item});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  }
  EXPECT_EQ(store.GetStats().breaker, Breaker::State::kOpen);
  // Open: refused at once, without waiting for a timeout.
  const auto start = std::chrono::steady_clock::now();
  auto refused = Decide(store, {item});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10ms);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("circuit breaker"));
  EXPECT_GE(store.GetStats().refused, 1u);
  // Once the pause is over, a probe gets through and the breaker closes.
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  absl::StatusOr<DecideResult> r = absl::UnavailableError("");
  while (std::chrono::steady_clock::now() < deadline && !(r = Decide(store, {item})).ok()) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(store.GetStats().breaker, Breaker::State::kClosed);
  EXPECT_EQ(store.GetStats().breaker_opened, 1u);
}

// `sluice serve` closes the client before the store (RedisBackend's member order): calls still in
// flight then fail through the store's callbacks, and so do the requests queued behind them,
// which the store sends as the first ones fail: each request is answered once, none is lost.
TEST(RedisStoreTest, ClosingTheClientAnswersTheCallsInFlight) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false, 5s);
  auto admin = Open({server.url()}, false);
  auto store = std::make_unique<RedisStore>(client.get(), RedisStore::Options{});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 1000, kHour);
  const Item item{.limit = &limit, .limit_id = 1, .key = "k", .cost = 1};
  ASSERT_TRUE(Decide(*store, {item}).ok());
  ASSERT_EQ(Command(*admin, {"CLIENT", "PAUSE", "1500", "ALL"})->str, "OK");
  std::atomic<int> answered{0}, failed{0};
  for (int i = 0; i < 300; ++i) {
    store->DecideAll(std::span(&item, 1), [&](absl::StatusOr<DecideResult> r) {
      failed += r.ok() ? 0 : 1;
      ++answered;
    });
  }
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(answered.load(), 0);  // all held by the pause
  client.reset();
  EXPECT_EQ(answered.load(), 300);
  EXPECT_EQ(failed.load(), 300);
  store.reset();
}

// Decides `keys` (limit id 1, cost 1) at once, without waiting between them; the results in order.
std::vector<absl::StatusOr<DecideResult>> DecideAtOnce(RedisStore& store, const Limit& limit,
                                                       const std::vector<std::string>& keys) {
  return testing::AllAtOnce<DecideResult>(keys.size(), [&](size_t i, RedisStore::Done done) {
    const Item item{.limit = &limit, .limit_id = 1, .key = keys[i], .cost = 1};
    store.DecideAll(std::span(&item, 1), std::move(done));
  });
}

// Sends `count` requests for `limit` on key `key` (limit id 1, cost 1) at once and waits for all
// their answers (at most 10 s); each answer's status and how long it took.
struct Answered {
  absl::Status status;
  std::chrono::steady_clock::duration took;
};
std::vector<Answered> DecideManyAtOnce(RedisStore& store, const Limit& limit,
                                       const std::string& key, int count) {
  struct Answers {
    explicit Answers(size_t n) : answers(n, {absl::InternalError("no answer"), {}}) {}
    bool All() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return static_cast<size_t>(answered) == answers.size();
    }
    absl::Mutex mu;
    std::vector<Answered> answers ABSL_GUARDED_BY(mu);
    int answered ABSL_GUARDED_BY(mu) = 0;
  } all(static_cast<size_t>(count));
  const Item item{.limit = &limit, .limit_id = 1, .key = key, .cost = 1};
  for (int i = 0; i < count; ++i) {
    const auto start = std::chrono::steady_clock::now();
    store.DecideAll(std::span(&item, 1), [&, i, start](absl::StatusOr<DecideResult> r) {
      absl::MutexLock lock(&all.mu);
      all.answers[static_cast<size_t>(i)] = {r.status(), std::chrono::steady_clock::now() - start};
      ++all.answered;
    });
  }
  absl::MutexLock lock(&all.mu);
  all.mu.AwaitWithTimeout(absl::Condition(&all, &Answers::All), absl::Seconds(10));
  return all.answers;
}

// What is left of `limit` on `key` (a cost-0 request), once every call sent before has run:
// each of the client's connections answers a PING first (replies come in order).
int64_t RemainingAfterQueuedCalls(Client& client, RedisStore& store, const Limit& limit,
                                  const std::string& key) {
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Command(client, {"PING"}).ok());
  auto r = Decide(store, {{.limit = &limit, .limit_id = 1, .key = key, .cost = 0}});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->decisions[0].remaining : -1;
}

// Issue 18 (5): while Redis hangs (SIGSTOP) every request times out and gets its failure policy's
// answer; the script calls then wait in Redis's socket and run when it resumes. Past their
// deadline (in Redis's time) they must change nothing: a decision nobody received consumes
// nothing.
TEST(RedisStoreTest, CallsThatTimedOutWhileRedisHungConsumeNothing) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false, 100ms);
  // Every request its own call, all sent at once, none refused by the breaker: 20 script calls
  // wait in the stopped server's socket.
  RedisStore store(client.get(),
                   {.breaker = {.failures_to_open = 1000}, .max_batch = 1, .max_in_flight = 64});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 40, kHour);
  ASSERT_TRUE(Decide(store, {{.limit = &limit, .limit_id = 1, .key = "hung", .cost = 1}}).ok());
  std::this_thread::sleep_for(100ms);  // the store's SCRIPT LOAD is done: EVALSHA from here on
  ASSERT_TRUE(server.Pause());
  const auto answers = DecideManyAtOnce(store, limit, "hung", 20);
  for (const Answered& a : answers) {
    EXPECT_EQ(a.status.code(), absl::StatusCode::kDeadlineExceeded) << a.status;
  }
  EXPECT_GE(store.GetStats().script_calls, 21u);
  server.Resume();
  EXPECT_EQ(RemainingAfterQueuedCalls(*client, store, limit, "hung"), 39);
}

// A call that Redis ran in time but whose reply came after the timeout (a relay holds the replies
// back) was answered DeadlineExceeded: what it admitted comes back when the reply arrives. (The
// soak found one: a request answered 503 that kept its quota.) One call per request, and batched.
TEST(RedisStoreTest, AReplyThatCameTooLateGivesBackWhatItsCallAdmitted) {
  testing::RedisServer server;
  testing::DelayRelay relay(server.port());
  // (250 ms: the first call sends the whole script, which a loaded machine may not finish in
  // 100 ms; the delayed replies below come well after it.)
  auto client = Open({relay.url()}, false, 250ms);
  auto direct = Open({server.url()}, false, 5s);
  RedisStore observer(direct.get(), {});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 40, kHour);
  for (size_t max_batch : {size_t{1}, size_t{128}}) {
    SCOPED_TRACE(max_batch);
    const std::string key = fmt::format("late{}", max_batch);
    RedisStore store(
        client.get(),
        {.breaker = {.failures_to_open = 1000}, .max_batch = max_batch, .max_in_flight = 64});
    ASSERT_TRUE(Decide(store, {{.limit = &limit, .limit_id = 1, .key = key, .cost = 1}}).ok());
    std::this_thread::sleep_for(100ms);  // the store's SCRIPT LOAD is done: EVALSHA from here on
    relay.set_reply_delay(800ms);
    const auto answers = DecideManyAtOnce(store, limit, key, 10);
    for (const Answered& a : answers) {
      EXPECT_EQ(a.status.code(), absl::StatusCode::kDeadlineExceeded) << a.status;
    }
    // They ran in time: Redis counts them now, with their replies still held.
    EXPECT_EQ(RemainingAfterQueuedCalls(*direct, observer, limit, key), 29);
    relay.set_reply_delay(0ms);
    const auto until = std::chrono::steady_clock::now() + 5s;
    int64_t remaining = -1;
    while (std::chrono::steady_clock::now() < until &&
           (remaining = RemainingAfterQueuedCalls(*direct, observer, limit, key)) != 39) {
      std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(remaining, 39);
    EXPECT_EQ(store.GetStats().late_refunds, 10u);
  }
}

// The same with Redis busy rather than stopped: DEBUG SLEEP blocks it with the calls already read.
TEST(RedisStoreTest, CallsThatTimedOutDuringDebugSleepConsumeNothing) {
  testing::RedisServer server({"--enable-debug-command", "yes"});
  auto client = Open({server.url()}, false, 100ms);
  auto admin = Open({server.url()}, false, 5s);
  RedisStore store(client.get(),
                   {.breaker = {.failures_to_open = 1000}, .max_batch = 1, .max_in_flight = 64});
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 40, kHour);
  ASSERT_TRUE(Decide(store, {{.limit = &limit, .limit_id = 1, .key = "slept", .cost = 1}}).ok());
  std::this_thread::sleep_for(100ms);
  auto sleeping = testing::BlockRedis(*admin, server.url(), 0.6);
  const auto answers = DecideManyAtOnce(store, limit, "slept", 20);
  for (const Answered& a : answers) {
    EXPECT_EQ(a.status.code(), absl::StatusCode::kDeadlineExceeded) << a.status;
  }
  auto slept = sleeping.get();
  ASSERT_TRUE(slept.ok()) << slept.status();
  EXPECT_EQ(slept->str, "OK");
  EXPECT_EQ(RemainingAfterQueuedCalls(*client, store, limit, "slept"), 39);
}

// Issue 18 (8): a decision waits at most one redis.timeout, whatever it waited for: here, for a
// script call slot (max_in_flight 1) taken by a call that times out.
TEST(RedisStoreTest, ADecisionWaitsAtMostOneTimeout) {
  testing::RedisServer server;
  constexpr auto kTimeout = 300ms;
  auto client = Open({server.url()}, false, kTimeout);
  RedisStore store(client.get(), {.breaker = {.failures_to_open = 1000}, .max_in_flight = 1});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 40, kHour);
  ASSERT_TRUE(Decide(store, {{.limit = &limit, .limit_id = 1, .key = "slow", .cost = 1}}).ok());
  ASSERT_TRUE(server.Pause());
  const auto answers = DecideManyAtOnce(store, limit, "slow", 10);
  server.Resume();
  for (const Answered& a : answers) {
    EXPECT_EQ(a.status.code(), absl::StatusCode::kDeadlineExceeded) << a.status;
    // One timeout, and slack for a loaded machine; two would be 600 ms.
    EXPECT_LT(a.took, kTimeout + 150ms)
        << std::chrono::duration_cast<std::chrono::milliseconds>(a.took).count() << " ms";
  }
  EXPECT_EQ(RemainingAfterQueuedCalls(*client, store, limit, "slow"), 39);
}

// Issue 18 (4): readiness follows what decisions get. While Redis hangs its connections stay up
// (the client is Ready) but calls time out: not up; once the breaker opens it says so; after
// Redis resumes, health comes back by its own probe, with no request sent.
TEST(RedisStoreTest, HealthFollowsDecisionsNotTheConnection) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false, 100ms);
  RedisStore store(client.get(), {.breaker = {.failures_to_open = 2, .open_for = 200ms}});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 40, kHour);
  const Item item{.limit = &limit, .limit_id = 1, .key = "health", .cost = 1};
  ASSERT_TRUE(Decide(store, {item}).ok());
  EXPECT_TRUE(store.GetHealth().up) << store.GetHealth().detail;
  ASSERT_TRUE(server.Pause());
  EXPECT_EQ(Decide(store, {item}).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(client->Ready());  // what readiness used to report
  RedisStore::Health health = store.GetHealth();
  EXPECT_FALSE(health.up);
  EXPECT_THAT(health.detail, ::testing::HasSubstr("a call failed"));
  EXPECT_EQ(Decide(store, {item}).status().code(), absl::StatusCode::kDeadlineExceeded);
  health = store.GetHealth();
  EXPECT_FALSE(health.up);
  EXPECT_THAT(health.detail, ::testing::HasSubstr("circuit breaker open"));
  // Still hung: the health probes time out too, and health stays down.
  const auto hung_until = std::chrono::steady_clock::now() + 600ms;
  while (std::chrono::steady_clock::now() < hung_until) {
    EXPECT_FALSE(store.GetHealth().up);
    std::this_thread::sleep_for(20ms);
  }
  server.Resume();
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < deadline && !(health = store.GetHealth()).up) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(health.up) << health.detail;
  EXPECT_EQ(store.GetStats().breaker, Breaker::State::kClosed);
}

// A failed call holds readiness down for RedisStore::kFailureHold, whatever succeeds after it:
// on a cluster with one master hung, calls to the other masters succeed in between the failing
// ones, and readiness must not flicker up between them. (The soak found an instance whose
// /readyz said 200 at every sample through a 4 s SIGSTOP of one of three masters.) The hold is
// in the client's clock, which the test jumps over it.
TEST(RedisStoreTest, HealthStaysDownWhileOneClusterMasterHangs) {
  testing::RedisCluster cluster(3);
  ASSERT_TRUE(cluster.created());
  testing::JumpClock clock;
  auto client = Open({cluster.url(0)}, true, 100ms, &clock);
  ASSERT_TRUE(client->Ready()) << client->last_error();
  RedisStore store(client.get(), {.breaker = {.failures_to_open = 1000}});
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1000000, kHour);
  // A key on the master to hang, and one on another master.
  const std::string hung_node = client->NodeFor(store.RedisKey(1, "h0"));
  std::string other_key;
  for (int i = 0; other_key.empty() && i < 1000; ++i) {
    const std::string key = fmt::format("o{}", i);
    if (client->NodeFor(store.RedisKey(1, key)) != hung_node) other_key = key;
  }
  ASSERT_FALSE(other_key.empty());
  testing::RedisServer* hung = nullptr;
  for (size_t i = 0; i < cluster.size(); ++i) {
    if (hung_node.ends_with(fmt::format(":{}", cluster.port(i)))) hung = &cluster.node(i);
  }
  ASSERT_NE(hung, nullptr) << hung_node;
  const Item on_hung{.limit = &limit, .limit_id = 1, .key = "h0", .cost = 1};
  const Item elsewhere{.limit = &limit, .limit_id = 1, .key = other_key, .cost = 1};
  ASSERT_TRUE(Decide(store, {on_hung}).ok());
  ASSERT_TRUE(Decide(store, {elsewhere}).ok());
  EXPECT_TRUE(store.GetHealth().up) << store.GetHealth().detail;

  ASSERT_TRUE(hung->Pause());
  int samples = 0, up = 0;
  const auto until = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < until) {
    EXPECT_EQ(Decide(store, {on_hung}).status().code(), absl::StatusCode::kDeadlineExceeded);
    for (int i = 0; i < 5; ++i) {  // the other masters keep deciding
      // (On a loaded machine one of these may time out too; that only holds health down.)
      if (!Decide(store, {elsewhere}).ok()) continue;
      const RedisStore::Health health = store.GetHealth();
      ++samples;
      if (health.up) ++up;
    }
  }
  hung->Resume();
  EXPECT_GT(samples, 10);
  EXPECT_EQ(up, 0) << up << " of " << samples << " looks said up while a master hung";
  EXPECT_THAT(store.GetHealth().detail, ::testing::HasSubstr("a call failed"));
  // Resumed, the master first works through the calls that timed out while it hung; on a loaded
  // machine that may take longer than one 100 ms timeout, so wait (bounded) for its first answer.
  absl::Status back = absl::DeadlineExceededError("not tried");
  const auto resumed_by = std::chrono::steady_clock::now() + 10s;
  while (!back.ok() && std::chrono::steady_clock::now() < resumed_by) {
    back = Decide(store, {on_hung}).status();
  }
  ASSERT_TRUE(back.ok()) << back;
  // Back within the hold once every call succeeds again (the clock jumps past the hold again
  // after a call that, on a loaded machine, still timed out).
  absl::Status last;
  for (int i = 0; i < 20; ++i) {
    clock.Advance(RedisStore::kFailureHold + 100ms);
    if ((last = Decide(store, {elsewhere}).status()).ok()) break;
  }
  ASSERT_TRUE(last.ok()) << last;
  EXPECT_TRUE(store.GetHealth().up) << store.GetHealth().detail;
}

// On a cluster, single-slot requests headed to one node share script calls (keys of several
// slots in one call); when the slot map changes under a batch (a slot moved to another node), its
// requests go again one by one, each decided exactly once.
TEST(RedisStoreTest, ClusterRequestsAreBatchedPerNodeAndSplitWhenASlotMoves) {
  testing::RedisCluster cluster(3);
  ASSERT_TRUE(cluster.created());
  auto client = Open({cluster.url(0)}, true, 5s);
  ASSERT_TRUE(client->Ready()) << client->last_error();
  RedisStore store(client.get(), {.max_in_flight = 1});
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 5, kHour);
  // 12 keys on one node, in 12 different slots; and a node elsewhere.
  const auto [keys, node, other] = testing::FindKeysOnOneNode(*client, store, 12);
  ASSERT_EQ(keys.size(), 12u);
  auto admin = Open({"redis://" + node}, false);
  auto other_admin = Open({"redis://" + other}, false);

  // While the node is paused, the first call waits and the 11 others queue: one call for them.
  ASSERT_EQ(Command(*admin, {"CLIENT", "PAUSE", "300", "ALL"})->str, "OK");
  const uint64_t calls_before = store.GetStats().script_calls;
  auto first = DecideAtOnce(store, limit, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(first[i].ok()) << keys[i] << ": " << first[i].status();
    EXPECT_EQ(first[i]->decisions[0].remaining, 4) << keys[i];
  }
  EXPECT_EQ(store.GetStats().script_calls - calls_before, 2u);

  // Move the (empty) slot of the last key to the other node behind the client's back.
  const std::string moved_key = store.RedisKey(1, keys.back());
  (void)Command(*admin, {"DEL", moved_key});
  ASSERT_NO_FATAL_FAILURE(testing::MoveSlot(cluster, moved_key, other));
  ASSERT_EQ(client->NodeFor(moved_key), node);  // the client does not know yet
  ASSERT_EQ(Command(*admin, {"CLIENT", "PAUSE", "300", "ALL"})->str, "OK");
  auto second = DecideAtOnce(store, limit, keys);
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    ASSERT_TRUE(second[i].ok()) << keys[i] << ": " << second[i].status();
    EXPECT_EQ(second[i]->decisions[0].remaining, 3) << keys[i];  // once each, not twice
  }
  ASSERT_TRUE(second.back().ok()) << second.back().status();
  EXPECT_EQ(second.back()->decisions[0].remaining, 4);  // a new state, on the other node
  EXPECT_EQ(Command(*other_admin, {"EXISTS", moved_key})->integer, 1);
  EXPECT_EQ(client->NodeFor(moved_key), other);
  EXPECT_GE(store.GetStats().batches_split, 1u);
}

TEST(RedisStoreTest, AcrossClusterSlotsNothingIsConsumedWhenOneSlotDenies) {
  testing::RedisCluster cluster(3);
  ASSERT_TRUE(cluster.created());
  auto client = Open({cluster.url(0)}, true);
  ASSERT_TRUE(client->Ready()) << client->last_error();
  RedisStore store(client.get(), {});
  const Limit per_user = MakeLimit(Algorithm::kTokenBucket, 3, kHour);
  const Limit global = MakeLimit(Algorithm::kFixedWindow, 2, kHour);
  const std::string user = KeyInAnotherSlot(store, "user");
  const Item u{.limit = &per_user, .limit_id = 1, .key = user, .cost = 1};
  const Item g{.limit = &global, .limit_id = 2, .key = "global", .cost = 1};
  for (int i = 0; i < 2; ++i) {
    auto r = Decide(store, {u, g});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->allowed);
  }
  auto denied = Decide(store, {u, g});
  ASSERT_TRUE(denied.ok());
  EXPECT_FALSE(denied->allowed);
  EXPECT_FALSE(denied->decisions[1].allowed);
  // The user's bucket was not touched by the denied request: 1 of 3 left.
  Item peek = u;
  peek.cost = 0;
  EXPECT_EQ(Decide(store, {peek})->decisions[0].remaining, 1);
}

// count_denied (envoyproxy/ratelimit's counting) across slots: a request denied in one slot still
// counts in the others, as it does within one slot (a dry run that denies records them).
TEST(RedisStoreTest, AcrossClusterSlotsCountDeniedItemsCountWhenOneSlotDenies) {
  testing::RedisCluster cluster(3);
  ASSERT_TRUE(cluster.created());
  auto client = Open({cluster.url(0)}, true);
  ASSERT_TRUE(client->Ready()) << client->last_error();
  RedisStore store(client.get(), {});
  const Limit per_user = MakeLimit(Algorithm::kFixedWindow, 10, kHour);
  const Limit global = MakeLimit(Algorithm::kFixedWindow, 2, kHour);
  const std::string user = KeyInAnotherSlot(store, "counted");
  const Item u{.limit = &per_user, .limit_id = 1, .key = user, .cost = 1, .count_denied = true};
  const Item g{.limit = &global, .limit_id = 2, .key = "global", .cost = 5, .count_denied = true};
  auto denied = Decide(store, {u, g});  // 5 > 2: denied in the global slot
  ASSERT_TRUE(denied.ok()) << denied.status();
  EXPECT_FALSE(denied->allowed);
  // Both recorded (in the background): the user's 1, the global's 5 past its limit.
  Item peek_u = u, peek_g = g;
  peek_u.cost = peek_g.cost = 0;
  int64_t user_left = -1;
  for (int i = 0; i < 100 && user_left != 9; ++i) {
    user_left = Decide(store, {peek_u})->decisions[0].remaining;
    if (user_left != 9) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(user_left, 9);
  EXPECT_EQ(Decide(store, {peek_g})->decisions[0].remaining, 0) << "the 5 recorded past 2";
}

// Many callers race for the last units of a global limit in another slot: some pass the
// evaluation and then lose the commit there, after their per-user slot consumed. Those slots give
// it back, so in the end the per-user state holds exactly the admitted requests.
TEST(RedisStoreTest, AcrossClusterSlotsALostRaceIsRefunded) {
  testing::RedisCluster cluster(3);
  ASSERT_TRUE(cluster.created());
  auto client = Open({cluster.url(0)}, true);
  ASSERT_TRUE(client->Ready()) << client->last_error();
  RedisStore store(client.get(), {});
  const Limit per_user = MakeLimit(Algorithm::kFixedWindow, 1000, kHour);
  const Limit global = MakeLimit(Algorithm::kFixedWindow, 20, kHour);
  const std::string user = KeyInAnotherSlot(store, "racer");
  const Item u{.limit = &per_user, .limit_id = 1, .key = user, .cost = 1};
  const Item g{.limit = &global, .limit_id = 2, .key = "global", .cost = 1};
  std::atomic<int> admitted{0};
  for (int round = 0; round < 5 && store.GetStats().cross_slot_refunds == 0; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 10; ++i) {
          auto r = Decide(store, {u, g});
          if (r.ok() && r->allowed) ++admitted;
        }
      });
    }
    for (auto& t : threads) t.join();
    // Next round: room again in the global window.
    ASSERT_TRUE(Command(*client, {"DEL", store.RedisKey(2, "global")}).ok());
  }
  ASSERT_GT(store.GetStats().cross_slot_refunds, 0u) << "no race was lost; nothing to check";
  // Refunds go in the background: wait for the per-user count to settle on the admitted number.
  Item peek = u;
  peek.cost = 0;
  int64_t remaining = -1;
  for (int i = 0; i < 100; ++i) {
    remaining = Decide(store, {peek})->decisions[0].remaining;
    if (remaining == 1000 - admitted.load()) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(remaining, 1000 - admitted.load());
}

}  // namespace
}  // namespace sluice::redis
