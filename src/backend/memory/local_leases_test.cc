// store::LocalLeases over LocalOverLimitCache over a memory store, as the memory-only stack builds
// them: a hot state is leased to the thread that asks it often, a lease never lets the admissions
// go past what the exact algorithm admits (checked against the algorithm replayed on every
// admission), unspent units of a window go back, a reset ends every thread's leases, and under
// many threads exactly the limit is admitted.

#include "backend/memory/local_leases.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algo/algorithms.h"
#include "backend/memory/local_over_limit_cache.h"
#include "backend/memory/store_testing.h"
#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "tests/support/limits.h"
#include "tests/support/units.h"

namespace sluice::store {
namespace {

using backend::Item;
constexpr backend::Consistency kLeased = backend::Consistency::kLeased;

using sluice::testing::kHour;
using sluice::testing::kMs;
using sluice::testing::kSecond;
using sluice::testing::kT0;

using testing::MakeLimit;

using test::Answer;
using test::Ask;
using test::ResetThrough;

// The stack's memory-only front: leases, then kept denials, then the store.
struct Front {
  explicit Front(const Clock* clock, size_t shards = 4, int64_t life_us = 1000)
      : store({.max_entries = 4096, .shards = shards}, clock),
        denials(&store),
        leases(&denials, &store, {.life_us = life_us}) {}
  MemoryStore store;
  LocalOverLimitCache denials;
  LocalLeases leases;
};

TEST(MemoryStoreLeaseTest, TakesAtMostHalfOfWhatIsLeftUntilTheWindowEnds) {
  ManualClock clock(kT0);
  MemoryStore store({.max_entries = 64, .shards = 1}, &clock);
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 10, kHour);
  const Item item{.limit = &limit, .limit_id = 1, .key = "k", .sharing = {.consistency = kLeased}};
  const MemoryStore::LeaseGrant none = store.Lease(item, 64, kT0, 1000);  // not stored yet
  EXPECT_EQ(none.granted, 0u);
  EXPECT_FALSE(none.exhausted);
  std::vector<Decision> d(1);
  ASSERT_TRUE(store.DecideAll(std::span(&item, 1), kT0, d));
  const int64_t window_end = kT0 - kT0 % kHour + kHour;
  std::vector<uint64_t> granted;
  for (int i = 0; i < 6; ++i) {
    const MemoryStore::LeaseGrant grant = store.Lease(item, 64, kT0, 1000);
    granted.push_back(grant.granted);
    if (grant.granted > 0) {
      EXPECT_EQ(grant.ends_us, window_end);
    }
  }
  EXPECT_EQ(granted, (std::vector<uint64_t>{5, 2, 1, 1, 0, 0}));  // 9 left: 5, 4: 2, 2: 1, 1: 1
  EXPECT_TRUE(store.Lease(item, 64, kT0, 1000).exhausted);
  ASSERT_FALSE(store.DecideAll(std::span(&item, 1), kT0, d));
}

TEST(MemoryStoreLeaseTest, ABucketLeaseCountsItsLifeAsConsumed) {
  ManualClock clock(kT0);
  MemoryStore store({.max_entries = 64, .shards = 1}, &clock);
  // 1000/1s: a token every ms. Full (a stored state that refilled): a lease of 2 ms life takes
  // the 2 ms first, so 998 tokens are left to take and half of them are granted.
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1000, kSecond);
  const Item item{.limit = &limit, .limit_id = 1, .key = "k", .sharing = {.consistency = kLeased}};
  std::vector<Decision> d(1);
  ASSERT_TRUE(store.DecideAll(std::span(&item, 1), kT0, d));
  const MemoryStore::LeaseGrant grant = store.Lease(item, 10000, kT0 + kSecond, 2000);
  EXPECT_EQ(grant.granted, 499u);
  EXPECT_EQ(grant.ends_us, kT0 + kSecond + 2000);
  EXPECT_EQ(grant.left, 499u);
}

