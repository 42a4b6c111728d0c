// store::LocalOverLimitCache over a memory store, against a second store fed the same requests:
// what a thread answers from its kept denials is exactly what the store answers, it never denies
// what the store would admit (after a refund, a reset, a changed limit, room coming back), it stays
// bounded, and under many threads the admitted counts are exactly the limits.

#include "backend/memory/local_over_limit_cache.h"

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/memory/store_testing.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "tests/support/limits.h"
#include "tests/support/units.h"

namespace sluice::store {
namespace {

using backend::Item;

using sluice::testing::kHour;
using sluice::testing::kSecond;
using sluice::testing::kT0;

std::string Describe(const Decision& d) {
  return fmt::format("{{allowed {} remaining {} retry_after {} reset_after {} delay {}}}",
                     d.allowed, d.remaining, d.retry_after_us, d.reset_after_us, d.delay_us);
}

using test::Answer;
using test::Ask;
using test::ResetThrough;

Answer AskStore(MemoryStore& store, const std::vector<Item>& items, int64_t now_us) {
  Answer a;
  a.out.resize(items.size());
  a.allowed = store.DecideAll(items, now_us, a.out, &a.decided_at_us);
  return a;
}

void RefundThrough(backend::Backend& backend, const std::vector<Item>& items, int64_t decided_at,
                   int64_t now_us) {
  backend.Refund(items, decided_at, now_us, [](absl::Status) {});
}

using testing::MakeLimit;

// A random walk of requests (one or two items, costs 1 to 3 and now and then one above the
// capacity, shadow and count_denied items), refunds and resets, in time that moves forward by
// small and large steps. The reference store decides everything; the one behind LocalOverLimitCache
// only what the thread's kept denials do not answer. A denial consumes nothing, so both stores
// hold the same states throughout and every answer must be the same, field for field.
TEST(LocalOverLimitCacheTest, AnswersExactlyWhatTheStoreWould) {
  const Limit limits[] = {
      MakeLimit(Algorithm::kTokenBucket, 5, kSecond),
      MakeLimit(Algorithm::kTokenBucket, 3, kSecond, 6),
      MakeLimit(Algorithm::kLeakyBucket, 4, kSecond, 2),
      MakeLimit(Algorithm::kFixedWindow, 5, kSecond),
      MakeLimit(Algorithm::kSlidingWindow, 6, kSecond),
      MakeLimit(Algorithm::kSlidingLog, 4, kSecond),
  };
  const std::string keys[] = {"a", "b", "c"};
  std::mt19937_64 rng(23);
  for (const Limit& limit : limits) {
    SCOPED_TRACE(DescribeLimit(limit));
    ManualClock clock(kT0);
    MemoryStore store({.max_entries = 4096, .shards = 4}, &clock);
    MemoryStore reference({.max_entries = 4096, .shards = 4}, &clock);
    LocalOverLimitCache local(&store);
    const uint64_t hits_before = LocalOverLimitCache::HitsOnThisThread();
    const uint64_t id = LimitId(limit);
    std::vector<std::pair<std::vector<Item>, int64_t>> admitted;  // what a refund may give back
    int64_t now = kT0;
    for (int step = 0; step < 20000; ++step) {
      now += rng() % 8 == 0 ? static_cast<int64_t>(rng() % 400000)
                            : static_cast<int64_t>(rng() % 3000);
      const auto pick = [&] { return std::string_view(keys[rng() % std::size(keys)]); };
      const uint64_t op = rng() % 100;
      if (op < 2) {
        const std::vector<Item> items = {{.limit = &limit, .limit_id = id, .key = pick()}};
        ResetThrough(local, items);
        reference.Reset(id, items[0].key);
        continue;
      }
      if (op < 5 && !admitted.empty()) {
        const size_t k = rng() % admitted.size();
        RefundThrough(local, admitted[k].first, admitted[k].second, now);
        reference.Refund(admitted[k].first, admitted[k].second, now);
        admitted.erase(admitted.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      std::vector<Item> items;
      const size_t n = rng() % 4 == 0 ? 2 : 1;
      for (size_t i = 0; i < n; ++i) {
        Item item{.limit = &limit, .limit_id = id, .key = pick(), .cost = 1 + rng() % 3};
        if (rng() % 50 == 0) item.cost = 20;  // above every capacity: kNever
        if (i > 0 && rng() % 4 == 0) item.shadow = true;
        if (rng() % 10 == 0) item.count_denied = true;  // (every algorithm records then)
        items.push_back(item);
      }
      const Answer want = AskStore(reference, items, now);
      const Answer got = Ask(local, items, now);
      ASSERT_EQ(got.allowed, want.allowed) << "step " << step;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(got.out[i] == want.out[i])
            << "step " << step << " item " << i << ": " << Describe(got.out[i]) << ", the store "
            << Describe(want.out[i]);
      }
      if (want.allowed) {
        ASSERT_EQ(got.decided_at_us, want.decided_at_us);
        std::vector<Item> consumed;
        for (size_t i = 0; i < n; ++i) {
          if (want.out[i].allowed && !items[i].shadow) consumed.push_back(items[i]);
        }
        if (!consumed.empty()) admitted.emplace_back(consumed, want.decided_at_us);
      }
    }
    // A good share of the walk was answered from kept denials (~1000 of 20 000 with this seed).
    EXPECT_GT(LocalOverLimitCache::HitsOnThisThread() - hits_before, 500u);
  }
}

class LocalOverLimitCacheSingleTest : public ::testing::Test {
 protected:
  LocalOverLimitCacheSingleTest()
      : store_({.max_entries = 4096, .shards = 4}, &clock_), local_(&store_) {}

  std::vector<Item> One(std::string_view key, const Limit* limit = nullptr) const {
    return {{.limit = limit != nullptr ? limit : &limit_, .limit_id = 42, .key = key}};
  }
  uint64_t Hits() const { return LocalOverLimitCache::HitsOnThisThread(); }

  ManualClock clock_{kT0};
  MemoryStore store_;
  LocalOverLimitCache local_;
  Limit limit_ = MakeLimit(Algorithm::kTokenBucket, 2, kHour);
};

TEST_F(LocalOverLimitCacheSingleTest, AnswersAKeptDenialWithoutTheStore) {
  Ask(local_, One("k"), kT0);
  Ask(local_, One("k"), kT0);
  const Answer denied = Ask(local_, One("k"), kT0);
  ASSERT_FALSE(denied.allowed);
  // Behind the wrapper's back (which it documents it does not see): only a kept denial still
  // denies now.
  const uint64_t hits = Hits();
  store_.Reset(42, "k");
  const Answer kept = Ask(local_, One("k"), kT0 + 10);
  EXPECT_FALSE(kept.allowed);
  EXPECT_EQ(Hits(), hits + 1);
  EXPECT_EQ(kept.out[0].retry_after_us, denied.out[0].retry_after_us - 10);
}

TEST_F(LocalOverLimitCacheSingleTest, ARefundEndsTheKeptDenial) {
  Ask(local_, One("k"), kT0);
  const Answer first = Ask(local_, One("k"), kT0 + 1);
  ASSERT_FALSE(Ask(local_, One("k"), kT0 + 2).allowed);
  ASSERT_FALSE(Ask(local_, One("k"), kT0 + 3).allowed);
  RefundThrough(local_, One("k"), first.decided_at_us, kT0 + 4);
  const uint64_t hits = Hits();
  EXPECT_TRUE(Ask(local_, One("k"), kT0 + 5).allowed);
  EXPECT_EQ(Hits(), hits);
}

TEST_F(LocalOverLimitCacheSingleTest, AResetOnAnotherThreadEndsThisThreadsKeptDenial) {
  Ask(local_, One("k"), kT0);
  Ask(local_, One("k"), kT0);
  ASSERT_FALSE(Ask(local_, One("k"), kT0).allowed);
  ASSERT_FALSE(Ask(local_, One("k"), kT0).allowed);
  std::thread([&] { ResetThrough(local_, One("k")); }).join();
  EXPECT_TRUE(Ask(local_, One("k"), kT0 + 1).allowed);
}

TEST_F(LocalOverLimitCacheSingleTest, AChangedLimitIsAskedOfTheStore) {
  Ask(local_, One("k"), kT0);
  Ask(local_, One("k"), kT0);
  ASSERT_FALSE(Ask(local_, One("k"), kT0).allowed);
  const Limit more = MakeLimit(Algorithm::kTokenBucket, 5, kHour);
  const uint64_t hits = Hits();
  Ask(local_, One("k", &more), kT0 + 1);
  EXPECT_EQ(Hits(), hits);
}

TEST_F(LocalOverLimitCacheSingleTest, WhatThisThreadConsumesEndsItsKeptDenial) {
  // Cost 2 denied with one token left (remaining 1 = cost - 1: kept); a cost-1 request takes
  // that token, so the kept denial's remaining would be a token too many.
  std::vector<Item> two = One("k");
  two[0].cost = 2;
  ASSERT_TRUE(Ask(local_, One("k"), kT0).allowed);
  ASSERT_FALSE(Ask(local_, two, kT0).allowed);
  ASSERT_FALSE(Ask(local_, two, kT0).allowed);
  const uint64_t hits = Hits();
  ASSERT_TRUE(Ask(local_, One("k"), kT0).allowed);
  const Answer got = Ask(local_, two, kT0 + 1);
  EXPECT_EQ(Hits(), hits);
  EXPECT_EQ(got.out[0].remaining, 0);
}

TEST_F(LocalOverLimitCacheSingleTest, ATimeGoingBackIsAskedOfTheStore) {
  Ask(local_, One("k"), kT0);
  Ask(local_, One("k"), kT0);
  ASSERT_FALSE(Ask(local_, One("k"), kT0 + kSecond).allowed);
  // The store may have decided another key of the shard at the later time, and would use it.
  const uint64_t hits = Hits();
  EXPECT_FALSE(Ask(local_, One("k"), kT0 + kSecond / 2).allowed);
  EXPECT_EQ(Hits(), hits);
  EXPECT_FALSE(Ask(local_, One("k"), kT0 + kSecond).allowed);
  EXPECT_EQ(Hits(), hits + 1);
}

TEST(LocalOverLimitCacheTest, AnswersAtTheDenialsTimeWhenTheStoreDecidedLater) {
  // Another thread moved the shard's clock past this thread's time: the store decided the denial
  // at that later time, and would decide this request at it too.
  ManualClock clock(kT0);
  MemoryStore store({.max_entries = 4096, .shards = 1}, &clock);
  LocalOverLimitCache local(&store);
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 2, kHour);
  const auto one = [&](std::string_view key) {
    return std::vector<Item>{{.limit = &limit, .limit_id = 1, .key = key}};
  };
  Ask(local, one("k"), kT0);
  Ask(local, one("k"), kT0);
  std::thread([&] { Ask(local, one("other"), kT0 + kSecond); }).join();
  const Answer denied = Ask(local, one("k"), kT0 + 10);
  ASSERT_FALSE(denied.allowed);
  ASSERT_EQ(denied.decided_at_us, kT0 + kSecond);
  const uint64_t hits = LocalOverLimitCache::HitsOnThisThread();
  const Answer got = Ask(local, one("k"), kT0 + 20);
  EXPECT_EQ(LocalOverLimitCache::HitsOnThisThread(), hits + 1);
  std::vector<Decision> want(1);
  int64_t want_at = 0;
  store.DecideAll(one("k"), kT0 + 20, want, &want_at);
  EXPECT_TRUE(got.out[0] == want[0]) << Describe(got.out[0]) << ", the store " << Describe(want[0]);
  EXPECT_EQ(got.decided_at_us, want_at);
}

TEST_F(LocalOverLimitCacheSingleTest, ALookOrAShadowItemIsAskedOfTheStore) {
  Ask(local_, One("k"), kT0);
  Ask(local_, One("k"), kT0);
  ASSERT_FALSE(Ask(local_, One("k"), kT0).allowed);
  const uint64_t hits = Hits();
  std::vector<Item> look = One("k");
  look[0].cost = 0;
  EXPECT_TRUE(Ask(local_, look, kT0).allowed);
  std::vector<Item> shadow = One("k");
  shadow[0].shadow = true;
  EXPECT_TRUE(Ask(local_, shadow, kT0).allowed);  // a shadow deny does not deny the request
  EXPECT_EQ(Hits(), hits);
}

TEST(LocalOverLimitCacheTest, ADenialForWantOfRoomIsNotKept) {
  ManualClock clock(kT0);
  MemoryStore store({.max_entries = 2, .shards = 1, .on_full = OnFull::kDeny}, &clock);
  LocalOverLimitCache local(&store);
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1, kHour);
  const auto one = [&](std::string_view key) {
    return std::vector<Item>{{.limit = &limit, .limit_id = 1, .key = key}};
  };
  ASSERT_TRUE(Ask(local, one("a"), kT0).allowed);
  ASSERT_TRUE(Ask(local, one("b"), kT0).allowed);
  const Answer no_room = Ask(local, one("c"), kT0);
  ASSERT_FALSE(no_room.allowed);
  ASSERT_EQ(no_room.out[0].retry_after_us, MemoryStore::kNoRoomRetryAfterUs);
  ResetThrough(local, one("a"));  // room for "c" now
  EXPECT_TRUE(Ask(local, one("c"), kT0 + 1).allowed);
}

TEST(LocalOverLimitCacheTest, KeepsAtMostItsEntriesPerThread) {
  ManualClock clock(kT0);
  MemoryStore store({.max_entries = 1 << 16, .shards = 4}, &clock);
  LocalOverLimitCache local(&store);
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1, kHour);
  constexpr size_t kKeys = 4 * LocalOverLimitCache::kEntries;
  std::vector<std::string> keys;
  for (size_t i = 0; i < kKeys; ++i) keys.push_back(fmt::format("key:{}", i));
  const auto one = [&](const std::string& key) {
    return std::vector<Item>{{.limit = &limit, .limit_id = 1, .key = key}};
  };
  for (const std::string& key : keys) {
    ASSERT_TRUE(Ask(local, one(key), kT0).allowed);
    ASSERT_FALSE(Ask(local, one(key), kT0).allowed);
  }
  const uint64_t hits = LocalOverLimitCache::HitsOnThisThread();
  for (const std::string& key : keys) EXPECT_FALSE(Ask(local, one(key), kT0 + 1).allowed);
  const uint64_t answered = LocalOverLimitCache::HitsOnThisThread() - hits;
  EXPECT_GT(answered, 0u);
  EXPECT_LE(answered, LocalOverLimitCache::kEntries);
}

