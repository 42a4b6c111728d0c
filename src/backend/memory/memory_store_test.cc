#include "backend/memory/memory_store.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "algo/algorithms.h"
#include "backend/memory/state_generations.h"
#include "backend/memory/store_testing.h"
#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"
#include "tests/support/units.h"

namespace sluice::store {
namespace {

using test::KeyName;
using test::ModelDecide;
using test::ModelState;

using sluice::testing::kMs;
using sluice::testing::kSecond;
// A realistic unix time, deliberately not aligned to any window.
constexpr int64_t kStoreT0 = 1700000000 * kSecond + 123457;

using testing::MakeLimit;
using testing::TokenBucket;

// A worked limit per algorithm, capacity 10 or more so that costs above 1 matter.
std::vector<Limit> OneLimitPerAlgorithm() {
  return {
      TokenBucket(10, kSecond, 20),
      MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 5),
      MakeLimit(Algorithm::kFixedWindow, 10, kSecond),
      MakeLimit(Algorithm::kSlidingLog, 10, kSecond),
      MakeLimit(Algorithm::kSlidingWindow, 10, kSecond),
  };
}

std::string LimitTestName(const ::testing::TestParamInfo<Limit>& info) {
  return std::string(AlgorithmName(info.param.algorithm));
}

uint64_t RandomCost(std::mt19937_64& rng, const Limit& limit) {
  const uint64_t dice = rng() % 100;
  if (dice < 10) return 0;  // a peek
  if (dice < 70) return 1;
  if (dice < 95) return 2 + rng() % 3;
  return limit.Capacity() + 1 + rng() % 3;  // never admissible
}

// ---------------------------------------------------------------------------------------------
// Per-algorithm behaviour through the store.

class StoreAlgorithmTest : public ::testing::TestWithParam<Limit> {};

TEST_P(StoreAlgorithmTest, DecisionsEqualThePureFunction) {
  const Limit limit = GetParam();
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);
  std::map<std::string, ModelState> model;
  std::mt19937_64 rng(31);
  KeyName name;
  int64_t now = kStoreT0;
  int allowed = 0, denied = 0;
  for (int step = 0; step < 30000; ++step) {
    const uint64_t gap = rng() % 100;
    if (gap < 40) {
      // same instant
    } else if (gap < 98) {
      now += static_cast<int64_t>(rng() % (150 * kMs));
    } else {
      now += static_cast<int64_t>(rng() % (20 * kSecond));  // long idle: states become initial
    }
    const std::string_view key = name("user-", rng() % 25);
    const uint64_t cost = RandomCost(rng, limit);
    const Decision expected = ModelDecide(model[std::string(key)], now, limit, cost);
    Decision got;
    if (step % 2 == 0) {
      got = store.DecideAt(limit, id, key, cost, now);
    } else {
      clock.Set(now);  // the same through the injected clock
      got = store.Decide(limit, id, key, cost);
    }
    ASSERT_EQ(got, expected) << "step " << step << " key " << key << " cost " << cost << " at "
                             << now;
    (got.allowed ? allowed : denied)++;
  }
  // The trace exercised both outcomes.
  EXPECT_GT(allowed, 1000);
  EXPECT_GT(denied, 1000);
}