// docs/algorithms.md's case for recording a bucket lease at its end: units spent late in the
// lease's life, after others took the bucket's refill meanwhile, must not add up to more than the
// bucket holds at that instant.
TEST(LocalLeasesTest, ABucketLeaseSpentAfterTheRefillIsNotTakenTwice) {
  ManualClock clock(kT0);
  Front front(&clock, 4, /*life_us=*/200000);
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 100, kSecond);  // a token every 10 ms
  const Item item{.limit = &limit, .limit_id = 1, .key = "k", .sharing = {.consistency = kLeased}};
  std::vector<int64_t> admitted_at;  // cost 1 each
  const auto note = [&](const Answer& a) {
    if (a.allowed) admitted_at.push_back(a.decided_at_us);
    return a.allowed;
  };
  ASSERT_TRUE(note(Ask(front.leases, item, kT0)));
  const int64_t t0 = kT0 + kSecond;  // full again
  const LocalLeases::ThreadStats before = LocalLeases::StatsOnThisThread();
  while (LocalLeases::StatsOnThisThread().leases == before.leases) {
    ASSERT_TRUE(note(Ask(front.leases, item, t0)));
  }
  // Another thread takes what the store gives just before the lease ends, then this one spends
  // its units.
  const int64_t s = t0 + 199000;
  std::vector<Decision> d(1);
  int64_t at = 0;
  while (front.store.DecideAll(std::span(&item, 1), s, d, &at)) admitted_at.push_back(at);
  const LocalLeases::ThreadStats spending = LocalLeases::StatsOnThisThread();
  while (note(Ask(front.leases, item, s))) {
  }
  EXPECT_GT(LocalLeases::StatsOnThisThread().admitted, spending.admitted);
  std::sort(admitted_at.begin(), admitted_at.end());
  algo::CompactState model;
  for (size_t i = 0; i < admitted_at.size(); ++i) {
    ASSERT_TRUE(algo::DecideCompact(model, admitted_at[i], limit, 1).allowed)
        << "admission " << i << " of " << admitted_at.size() << " at " << admitted_at[i] - kT0;
  }
}

TEST(LocalLeasesTest, OnlyAHotStateIsLeased) {
  ManualClock clock(kT0);
  Front front(&clock);
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 1000, kHour);
  const Item item{.limit = &limit, .limit_id = 1, .key = "k", .sharing = {.consistency = kLeased}};
  const LocalLeases::ThreadStats before = LocalLeases::StatsOnThisThread();
  for (uint32_t i = 0; i + 1 < LocalLeases::kHotDecisions; ++i) {
    ASSERT_TRUE(Ask(front.leases, item, kT0).allowed);
  }
  EXPECT_EQ(LocalLeases::StatsOnThisThread().leases, before.leases);
  ASSERT_TRUE(Ask(front.leases, item, kT0).allowed);
  EXPECT_EQ(LocalLeases::StatsOnThisThread().leases, before.leases + 1);
  // The lease's units are counted in the state already; what this thread reports adds them back.
  const Answer next = Ask(front.leases, item, kT0);
  std::vector<Decision> look(1);
  Item peek = item;
  peek.cost = 0;
  front.store.DecideAll(std::span(&peek, 1), kT0, look);
  EXPECT_LT(look[0].remaining, next.out[0].remaining);
}

// Leasing is the domain's choice: an exact item of a hot state is decided by the store every
// time; `hot_keys: lease` (a hot_key_rate) and `consistency: eventual` lease it as `leased` does.
TEST(LocalLeasesTest, OnlyItemsWhoseDomainChoseLeasesAreLeased) {
  ManualClock clock(kT0);
  Front front(&clock);
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100000, kHour);
  const auto leases_after_many = [&](const Item& item) {
    const uint64_t before = LocalLeases::StatsOnThisThread().leases;
    for (uint32_t i = 0; i < 4 * LocalLeases::kHotDecisions; ++i) {
      EXPECT_TRUE(Ask(front.leases, item, kT0).allowed);
    }
    return LocalLeases::StatsOnThisThread().leases - before;
  };
  EXPECT_EQ(leases_after_many({.limit = &limit, .limit_id = 1, .key = "exact"}), 0u);
  EXPECT_GT(leases_after_many(
                {.limit = &limit, .limit_id = 1, .key = "hot", .sharing = {.hot_key_rate = 1}}),
            0u);
  EXPECT_GT(leases_after_many({.limit = &limit,
                               .limit_id = 1,
                               .key = "eventual",
                               .sharing = {.consistency = backend::Consistency::kEventual}}),
            0u);
}

