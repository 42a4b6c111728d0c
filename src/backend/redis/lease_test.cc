// Leases on real Redis (decide.lua's mode 4, RedisStore::Lease): what each algorithm grants and
// records, what a refund gives back, and, with leased units spent locally at random times while
// other callers decide exactly on the same state, that every admission together is one the exact
// algorithm admits (no over-admission). Leases asked for at once share script calls (mode 6),
// each granting what a call of its own (mode 4) would, on one server and on a cluster.

#include <deque>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "algo/algorithms.h"
#include "backend/redis/redis_store.h"
#include "gtest/gtest.h"
#include "tests/support/delay_relay.h"
#include "tests/support/limits.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_store/cluster_batch.h"
#include "tests/support/redis_store/redis_calls.h"
#include "tests/support/units.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using Item = backend::Item;
using Grant = backend::LeaseSource::Grant;
using testing::MakeLimit;
using testing::Remaining;
using testing::TakeLease;

using sluice::testing::kHour;
using sluice::testing::kMs;
using sluice::testing::kSecond;

// One lease to take: of `item`'s state, `want` units for at most `life_us`.
struct Ask {
  Item item;
  uint64_t want;
  int64_t life_us;
};

// Asks for every lease at once (without waiting for any answer) and waits for all (at most 20 s).
std::vector<absl::StatusOr<Grant>> LeaseAtOnce(RedisStore& store, const std::vector<Ask>& asks) {
  return testing::AllAtOnce<Grant>(asks.size(), [&](size_t i, RedisStore::GrantDone done) {
    store.Lease(asks[i].item, asks[i].want, asks[i].life_us, std::move(done));
  });
}

// The same leases one after the other, each a call of its own by decide.lua's mode 4 (EVAL of
// the script's text, its key declared), on the states `store` places them in.
std::vector<absl::StatusOr<Grant>> LeaseOneByOne(Client& client, const RedisStore& store,
                                                 const std::vector<Ask>& asks) {
  std::vector<absl::StatusOr<Grant>> grants;
  for (const Ask& ask : asks) {
    RedisStore::Place place = store.StatePlace(*ask.item.limit, ask.item.limit_id, ask.item.key);
    const DecideItem item{ask.item.limit, place.key, 0, false, false, place.field};
    std::promise<absl::StatusOr<Reply>> got;
    client.Send(item.key, EncodeLease("", item, ask.want, ask.life_us),
                [&](absl::StatusOr<Reply> r) { got.set_value(std::move(r)); });
    absl::StatusOr<Reply> reply = got.get_future().get();
    absl::StatusOr<LeaseReply> parsed =
        reply.ok() ? ParseLeaseReply(*reply, 1) : absl::StatusOr<LeaseReply>(reply.status());
    if (!parsed.ok()) {
      grants.push_back(parsed.status());
      continue;
    }
    const LeaseGrant& g = parsed->grants[0];
    grants.push_back(Grant{.granted = g.granted,
                           .now_us = parsed->now_us,
                           .ends_us = g.ends_us,
                           .left = g.left,
                           .fenced = g.fenced});
  }
  return grants;
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
    // Until the limit was reached often (150 admissions: 200/s for 0.75 s on a quiet machine),
    // within 10 s on a loaded one.
    const auto enough = [&] {
      absl::MutexLock lock(&mu);
      return admitted.size() >= 150;
    };
    const int64_t deadline = SystemClock::Get()->NowMicros() + 10 * kSecond;
    const auto go_on = [&] { return SystemClock::Get()->NowMicros() < deadline && !enough(); };
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {  // leasing: spend each unit at a random moment of the lease
        std::mt19937_64 random(t);
        while (go_on()) {
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
        while (go_on()) {
          auto result = testing::DecideNow(store_, {item});
          if (result.ok() && result->allowed) record(result->now_us);
          std::this_thread::sleep_for(1ms);
        }
      });
    }
    for (auto& thread : threads) thread.join();
    absl::MutexLock lock(&mu);
    std::sort(admitted.begin(), admitted.end());
    ASSERT_GE(admitted.size(), 150u);  // the limit was reached often
    algo::CompactState state{};
    for (size_t i = 0; i < admitted.size(); ++i) {
      const Decision d = algo::DecideCompact(state, admitted[i], limit, 1);
      ASSERT_TRUE(d.allowed) << "admission " << i << " of " << admitted.size() << " at +"
                             << admitted[i] - admitted[0] << " µs is over the limit";
    }
  }
}