// A request of one item takes DecideAll's own path for one state (DecideSingle: a stored
// state, a new key's, a sliding log), whichever way it is asked: with the store hashing the key,
// with the hash a front made (StateHash: the same state), or as DecideOneHashed. Each decides as
// the pure function does, on the same state.
TEST_P(StoreAlgorithmTest, OneItemDecideAllEqualsThePureFunction) {
  const Limit limit = GetParam();
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);
  std::map<std::string, ModelState> model;
  std::mt19937_64 rng(41);
  KeyName name;
  int64_t now = kStoreT0;
  int allowed = 0, denied = 0;
  for (int step = 0; step < 30000; ++step) {
    const uint64_t gap = rng() % 100;
    if (gap >= 40 && gap < 98) {
      now += static_cast<int64_t>(rng() % (150 * kMs));
    } else if (gap >= 98) {
      now += static_cast<int64_t>(rng() % (20 * kSecond));  // states become initial: reclaimed
    }
    const std::string_view key = name("user-", rng() % 25);
    const MemoryStore::Item item{
        .limit = &limit, .limit_id = id, .key = key, .cost = RandomCost(rng, limit)};
    const Decision expected = ModelDecide(model[std::string(key)], now, limit, item.cost);
    Decision got;
    bool admitted = false;
    const uint64_t hash = StateHash(item);
    switch (step % 3) {
      case 0:
        admitted = store.DecideAll(std::span(&item, 1), now, std::span(&got, 1));
        break;
      case 1:
        admitted =
            store.DecideAll(std::span(&item, 1), std::span(&hash, 1), now, std::span(&got, 1));
        break;
      default:
        admitted = store.DecideOneHashed(item, hash, now, got);
        break;
    }
    ASSERT_EQ(got, expected) << "step " << step << " key " << key << " cost " << item.cost << " at "
                             << now;
    ASSERT_EQ(admitted, got.allowed) << "step " << step;
    (got.allowed ? allowed : denied)++;
  }
  EXPECT_GT(allowed, 1000);
  EXPECT_GT(denied, 1000);
}

TEST_P(StoreAlgorithmTest, TimeThatRunsBackwardsCountsAsTheLatestTime) {
  const Limit limit = GetParam();
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  // One shard: the latest time is kept per shard (every key here shares it).
  MemoryStore store({.shards = 1}, &clock);
  std::map<std::string, ModelState> model;
  std::mt19937_64 rng(37);
  KeyName name;
  int64_t now = kStoreT0, latest = kStoreT0;
  for (int step = 0; step < 20000; ++step) {
    // A random walk that steps back a third of the time.
    const int64_t jump = static_cast<int64_t>(rng() % (300 * kMs));
    now = rng() % 3 == 0 ? std::max<int64_t>(0, now - jump) : now + jump / 2;
    latest = std::max(latest, now);
    const std::string_view key = name("k", rng() % 10);
    const uint64_t cost = RandomCost(rng, limit);
    const Decision expected = ModelDecide(model[std::string(key)], latest, limit, cost);
    const Decision got = store.DecideAt(limit, id, key, cost, now);
    ASSERT_EQ(got, expected) << "step " << step << " asked at " << now << ", latest " << latest;
  }
}

TEST_P(StoreAlgorithmTest, KeysAndLimitIdsHaveIndependentState) {
  const Limit limit = GetParam();
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);
  const uint64_t capacity = limit.Capacity();
  // Exhaust ("alice", limit 1).
  for (uint64_t i = 0; i < capacity; ++i) ASSERT_TRUE(store.Decide(limit, 1, "alice", 1).allowed);
  const Decision exhausted = store.Decide(limit, 1, "alice", 1);
  EXPECT_FALSE(exhausted.allowed);
  EXPECT_GT(exhausted.retry_after_us, 0);

  ModelState fresh;
  const Decision first = ModelDecide(fresh, kStoreT0, limit, 1);
  ASSERT_TRUE(first.allowed);
  EXPECT_EQ(store.Decide(limit, 1, "bob", 1), first) << "another key";
  EXPECT_EQ(store.Decide(limit, 2, "alice", 1), first) << "the same key under another limit id";
  EXPECT_EQ(store.Decide(limit, 1, "alice2", 1), first);
  EXPECT_EQ(store.Decide(limit, 1, "alic", 1), first);
  EXPECT_EQ(store.Decide(limit, 1, "", 1), first) << "the empty key is a key like any other";
  EXPECT_FALSE(store.Decide(limit, 1, "alice", 1).allowed) << "alice is still exhausted";

  // Resetting one (limit, key) leaves the same key under the other limit alone.
  EXPECT_TRUE(store.Reset(2, "alice"));
  EXPECT_FALSE(store.Decide(limit, 1, "alice", 1).allowed);
}