// A bucket's unspent units are lost when its lease ends. A bucket that refills slowly (1000 a
// day) would lose them for hours: it is not leased, and a hot key on it gets its whole burst.
TEST(LocalLeasesTest, ABucketIsLeasedNoMoreThanItRefillsInALeasesLife) {
  ManualClock clock(kT0);
  Front front(&clock);  // leases of 1 ms
  const Limit slow = MakeLimit(Algorithm::kTokenBucket, 1000, 24 * kHour);
  const Item item{
      .limit = &slow, .limit_id = 1, .key = "slow", .sharing = {.consistency = kLeased}};
  const uint64_t leases_before = LocalLeases::StatsOnThisThread().leases;
  uint64_t admitted = 0;
  for (int i = 0; i < 3000; ++i) {  // ten a ms, for 0.3 s: far over the burst
    clock.Advance(100);
    admitted += Ask(front.leases, item, clock.NowMicros()).allowed ? 1 : 0;
  }
  EXPECT_EQ(admitted, 1000u);
  EXPECT_EQ(LocalLeases::StatsOnThisThread().leases, leases_before);
  // One that refills 32 units in a lease's life is leased, up to that.
  const Limit fast = MakeLimit(Algorithm::kTokenBucket, 32000, kSecond);
  const Item hot{.limit = &fast, .limit_id = 2, .key = "fast", .sharing = {.consistency = kLeased}};
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(Ask(front.leases, hot, kT0 + kSecond).allowed);
  EXPECT_GT(LocalLeases::StatsOnThisThread().leases, leases_before);
}

// Requests of cost 3 on a hot window of 100, the clock still: the store alone admits 33 (99
// units) and denies the rest. A lease is never smaller than the request asking for it, or it
// would take units the store then lacks (with 3 left, a lease of half, 2, left the store 1).
TEST(LocalLeasesTest, RequestsOfSeveralUnitsAreAdmittedAsTheStoreAloneWould) {
  ManualClock clock(kT0);
  Front front(&clock);
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100, kHour);
  Item item{
      .limit = &limit, .limit_id = 1, .key = "k", .cost = 3, .sharing = {.consistency = kLeased}};
  const uint64_t leases_before = LocalLeases::StatsOnThisThread().leases;
  uint64_t admitted = 0;
  for (int i = 0; i < 60; ++i) admitted += Ask(front.leases, item, kT0).allowed ? 1 : 0;
  EXPECT_EQ(admitted, 33u);
  EXPECT_GT(LocalLeases::StatsOnThisThread().leases, leases_before);
  item.cost = 1;  // the unit left
  EXPECT_TRUE(Ask(front.leases, item, kT0).allowed);
  EXPECT_FALSE(Ask(front.leases, item, kT0).allowed);
}

TEST(LocalLeasesTest, UnspentWindowUnitsGoBackWhenTheyCannotCoverARequest) {
  ManualClock clock(kT0);
  Front front(&clock);
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 1000, kHour);
  Item item{.limit = &limit, .limit_id = 1, .key = "k", .sharing = {.consistency = kLeased}};
  uint64_t admitted = 0;
  for (int i = 0; i < 20; ++i) admitted += Ask(front.leases, item, kT0).allowed ? 1 : 0;
  ASSERT_GT(LocalLeases::StatsOnThisThread().leases, 0u);
  item.cost = LocalLeases::kMaxUnits;  // more than the lease holds: its units go back first
  admitted += Ask(front.leases, item, kT0).allowed ? LocalLeases::kMaxUnits : 0;
  // Nothing leased now (a lease is taken only when it covers the request, else it waits).
  Item peek = item;
  peek.cost = 0;
  std::vector<Decision> look(1);
  front.store.DecideAll(std::span(&peek, 1), kT0, look);
  EXPECT_EQ(static_cast<uint64_t>(look[0].remaining), 1000 - admitted);
}