// 200 leases of a few states of every algorithm (several of one state, wanting more than is
// left, or nothing leasable), asked for at once while Redis holds the first call back: they go
// in 3 script calls (the first, then batches of at most 128), not 200; and each grants exactly
// what the same sequence of calls of their own (mode 4) grants, on fresh states: a lease that
// gets nothing changes nothing for the others, and a later lease of a state sees what the
// earlier ones took. With states of their own and packed into hashes.
TEST_F(LeaseTest, LeasesAskedAtOnceShareCallsAndGrantWhatCallsOfTheirOwnWould) {
  const Limit limits[] = {MakeLimit(Algorithm::kFixedWindow, 25, kHour),
                          MakeLimit(Algorithm::kSlidingWindow, 25, kHour),
                          MakeLimit(Algorithm::kTokenBucket, 10, kHour),
                          MakeLimit(Algorithm::kFixedWindow, 5, kHour),
                          MakeLimit(Algorithm::kLeakyBucket, 10, kHour),
                          MakeLimit(Algorithm::kSlidingLog, 10, kHour)};
  // Every state's keys, for the batched run and for the reference run. An Item's key is a view:
  // the strings it views live in `keys` (a deque: they never move) for the whole test.
  std::deque<std::string> keys;
  const auto asks_on = [&](std::string_view prefix) {
    std::vector<Ask> asks;
    for (int i = 0; i < 200; ++i) {
      const size_t l = static_cast<size_t>(i) % std::size(limits);
      // A bucket's lease lives 10 s, so that the few ms between the two runs' calls cannot
      // change what the state has (a token per 6 minutes).
      const int64_t life =
          limits[l].algorithm == Algorithm::kTokenBucket ? 10 * kSecond : 100 * kMs;
      asks.push_back(
          {.item = {.limit = &limits[l],
                    .limit_id = l + 1,
                    .key = keys.emplace_back(std::string(prefix) + std::to_string(i % 9))},
           .want = static_cast<uint64_t>(1 + (i * 7) % 9),
           .life_us = life});
    }
    return asks;
  };
  for (uint32_t buckets : {0u, 16u}) {
    SCOPED_TRACE(buckets);
    RedisStore store(
        client_.get(),
        {.key_prefix = absl::StrCat("b", buckets, ":"), .max_in_flight = 1, .buckets = buckets});
    auto admin = testing::OpenRedis({server_.url()}, false);
    // The SHA known first (a batch sent by EVALSHA), then Redis held back for the first call.
    ASSERT_TRUE(
        TakeLease(store, {.limit = &limits[0], .limit_id = 99, .key = "warm"}, 1, kMs).ok());
    std::this_thread::sleep_for(200ms);  // (its SCRIPT LOAD, after the reply)
    const std::vector<Ask> batched_asks = asks_on("k"), alone_asks = asks_on("ref");
    const uint64_t calls_before = store.GetStats().script_calls;
    ASSERT_EQ(testing::RedisCommand(*admin, {"CLIENT", "PAUSE", "300", "WRITE"})->str, "OK");
    const auto batched = LeaseAtOnce(store, batched_asks);
    EXPECT_EQ(store.GetStats().script_calls - calls_before, 3u);
    EXPECT_EQ(store.GetStats().noscript_reloads, 0u);
    const auto alone = LeaseOneByOne(*client_, store, alone_asks);
    ASSERT_EQ(batched.size(), alone.size());
    uint64_t granted = 0, denied = 0;
    for (size_t i = 0; i < batched.size(); ++i) {
      ASSERT_TRUE(batched[i].ok()) << i << ": " << batched[i].status();
      ASSERT_TRUE(alone[i].ok()) << i << ": " << alone[i].status();
      if (batched[i]->now_us / kHour != alone[i]->now_us / kHour) {
        GTEST_SKIP() << "the two runs were in different hours' windows";
      }
      EXPECT_EQ(batched[i]->granted, alone[i]->granted) << "lease " << i;
      EXPECT_EQ(batched[i]->left, alone[i]->left) << "lease " << i;
      EXPECT_EQ(batched[i]->ends_us - batched[i]->now_us, alone[i]->ends_us - alone[i]->now_us)
          << "lease " << i;
      granted += batched[i]->granted;
      denied += batched[i]->granted == 0 ? 1 : 0;
    }
    // (The sequence has both: states run dry while others in the same calls still grant.)
    EXPECT_GT(granted, 50u);
    EXPECT_GT(denied, 50u);
  }
}