TEST_P(StoreAlgorithmTest, ResetForgetsOneKey) {
  const Limit limit = GetParam();
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);
  EXPECT_FALSE(store.Reset(id, "alice")) << "nothing to forget yet";
  for (uint64_t i = 0; i < limit.Capacity(); ++i) store.Decide(limit, id, "alice", 1);
  store.Decide(limit, id, "bob", 1);
  ASSERT_FALSE(store.Decide(limit, id, "alice", 1).allowed);
  ASSERT_EQ(store.GetStats().entries, 2u);

  EXPECT_TRUE(store.Reset(id, "alice"));
  EXPECT_EQ(store.GetStats().entries, 1u);
  ModelState fresh;
  EXPECT_EQ(store.Decide(limit, id, "alice", 1), ModelDecide(fresh, kStoreT0, limit, 1))
      << "alice starts over as a new key";
  EXPECT_FALSE(store.Reset(id + 1, "alice")) << "wrong limit id";
  EXPECT_FALSE(store.Reset(id, "carol"));
  // bob kept his state: one request used.
  ModelState bob;
  ModelDecide(bob, kStoreT0, limit, 1);
  EXPECT_EQ(store.Decide(limit, id, "bob", 0), ModelDecide(bob, kStoreT0, limit, 0));
}

// Refund gives back what DecideAll took, stamped with the time DecideAll reports using (here
// later than the one proposed: another key of its shard moved the shard's clock on).
TEST_P(StoreAlgorithmTest, RefundGivesBackWhatDecideAllTook) {
  const Limit limit = GetParam();
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({.shards = 1}, &clock);
  store.DecideAt(limit, id, "other", 1, kStoreT0 + 5 * kMs);
  const MemoryStore::Item items[] = {{.limit = &limit, .limit_id = id, .key = "k", .cost = 2}};
  Decision out[1];
  int64_t decided_at = 0;
  ASSERT_TRUE(store.DecideAll(items, kStoreT0, out, &decided_at));
  EXPECT_EQ(decided_at, kStoreT0 + 5 * kMs);
  // Someone else's 1, at the same instant (for the buckets, a later one would find part of the
  // refunded request's debt already drained: see docs/algorithms.md, Refunds).
  ASSERT_TRUE(store.DecideAt(limit, id, "k", 1, kStoreT0 + 5 * kMs).allowed);
  store.Refund(items, decided_at, kStoreT0 + 7 * kMs);
  ModelState expected;  // as if only that request had been admitted
  ModelDecide(expected, kStoreT0 + 5 * kMs, limit, 1);
  EXPECT_EQ(store.DecideAt(limit, id, "k", 0, kStoreT0 + 7 * kMs),
            ModelDecide(expected, kStoreT0 + 7 * kMs, limit, 0));
  // Refunding again (or a key never seen) gives nothing more than a fresh key has.
  store.Refund(items, decided_at, kStoreT0 + 8 * kMs);
  store.Refund(items, decided_at, kStoreT0 + 8 * kMs);
  const MemoryStore::Item unknown[] = {
      {.limit = &limit, .limit_id = id, .key = "nobody", .cost = 1}};
  store.Refund(unknown, decided_at, kStoreT0 + 8 * kMs);
  EXPECT_EQ(store.GetStats().entries, 2u);
  ModelState fresh;
  EXPECT_EQ(store.DecideAt(limit, id, "nobody", 0, kStoreT0 + 8 * kMs),
            ModelDecide(fresh, kStoreT0 + 8 * kMs, limit, 0));
  EXPECT_LE(store.DecideAt(limit, id, "k", 0, kStoreT0 + 8 * kMs).remaining,
            ModelDecide(fresh, kStoreT0 + 8 * kMs, limit, 0).remaining);
}