// A random walk on a few keys, in bursts at one instant (so that states get hot) and steps of
// time between them, with resets: the admissions of each state, replayed through the exact
// algorithm at the moments they were made, are all admitted by it.
TEST(LocalLeasesTest, TheAdmissionsAreOnesTheExactAlgorithmAdmits) {
  // Buckets that refill a few units in a lease's life (1 ms), with bursts the requests pass.
  Limit bucket = MakeLimit(Algorithm::kTokenBucket, 5000, kSecond);
  bucket.burst = 30;
  Limit slower_bucket = MakeLimit(Algorithm::kTokenBucket, 20000, 10 * kSecond);
  slower_bucket.burst = 50;
  const Limit limits[] = {
      MakeLimit(Algorithm::kFixedWindow, 50, kSecond),
      MakeLimit(Algorithm::kFixedWindow, 1000, 10 * kSecond),
      bucket,
      slower_bucket,
  };
  const std::string keys[] = {"a", "b", "c"};
  std::mt19937_64 rng(23);
  for (const Limit& limit : limits) {
    SCOPED_TRACE(DescribeLimit(limit));
    ManualClock clock(kT0);
    Front front(&clock);
    const LocalLeases::ThreadStats before = LocalLeases::StatsOnThisThread();
    struct Event {
      bool reset = false;
      int64_t at_us = 0;
      uint64_t cost = 0;
    };
    std::map<std::string, std::vector<Event>> events;
    int64_t now = kT0;
    uint64_t admitted = 0;
    for (int burst = 0; burst < 3000; ++burst) {
      now += static_cast<int64_t>(rng() % 20000);
      const std::string& key = keys[rng() % std::size(keys)];
      Item item{.limit = &limit, .limit_id = 1, .key = key, .sharing = {.consistency = kLeased}};
      if (rng() % 100 == 0) {
        ResetThrough(front.leases, item);
        events[key].push_back({.reset = true});
        continue;
      }
      const int n = static_cast<int>(rng() % 40);
      for (int i = 0; i < n; ++i) {
        item.cost = rng() % 8 == 0 ? 2 : 1;
        const int64_t at = now + static_cast<int64_t>(rng() % 3);  // a little jitter, in order
        now = at;
        const Answer a = Ask(front.leases, item, at);
        if (a.allowed) {
          ++admitted;
          events[key].push_back({.at_us = a.decided_at_us, .cost = item.cost});
        }
      }
    }
    for (const auto& [key, list] : events) {
      algo::CompactState model;
      for (size_t i = 0; i < list.size(); ++i) {
        const Event& e = list[i];
        if (e.reset) {
          model = {};
          continue;
        }
        ASSERT_TRUE(algo::DecideCompact(model, e.at_us, limit, e.cost).allowed)
            << "key " << key << ", admission " << i << " at " << e.at_us - kT0;
      }
    }
    const LocalLeases::ThreadStats after = LocalLeases::StatsOnThisThread();
    EXPECT_GT(after.leases - before.leases, 10u);
    EXPECT_GT(after.admitted - before.admitted, admitted / 10);
  }
}

// Two threads on one state while a third moves the clock on in small steps: all admissions,
// replayed through the exact algorithm in time order, are admitted by it. (A bucket that
// refills within a lease's life is where a lease counted only at its grant would over-admit:
// units spent after others took the refill.)
TEST(LocalLeasesTest, UnderThreadsAndAMovingClockTheAdmissionsAreOnesTheExactAlgorithmAdmits) {
  // Refills faster than two threads take: often full, 1000 tokens refilled in a lease's life.
  Limit fast_bucket = MakeLimit(Algorithm::kTokenBucket, 10000000, kSecond);
  fast_bucket.burst = 2000;
  const Limit limits[] = {
      MakeLimit(Algorithm::kFixedWindow, 300, 10000),
      MakeLimit(Algorithm::kTokenBucket, 3000, 100000),
      fast_bucket,
  };
  uint64_t all_leases = 0;
  for (const Limit& limit : limits) {
    SCOPED_TRACE(DescribeLimit(limit));
    ManualClock clock(kT0);
    Front front(&clock, 1, /*life_us=*/100);
    const Item hot{
        .limit = &limit, .limit_id = 1, .key = "hot", .sharing = {.consistency = kLeased}};
    struct Admission {
      int64_t at_us;
      uint64_t cost;
    };
    std::vector<Admission> admissions[2];
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> leases{0}, asked{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        const LocalLeases::ThreadStats before = LocalLeases::StatsOnThisThread();
        Item item = hot;
        uint64_t i = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          item.cost = ++i % 5 == 0 ? 2 : 1;
          const Answer a = Ask(front.leases, item, clock.NowMicros());
          if (a.allowed) admissions[t].push_back({a.decided_at_us, item.cost});
          asked.fetch_add(1, std::memory_order_relaxed);
        }
        leases += LocalLeases::StatsOnThisThread().leases - before.leases;
      });
    }
    // The clock moves on at most one step per request decided, so that however the threads are
    // scheduled they ask often enough in its time to be hot (within a bounded real time).
    std::mt19937_64 rng(7);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int step = 0; step < 20000; ++step) {
      const uint64_t seen = asked.load(std::memory_order_relaxed);
      clock.Advance(static_cast<int64_t>(rng() % 40));
      while (asked.load(std::memory_order_relaxed) == seen &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
    }
    stop = true;
    for (std::thread& t : threads) t.join();
    std::vector<Admission> all = admissions[0];
    all.insert(all.end(), admissions[1].begin(), admissions[1].end());
    std::stable_sort(all.begin(), all.end(),
                     [](const Admission& a, const Admission& b) { return a.at_us < b.at_us; });
    // At one instant the order does not matter: what is admitted only adds up.
    algo::CompactState model;
    for (size_t i = 0; i < all.size(); ++i) {
      ASSERT_TRUE(algo::DecideCompact(model, all[i].at_us, limit, all[i].cost).allowed)
          << "admission " << i << " of " << all.size() << " at " << all[i].at_us - kT0;
    }
    all_leases += leases.load();
  }
  EXPECT_GT(all_leases, 0u);  // (how many each limit gets depends on the threads' timing)
}