// Many threads on one denied and one allowed key (with a thread resetting another key all along,
// which moves generations the hot keys may share), the clock still: exactly the limits are
// admitted, then again after a reset and after the window, whatever each thread kept.
TEST(LocalOverLimitCacheTest, ManyThreadsAdmitExactlyTheLimits) {
  ManualClock clock(kT0);
  MemoryStore store({.max_entries = 4096, .shards = 64}, &clock);
  LocalOverLimitCache local(&store);
  const Limit denied_limit = MakeLimit(Algorithm::kFixedWindow, 100, kHour);
  const Limit allowed_limit = MakeLimit(Algorithm::kTokenBucket, 20000, kHour);
  const std::vector<Item> denied = {{.limit = &denied_limit, .limit_id = 1, .key = "hot-denied"}};
  const std::vector<Item> allowed = {{.limit = &allowed_limit, .limit_id = 2, .key = "hot"}};
  const std::vector<Item> other = {{.limit = &denied_limit, .limit_id = 1, .key = "other"}};
  constexpr int kThreads = 4;
  constexpr int kRounds = 10000;  // per thread: 40 000 requests on each key

  std::atomic<uint64_t> denied_admitted{0}, allowed_admitted{0}, hits{0};
  const auto hammer = [&](int rounds, bool both) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, rounds, both] {
        const uint64_t hits_before = LocalOverLimitCache::HitsOnThisThread();
        uint64_t d = 0, a = 0;
        for (int i = 0; i < rounds; ++i) {
          d += Ask(local, denied, clock.NowMicros()).allowed ? 1 : 0;
          if (both) a += Ask(local, allowed, clock.NowMicros()).allowed ? 1 : 0;
        }
        denied_admitted += d;
        allowed_admitted += a;
        hits += LocalOverLimitCache::HitsOnThisThread() - hits_before;
      });
    }
    return threads;
  };

  std::atomic<bool> stop{false};
  std::thread resetter([&] {
    while (!stop.load()) ResetThrough(local, other);
  });
  for (std::thread& t : hammer(kRounds, true)) t.join();
  stop = true;
  resetter.join();
  EXPECT_EQ(denied_admitted.load(), 100u);
  EXPECT_EQ(allowed_admitted.load(), 20000u);
  EXPECT_GT(hits.load(), 0u);

  // Every thread keeps the denial; a reset through any thread ends them all.
  ResetThrough(local, denied);
  denied_admitted = 0;
  for (std::thread& t : hammer(1000, false)) t.join();
  EXPECT_EQ(denied_admitted.load(), 100u);

  // And the window's end.
  clock.Advance(kHour);
  denied_admitted = 0;
  for (std::thread& t : hammer(1000, false)) t.join();
  EXPECT_EQ(denied_admitted.load(), 100u);
}

}  // namespace
}  // namespace sluice::store