TEST_P(StoreAlgorithmTest, PeeksAndDeniedNewKeysTakeNoRoom) {
  const Limit limit = GetParam();
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);
  KeyName name;
  for (uint64_t i = 0; i < 1000; ++i) {
    const Decision peek = store.Decide(limit, id, name("p", i), 0);
    EXPECT_TRUE(peek.allowed);
    EXPECT_EQ(peek.remaining, static_cast<int64_t>(limit.Capacity()));
    const Decision never = store.Decide(limit, id, name("n", i), limit.Capacity() + 1);
    EXPECT_FALSE(never.allowed);
    EXPECT_EQ(never.retry_after_us, Decision::kNever);
  }
  EXPECT_EQ(store.GetStats().entries, 0u);
  // A peek at a known key does not consume.
  ASSERT_TRUE(store.Decide(limit, id, "k", 1).allowed);
  const Decision a = store.Decide(limit, id, "k", 0);
  const Decision b = store.Decide(limit, id, "k", 0);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.remaining, static_cast<int64_t>(limit.Capacity()) - 1);
}

// 8 threads hammer one hot key and 500 cold keys at an instant that does not move: every key
// admits exactly its capacity, never one more, and the hot key's admissions were serialised
// (each saw a different `remaining`).
TEST_P(StoreAlgorithmTest, ConcurrentDecisionsAdmitExactlyTheCapacity) {
  Limit limit = GetParam();
  limit.requests = 50;
  if (limit.algorithm == Algorithm::kTokenBucket) limit.burst.reset();  // C = 50
  if (limit.algorithm == Algorithm::kLeakyBucket) limit.burst = 49;     // C = B + 1 = 50
  ASSERT_EQ(limit.Capacity(), 50u);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);

  constexpr int kThreads = 8, kRounds = 10, kColdKeys = 500;
  std::vector<std::atomic<int>> cold_allowed(kColdKeys);
  std::vector<std::vector<int64_t>> hot_remaining(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      KeyName name;
      start.arrive_and_wait();
      for (int r = 0; r < kRounds; ++r) {
        for (int i = 0; i < kColdKeys; ++i) {
          const int k = (i + t * 61) % kColdKeys;  // threads walk the keys from different places
          if (store.Decide(limit, id, name("cold-", k), 1).allowed) cold_allowed[k]++;
          const Decision hot = store.Decide(limit, id, "hot", 1);
          if (hot.allowed) hot_remaining[t].push_back(hot.remaining);
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  for (int k = 0; k < kColdKeys; ++k) ASSERT_EQ(cold_allowed[k].load(), 50) << "cold key " << k;
  std::vector<int64_t> all;
  for (const auto& v : hot_remaining) all.insert(all.end(), v.begin(), v.end());
  ASSERT_EQ(all.size(), 50u) << "hot key";
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
  EXPECT_EQ(store.GetStats().entries, static_cast<size_t>(kColdKeys) + 1);
}

// The same with time moving under the threads' feet (each decision advances the clock): the
// number admitted never exceeds what the rate allows over the elapsed time.
TEST_P(StoreAlgorithmTest, ConcurrentDecisionsWithAMovingClockStayWithinTheRate) {
  Limit limit = GetParam();
  limit.requests = 50;
  limit.window_us = 100 * kMs;
  if (limit.algorithm == Algorithm::kTokenBucket) limit.burst.reset();
  if (limit.algorithm == Algorithm::kLeakyBucket) limit.burst = 49;
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);

  constexpr int kThreads = 8, kDecisions = 20000;
  std::atomic<int64_t> allowed{0};
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  const int64_t begin = clock.NowMicros();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < kDecisions; ++i) {
        clock.Advance(7);
        if (store.Decide(limit, id, "hot", 1).allowed) allowed++;
      }
    });
  }
  for (auto& th : threads) th.join();
  const int64_t end = clock.NowMicros();
  ASSERT_EQ(end - begin, int64_t{7} * kThreads * kDecisions);

  const int64_t n = static_cast<int64_t>(limit.requests), w = limit.window_us;
  int64_t bound = 0;
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      // A full bucket plus what refills (drains) over the elapsed time.
      bound = static_cast<int64_t>(limit.Capacity()) + n * (end - begin) / w;
      break;
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
      // At most N counted in each epoch-aligned window touched.
      bound = n * (end / w - begin / w + 1);
      break;
    case Algorithm::kSlidingLog:
      // At most N in any W: the span splits into ceil((span + 1) / W) windows.
      bound = n * ((end - begin + 1 + w - 1) / w);
      break;
  }
  EXPECT_LE(allowed.load(), bound);
  EXPECT_GE(allowed.load(), bound / 2) << "the rate is actually granted";
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, StoreAlgorithmTest,
                         ::testing::ValuesIn(OneLimitPerAlgorithm()), LimitTestName);