// Many threads on one state, each until it is denied, the clock still: every lease is spent (a
// thread stops only when its lease is empty and the state is too), so exactly the limit is
// admitted (a bucket: less by at most what its lease's life costs it); again after a reset (leases
// taken before it end) and after the window. A thread resets another key all along. A bucket's
// lease counts its life as consumed: a full bucket's first lease costs it what it refills in that
// life (`life_refill`), so a bucket admits that much less, at most.
void HammerUntilDenied(const Limit& limit, uint64_t life_refill = 0) {
  ManualClock clock(kT0);
  Front front(&clock, 64);
  const Item hot{.limit = &limit, .limit_id = 1, .key = "hot", .sharing = {.consistency = kLeased}};
  const Item other{.limit = &limit, .limit_id = 1, .key = "other"};
  constexpr int kThreads = 4;
  std::atomic<uint64_t> admitted{0}, leased{0};
  const auto until_denied = [&] {
    const LocalLeases::ThreadStats before = LocalLeases::StatsOnThisThread();
    uint64_t mine = 0;
    while (Ask(front.leases, hot, clock.NowMicros()).allowed) ++mine;
    admitted += mine;
    leased += LocalLeases::StatsOnThisThread().leases - before.leases;
  };
  // kThreads threads and this one (which may hold a lease from before).
  const auto hammer = [&] {
    admitted = 0;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(until_denied);
    until_denied();
    for (std::thread& t : threads) t.join();
  };
  std::atomic<bool> stop{false};
  std::thread resetter([&] {
    while (!stop.load()) ResetThrough(front.leases, other);
  });
  const auto expect_the_limit = [&] {
    EXPECT_LE(admitted.load(), limit.requests);
    EXPECT_GE(admitted.load(), limit.requests - life_refill);
  };
  hammer();
  stop = true;
  resetter.join();
  expect_the_limit();
  EXPECT_GT(leased.load(), 0u);

  // This thread holds a lease with units when another resets the state: they are not spent
  // after it (else more than the limit would be admitted below).
  ResetThrough(front.leases, hot);
  const LocalLeases::ThreadStats before = LocalLeases::StatsOnThisThread();
  while (LocalLeases::StatsOnThisThread().leases == before.leases) {
    ASSERT_TRUE(Ask(front.leases, hot, clock.NowMicros()).allowed);
  }
  std::thread([&] { ResetThrough(front.leases, hot); }).join();
  hammer();
  expect_the_limit();

  clock.Advance(kHour);
  hammer();
  expect_the_limit();
}

TEST(LocalLeasesTest, ManyThreadsAdmitExactlyAWindowsLimit) {
  HammerUntilDenied(MakeLimit(Algorithm::kFixedWindow, 20000, kHour));
}

TEST(LocalLeasesTest, ManyThreadsAdmitExactlyABucketsLimit) {
  // (One that refills in a lease's life, 200 a ms, more than a lease holds: the clock stands
  // still, so the threads share the burst.)
  HammerUntilDenied(MakeLimit(Algorithm::kTokenBucket, 20000, 100 * kMs), /*life_refill=*/200);
}

}  // namespace
}  // namespace sluice::store