// Leases sent while Redis is busy (DEBUG SLEEP: the calls wait, already read, until it wakes) are
// answered DeadlineExceeded and take nothing: Redis runs them late, sees their deadline passed
// and changes nothing, as for a decision.
TEST(LeaseDeadlineTest, LeasesPastTheirDeadlineTakeNothing) {
  testing::RedisServer server({"--enable-debug-command", "yes"});
  auto client = testing::OpenRedis({server.url()}, false, 100ms);
  auto admin = testing::OpenRedis({server.url()}, false, 5s);
  RedisStore store(client.get(), {.breaker = {.failures_to_open = 1000}, .max_in_flight = 64});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100, kHour);
  const Item item{.limit = &limit, .limit_id = 30, .key = "slept"};
  // The first lease (which also loads the script), tried again if a loaded machine made it miss
  // its 100 ms: that is not what this test is about.
  absl::StatusOr<backend::LeaseSource::Grant> first = absl::DeadlineExceededError("not tried");
  for (int i = 0; i < 20 && !first.ok(); ++i) first = TakeLease(store, item, 1, 100 * kMs);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->granted, 1u);
  std::this_thread::sleep_for(100ms);  // the store's SCRIPT LOAD is done: EVALSHA from here on
  auto sleeping = testing::BlockRedis(*admin, server.url(), 0.6);
  const auto grants = LeaseAtOnce(store, std::vector<Ask>(20, {item, 5, 100 * kMs}));
  for (const auto& grant : grants) {
    EXPECT_EQ(grant.status().code(), absl::StatusCode::kDeadlineExceeded) << grant.status();
  }
  auto slept = sleeping.get();
  ASSERT_TRUE(slept.ok()) << slept.status();
  EXPECT_GE(store.GetStats().timeouts, 1u);
  RedisStore observer(admin.get(), {});
  EXPECT_EQ(Remaining(observer, item), 99);
  EXPECT_EQ(store.GetStats().late_refunds, 0u);  // nothing was taken, nothing given back
}

// Leases that Redis took in time but whose reply came after the timeout (a relay holds the
// replies back) were answered DeadlineExceeded: what the window leases took comes back when the
// reply arrives, as a late decision's does.
TEST(LeaseLateTest, AReplyThatCameTooLateGivesBackWhatItsLeasesTook) {
  testing::RedisServer server;
  testing::DelayRelay relay(server.port());
  auto client = testing::OpenRedis({relay.url()}, false, 100ms);
  auto direct = testing::OpenRedis({server.url()}, false, 5s);
  RedisStore observer(direct.get(), {});
  RedisStore store(client.get(), {.breaker = {.failures_to_open = 1000}, .max_in_flight = 1});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100, kHour);
  const Item item{.limit = &limit, .limit_id = 1, .key = "late"};
  ASSERT_EQ(TakeLease(store, item, 1, 100 * kMs)->granted, 1u);
  std::this_thread::sleep_for(100ms);  // the store's SCRIPT LOAD is done: EVALSHA from here on
  relay.set_reply_delay(400ms);
  const auto grants = LeaseAtOnce(store, std::vector<Ask>(10, {item, 5, 100 * kMs}));
  for (const auto& grant : grants) {
    EXPECT_EQ(grant.status().code(), absl::StatusCode::kDeadlineExceeded) << grant.status();
  }
  // The first call ran in time (the others waited for it and then were too late to be sent):
  // Redis counts its lease now, with its reply still held.
  EXPECT_EQ(Remaining(observer, item), 94);
  relay.set_reply_delay(0ms);
  const auto until = std::chrono::steady_clock::now() + 5s;
  int64_t remaining = -1;
  while (std::chrono::steady_clock::now() < until &&
         (remaining = Remaining(observer, item)) != 99) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(remaining, 99);
  EXPECT_EQ(store.GetStats().late_refunds, 1u);
}