// ---------------------------------------------------------------------------------------------
// Time.

// The time a decision uses (DecideAll's decided_at_us) never goes back for a shard's states and
// stays in range; it is kept per shard (no write that every thread shares), so a shard that
// has not seen a later time is not held to another's.
TEST(MemoryStoreTest, DecisionTimeNeverGoesBackAndStaysInRange) {
  ManualClock clock(0);
  MemoryStore store({.max_entries = 1024, .shards = 2}, &clock);
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 1000, 60 * kSecond);
  const std::string a = "a";
  const auto time_of = [&](const std::string& key, int64_t now_us) {
    const MemoryStore::Item item{.limit = &limit, .limit_id = 1, .key = key, .cost = 1};
    Decision d;
    int64_t at = -1;
    store.DecideAll(std::span(&item, 1), now_us, std::span(&d, 1), &at);
    return at;
  };
  EXPECT_EQ(time_of(a, -5), 0);
  EXPECT_EQ(time_of(a, 100), 100);
  EXPECT_EQ(time_of(a, 50), 100);
  EXPECT_EQ(time_of(a, 101), 101);
  // A key in the other shard, which has not used a later time: found by that.
  std::string b;
  for (int i = 0; b.empty() && i < 100; ++i) {
    std::string key(1, 'b');
    key += std::to_string(i);
    if (time_of(key, 60) == 60) b = key;
  }
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(time_of(b, 59), 60);
  EXPECT_EQ(time_of(a, std::numeric_limits<int64_t>::max()), kMaxTimeUs);
  EXPECT_EQ(time_of(a, 5), kMaxTimeUs);
  EXPECT_EQ(time_of(b, 70), 70);
}

TEST(MemoryStoreTest, GoingBackInTimeMintsNoTokens) {
  // 1 token per second, bucket of 1.
  const Limit limit = TokenBucket(1, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(100 * kSecond);
  MemoryStore store({}, &clock);
  ASSERT_TRUE(store.Decide(limit, id, "k", 1).allowed);
  clock.Set(101 * kSecond);
  ASSERT_TRUE(store.Decide(limit, id, "k", 1).allowed);  // one refilled
  // Stepping back: still the state of t = 101 s, the next token 1 s away (not 51 s or 0).
  clock.Set(50 * kSecond);
  Decision d = store.Decide(limit, id, "k", 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, kSecond);
  d = store.DecideAt(limit, id, "k", 1, 100 * kSecond + 500 * kMs);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_us, kSecond);
  // Back to the present and a bit: still nothing until t = 102 s.
  EXPECT_FALSE(store.DecideAt(limit, id, "k", 1, 101 * kSecond + 999999).allowed);
  EXPECT_TRUE(store.DecideAt(limit, id, "k", 1, 102 * kSecond).allowed);
  // Over the whole dance, 3 admitted in [100 s, 102 s]: C + N * 2 s / W.
}

TEST(MemoryStoreTest, AShardUsesOneClockForAllItsKeys) {
  // A new key decided at an earlier time than another key of its shard already used gets the
  // latest time: here the fixed window [10 s, 11 s), not [9 s, 10 s).
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 3, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(0);
  MemoryStore store({.shards = 1}, &clock);
  EXPECT_EQ(store.DecideAt(limit, id, "a", 1, 10 * kSecond).reset_after_us, kSecond);
  const Decision b = store.DecideAt(limit, id, "b", 1, 9 * kSecond + 500 * kMs);
  EXPECT_TRUE(b.allowed);
  EXPECT_EQ(b.reset_after_us, kSecond);
}

// ---------------------------------------------------------------------------------------------
// Bounded memory: idle reclaim, and a full store (see also memory_store_full_test.cc).

TEST(MemoryStoreTest, IdleKeysAreReclaimedAsNewKeysArrive) {
  // Each key makes one request: its bucket is full again 100 ms later.
  const Limit limit = TokenBucket(10, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);
  KeyName name;
  constexpr uint64_t kPerRound = 10000;
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    for (uint64_t i = 0; i < kPerRound; ++i) {
      ASSERT_TRUE(store.Decide(limit, id, name("r", round * kPerRound + i), 1).allowed);
    }
    const MemoryStore::Stats stats = store.GetStats();
    SCOPED_TRACE(round);
    EXPECT_EQ(stats.no_room_allowed + stats.no_room_denied, 0u);
    EXPECT_EQ(stats.entries + stats.reclaimed, (round + 1) * kPerRound) << "every state accounted";
    // Only this round's keys are busy; older ones go as new keys come, so what the store holds
    // follows the keys of about one round, not all the keys it has seen.
    EXPECT_LE(stats.entries, kPerRound * 3 / 2);
    EXPECT_LE(stats.memory_bytes, 32 * kPerRound * 3 / 2);
    if (round >= 2) {
      EXPECT_GE(stats.reclaimed, (round - 1) * kPerRound);
    }
    clock.Advance(kSecond);
  }
}

TEST(MemoryStoreTest, IdleSlidingLogsAreReclaimedAsNewKeysArrive) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 5, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);
  KeyName name;
  constexpr uint64_t kPerRound = 5000;
  for (int round = 0; round < 6; ++round) {
    for (uint64_t i = 0; i < kPerRound; ++i) {
      ASSERT_TRUE(store.Decide(limit, id, name("r", round * kPerRound + i), 1).allowed);
    }
    const MemoryStore::Stats stats = store.GetStats();
    SCOPED_TRACE(round);
    EXPECT_EQ(stats.no_room_allowed + stats.no_room_denied, 0u);
    EXPECT_EQ(stats.entries + stats.reclaimed, (round + 1) * kPerRound);
    EXPECT_LE(stats.entries, 3 * kPerRound);
    clock.Advance(2 * kSecond);
  }
  EXPECT_GE(store.GetStats().reclaimed, 3 * kPerRound);
}