// On a cluster, leases headed to one node share calls (keys of several slots in one call); when a
// slot moved under a batch, its leases go again one at a time, following MOVED, each taken once.
TEST(LeaseClusterTest, LeasesAreBatchedPerNodeAndSplitWhenASlotMoves) {
  testing::RedisCluster cluster(3);
  ASSERT_TRUE(cluster.created());
  auto client = testing::OpenRedis({cluster.url(0)}, true, 5s);
  ASSERT_TRUE(client->Ready()) << client->last_error();
  RedisStore store(client.get(), {.max_in_flight = 1});
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 10, kHour);
  // 12 keys on one node, in 12 different slots; and a node elsewhere.
  const auto [keys, node, other] = testing::FindKeysOnOneNode(*client, store, 12);
  ASSERT_EQ(keys.size(), 12u);
  auto admin = testing::OpenRedis({"redis://" + node}, false);
  auto other_admin = testing::OpenRedis({"redis://" + other}, false);
  std::vector<Ask> asks;
  for (const std::string& key : keys) {
    asks.push_back(
        {.item = {.limit = &limit, .limit_id = 1, .key = key}, .want = 3, .life_us = 100 * kMs});
  }
  // (The script's SHA known first, on that node.)
  ASSERT_TRUE(TakeLease(store, {.limit = &limit, .limit_id = 2, .key = "k0"}, 1, kMs).ok());
  std::this_thread::sleep_for(200ms);

  // While the node is paused, the first call waits and the 11 others queue: one call for them.
  ASSERT_EQ(testing::RedisCommand(*admin, {"CLIENT", "PAUSE", "300", "ALL"})->str, "OK");
  const uint64_t calls_before = store.GetStats().script_calls;
  auto first = LeaseAtOnce(store, asks);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(first[i].ok()) << keys[i] << ": " << first[i].status();
    EXPECT_EQ(first[i]->granted, 3u) << keys[i];
    EXPECT_EQ(first[i]->left, 7u) << keys[i];
  }
  EXPECT_EQ(store.GetStats().script_calls - calls_before, 2u);

  // Move the (empty) slot of the last key to the other node behind the client's back.
  const std::string moved_key = store.RedisKey(1, keys.back());
  (void)testing::RedisCommand(*admin, {"DEL", moved_key}, moved_key);
  ASSERT_NO_FATAL_FAILURE(testing::MoveSlot(cluster, moved_key, other));
  ASSERT_EQ(client->NodeFor(moved_key), node);  // the client does not know yet
  ASSERT_EQ(testing::RedisCommand(*admin, {"CLIENT", "PAUSE", "300", "ALL"})->str, "OK");
  const uint64_t split_before = store.GetStats().batches_split;
  auto second = LeaseAtOnce(store, asks);
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    ASSERT_TRUE(second[i].ok()) << keys[i] << ": " << second[i].status();
    EXPECT_EQ(second[i]->granted, 3u) << keys[i];
    EXPECT_EQ(second[i]->left, 4u) << keys[i];  // taken once each, not twice
  }
  ASSERT_TRUE(second.back().ok()) << second.back().status();
  EXPECT_EQ(second.back()->left, 7u);  // a new state, on the other node
  EXPECT_EQ(testing::RedisCommand(*other_admin, {"EXISTS", moved_key}, moved_key)->integer, 1);
  EXPECT_EQ(client->NodeFor(moved_key), other);
  EXPECT_GE(store.GetStats().batches_split - split_before, 1u);
}

}  // namespace
}  // namespace sluice::redis