TEST(MemoryStoreTest, IdleKeysAreReclaimedBeforeTheStoreIsFull) {
  const Limit limit = TokenBucket(10, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({.max_entries = 4096, .shards = 4}, &clock);
  KeyName name;
  // Twice the bound in all, but the first half is idle by the time the second half comes.
  for (uint64_t i = 0; i < 3000; ++i) store.Decide(limit, id, name("old", i), 1);
  clock.Advance(kSecond);
  for (uint64_t i = 0; i < 3000; ++i) store.Decide(limit, id, name("new", i), 1);
  clock.Advance(kSecond);
  for (uint64_t i = 0; i < 3000; ++i) store.Decide(limit, id, name("newer", i), 1);
  const MemoryStore::Stats stats = store.GetStats();
  EXPECT_EQ(stats.no_room_allowed + stats.no_room_denied, 0u);
  EXPECT_LE(stats.entries, 4096u);
  EXPECT_GE(stats.reclaimed, 3000u);
  EXPECT_EQ(stats.entries + stats.reclaimed, 9000u);
}

TEST(MemoryStoreTest, FullStoreStaysWithinMaxEntriesAndKeepsEveryTrackedState) {
  // Busy keys (the clock does not move), a hundred times the bound.
  const Limit limit = TokenBucket(5, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({.max_entries = 1024, .shards = 4}, &clock);
  KeyName name;
  constexpr uint64_t kKeys = 100000;
  uint64_t allowed = 0;
  for (uint64_t i = 0; i < kKeys; ++i) {
    allowed += store.Decide(limit, id, name("flood-", i), 1).allowed ? 1 : 0;
    if (i % 1000 == 999) {
      ASSERT_LE(store.GetStats().entries, 1024u) << "after " << i + 1;
    }
  }
  const MemoryStore::Stats stats = store.GetStats();
  EXPECT_EQ(stats.entries, 1024u);
  EXPECT_EQ(stats.reclaimed, 0u) << "nothing was idle";
  EXPECT_EQ(stats.no_room_allowed + stats.no_room_denied, kKeys - 1024);
  EXPECT_EQ(stats.no_room_allowed, 4u * 5) << "the keys without room share 5 per shard";
  EXPECT_EQ(allowed, 1024u + 4 * 5);
  EXPECT_LE(stats.memory_bytes, 32u * 1024);

  // Every key that got a slot still remembers its request; none was dropped for room.
  uint64_t remembered = 0;
  for (uint64_t i = 0; i < kKeys; ++i) {
    const int64_t remaining = store.Decide(limit, id, name("flood-", i), 0).remaining;
    remembered += remaining == 4 ? 1 : 0;
  }
  EXPECT_EQ(remembered, 1024u);
}

TEST(MemoryStoreTest, FullStoreKeepsEverySlidingLog) {
  const Limit limit = MakeLimit(Algorithm::kSlidingLog, 5, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({.max_entries = 256, .shards = 2}, &clock);
  KeyName name;
  for (uint64_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(store.Decide(limit, id, name("log-", i), 1).allowed);
  }
  for (uint64_t i = 0; i < 5000; ++i) store.Decide(limit, id, name("more-", i), 1);
  const MemoryStore::Stats stats = store.GetStats();
  EXPECT_EQ(stats.entries, 256u);
  EXPECT_EQ(stats.no_room_allowed + stats.no_room_denied, 5000u - 156u);
  for (uint64_t i = 0; i < 100; ++i) {
    ASSERT_EQ(store.Decide(limit, id, name("log-", i), 0).remaining, 4) << "log-" << i;
  }
}

TEST(MemoryStoreTest, LongLivedStatesSurviveAFloodOfShortOnes) {
  // Eight keys whose state lasts an hour among a flood whose state lasts a second: nothing live
  // is ever taken, not even the entries that become idle last.
  const Limit hourly = TokenBucket(1, 3600 * kSecond);
  const Limit flood = TokenBucket(1, kSecond);
  ManualClock clock(kStoreT0);
  MemoryStore store({.max_entries = 256, .shards = 1}, &clock);
  KeyName name;
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(store.Decide(hourly, LimitId(hourly), name("vip-", i), 1).allowed);
  }
  for (uint64_t i = 0; i < 20000; ++i) store.Decide(flood, LimitId(flood), name("f", i), 1);
  const MemoryStore::Stats stats = store.GetStats();
  EXPECT_GT(stats.no_room_allowed + stats.no_room_denied, 19000u);
  for (uint64_t i = 0; i < 8; ++i) {
    EXPECT_FALSE(store.Decide(hourly, LimitId(hourly), name("vip-", i), 1).allowed)
        << "vip-" << i << " lost its state and started over";
  }
}

// The bound is for the whole store, whatever the shard count: 100000 is not a multiple of the
// default 64 shards, and shards that each rounded their share up would hold 100032.
TEST(MemoryStoreTest, FloodOfAMillionUniqueKeysStaysWithinMaxEntries) {
  const Limit limit = TokenBucket(10, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({.max_entries = 100000}, &clock);
  KeyName name;
  constexpr uint64_t kKeys = 1000000;
  for (uint64_t i = 0; i < kKeys; ++i) store.Decide(limit, id, name("u", i), 1);
  const MemoryStore::Stats stats = store.GetStats();
  EXPECT_LE(stats.entries, 100000u);
  EXPECT_GE(stats.entries, 90000u);
  EXPECT_EQ(stats.no_room_allowed + stats.no_room_denied + stats.entries, kKeys);
  EXPECT_LE(stats.memory_bytes, 32u * 100000) << "bounded by max_entries, not by the flood";
}

// Same bound when max_entries is smaller than the number of shards (not one entry per shard).
TEST(MemoryStoreTest, MaxEntriesBelowTheShardCountIsStillTheBound) {
  const Limit limit = TokenBucket(10, kSecond);
  ManualClock clock(kStoreT0);
  MemoryStore store({.max_entries = 10, .shards = 64}, &clock);
  KeyName name;
  for (uint64_t i = 0; i < 10000; ++i) store.Decide(limit, LimitId(limit), name("u", i), 1);
  EXPECT_LE(store.GetStats().entries, 10u);
}

TEST(MemoryStoreTest, AMillionTokenBucketKeysTakeAtMost32BytesEach) {
  const Limit limit = TokenBucket(10, kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kStoreT0);
  MemoryStore store({}, &clock);
  KeyName name;
  constexpr uint64_t kKeys = 1000000;
  for (uint64_t i = 0; i < kKeys; ++i) store.Decide(limit, id, name("user:", i), 1);
  const MemoryStore::Stats stats = store.GetStats();
  EXPECT_EQ(stats.entries, kKeys) << "all busy, all held (hash collisions aside)";
  EXPECT_EQ(stats.no_room_allowed + stats.no_room_denied, 0u);
  EXPECT_LE(static_cast<double>(stats.memory_bytes) / static_cast<double>(stats.entries), 32.0);
}

}  // namespace
}  // namespace sluice::store

namespace sluice::store {
namespace {

// count_denied keeps what an item consumed when the request is denied, on every algorithm; a
// denied count_denied item's cost is recorded as an overdraft (algo::DecideCompactCountingDenied,
// algo::DecideSlidingLogCountingDenied), which a look then sees as a denial.
TEST(MemoryStoreDecideAllTest, CountDeniedKeepsAndRecordsOnEveryAlgorithm) {
  const Algorithm all[] = {Algorithm::kTokenBucket, Algorithm::kLeakyBucket,
                           Algorithm::kFixedWindow, Algorithm::kSlidingLog,
                           Algorithm::kSlidingWindow};
  for (const Algorithm a : all) {
    SCOPED_TRACE(AlgorithmName(a));
    ManualClock clock(1000000);
    MemoryStore store({}, &clock);
    const Limit limit = sluice::testing::WithCapacity(a, 5, 1000000, 5);
    const Limit tight{.algorithm = Algorithm::kFixedWindow,
                      .requests = 0,
                      .window_us = 1000000,
                      .burst = std::nullopt};
    const MemoryStore::Item items[] = {
        {.limit = &limit, .limit_id = 1, .key = "k", .cost = 1, .count_denied = true},
        {.limit = &limit, .limit_id = 1, .key = "plain", .cost = 1, .count_denied = false},
        {.limit = &tight, .limit_id = 3, .key = "k", .cost = 1, .count_denied = false},
    };
    Decision out[3];
    EXPECT_FALSE(store.DecideAll(items, clock.NowMicros(), out));
    EXPECT_EQ(out[0].remaining, 4);  // kept although the request was denied
    EXPECT_EQ(out[1].remaining, 5);  // undone
    EXPECT_EQ(store.Decide(limit, 1, "k", 0).remaining, 4);
    EXPECT_EQ(store.Decide(limit, 1, "plain", 0).remaining, 5);
    // 4 left; a count_denied cost of 9 does not fit: denied, and recorded (10 in all).
    const MemoryStore::Item big[] = {
        {.limit = &limit, .limit_id = 1, .key = "k", .cost = 9, .count_denied = true}};
    EXPECT_FALSE(store.DecideAll(big, clock.NowMicros(), out));
    EXPECT_FALSE(out[0].allowed);
    EXPECT_EQ(out[0].remaining, 0);
    const Decision look = store.Decide(limit, 1, "k", 0);
    EXPECT_FALSE(look.allowed) << "a look during the overdraft";
    // Still over half a window later (10 recorded against 5 per window), free once the 5 past
    // the limit are repaid: 2 windows after (the sliding window's estimate weighs the window
    // they were carried into for one more).
    clock.Advance(500000);
    EXPECT_FALSE(store.Decide(limit, 1, "k", 0).allowed);
    clock.Advance(a == Algorithm::kSlidingWindow ? 2500000 : 1500000);
    EXPECT_TRUE(store.Decide(limit, 1, "k", 1).allowed);
  }
}

}  // namespace
}  // namespace sluice::store
