// The memory store when it is full: no request for other keys can lift a tracked key's limit
// (a flood of unique keys never evicts a state in use), new keys are decided by `on_full`, memory
// stays at the bound, and room comes back once states go idle.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "algo/algorithms.h"
#include "backend/memory/memory_store.h"
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

using sluice::testing::kMinute;
using sluice::testing::kMs;
using sluice::testing::kSecond;
// A realistic unix time just past the start of a minute, so that the tests below (which span
// at most 50 s) run within one fixed window of a minute. A key's state that goes idle is dropped
// and the key is new again; that is tested apart.
constexpr int64_t kFullT0 = 1700000000 / 60 * kMinute + kSecond + 123457;

// 5 requests per `window_us` (at most 5 at one instant), for each algorithm.
Limit FivePer(Algorithm algorithm, int64_t window_us) {
  Limit limit = testing::MakeLimit(algorithm, 5, window_us);
  if (algorithm == Algorithm::kLeakyBucket) limit.burst = 4;  // C = B + 1 = 5
  return limit;
}

const Algorithm kAlgorithms[] = {Algorithm::kTokenBucket, Algorithm::kLeakyBucket,
                                 Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                                 Algorithm::kSlidingLog};
const OnFull kModes[] = {OnFull::kShared, OnFull::kDeny, OnFull::kAllowUntracked};

class FullStoreTest : public ::testing::TestWithParam<std::tuple<Algorithm, OnFull>> {
 protected:
  Algorithm algorithm() const { return std::get<0>(GetParam()); }
  OnFull on_full() const { return std::get<1>(GetParam()); }
};

std::string FullStoreTestName(const ::testing::TestParamInfo<std::tuple<Algorithm, OnFull>>& info) {
  return std::string(AlgorithmName(std::get<0>(info.param))) + "_" +
         std::string(OnFullName(std::get<1>(info.param)));
}

// A flood of unique keys: a victim limited to 5 per minute, a store of 64 entries and 100000
// unique keys decided in between, half under the victim's limit and half under one of 5 per hour
// (whose states outlast the victim's, so evicting whatever goes idle first would take the
// victim's). The victim's every decision is exactly what its limit alone gives, and the store
// stays at its bound.
TEST_P(FullStoreTest, AFloodOfNewKeysNeverLiftsATrackedKeysLimit) {
  const Limit limit = FivePer(algorithm(), kMinute);
  const uint64_t id = LimitId(limit);
  const Limit hourly = FivePer(algorithm(), 60 * kMinute);
  ManualClock clock(kFullT0);
  MemoryStore store({.max_entries = 64, .shards = 4, .on_full = on_full()}, &clock);
  KeyName name;
  ModelState victim;
  int victim_allowed = 0;
  const auto victim_asks = [&] {
    const Decision expected = ModelDecide(victim, clock.NowMicros(), limit, 1);
    const Decision got = store.Decide(limit, id, "victim", 1);
    EXPECT_EQ(got, expected) << "at +" << (clock.NowMicros() - kFullT0) << " µs";
    victim_allowed += got.allowed ? 1 : 0;
  };
  victim_asks();
  constexpr uint64_t kFlood = 100000;
  for (uint64_t i = 0; i < kFlood; ++i) {
    if (i % 2 == 0) {
      store.Decide(limit, id, name("flood-", i), 1);
    } else {
      store.Decide(hourly, LimitId(hourly), name("flood-", i), 1);
    }
    if (i % 997 == 0) victim_asks();
    if (i % 100 == 99) clock.Advance(50 * kMs);  // 50 s in all: one window
    if (i % 5000 == 0) {
      ASSERT_LE(store.GetStats().entries, 64u) << "after " << i << " flood keys";
    }
  }
  victim_asks();
  // The windows do not refill within the flood, the buckets refill one request per 12 s.
  const int expected =
      algorithm() == Algorithm::kTokenBucket || algorithm() == Algorithm::kLeakyBucket ? 9 : 5;
  EXPECT_EQ(victim_allowed, expected);
  const MemoryStore::Stats stats = store.GetStats();
  EXPECT_EQ(stats.entries, 64u) << "every slot holds a live state; none was given up";
  EXPECT_GT(stats.no_room_allowed + stats.no_room_denied, kFlood / 2);
  if (on_full() == OnFull::kShared) {
    EXPECT_LE(stats.overflow_states, 8u) << "one per limit per shard";
    EXPECT_GT(stats.no_room_denied, kFlood / 2) << "the flood shares one quota per shard";
  } else {
    EXPECT_EQ(stats.overflow_states, 0u);
  }
  if (on_full() == OnFull::kDeny) {
    EXPECT_EQ(stats.no_room_allowed, 0u);
  }
  if (on_full() == OnFull::kAllowUntracked) {
    EXPECT_EQ(stats.no_room_denied, 0u);
  }
}

// Flooding with another limit (short windows) and through DecideAll changes nothing either.
TEST_P(FullStoreTest, AFloodThroughDecideAllNeverLiftsATrackedKeysLimit) {
  const Limit limit = FivePer(algorithm(), kMinute);
  const Limit other = FivePer(algorithm(), kSecond);
  ManualClock clock(kFullT0);
  MemoryStore store({.max_entries = 64, .shards = 4, .on_full = on_full()}, &clock);
  KeyName name;
  ModelState victim;
  for (uint64_t i = 0; i < 20000; ++i) {
    const std::string_view key = name("flood-", i);
    const MemoryStore::Item items[] = {{.limit = &other, .limit_id = 2, .key = key},
                                       {.limit = &limit, .limit_id = 1, .key = key}};
    Decision out[2];
    store.DecideAll(items, clock.NowMicros(), out);
    if (i % 500 == 0) {
      const MemoryStore::Item mine[] = {{.limit = &limit, .limit_id = 1, .key = "victim"}};
      Decision got[1];
      store.DecideAll(mine, clock.NowMicros(), got);
      ASSERT_EQ(got[0], ModelDecide(victim, clock.NowMicros(), limit, 1)) << "flood key " << i;
    }
    if (i % 100 == 99) clock.Advance(10 * kMs);
  }
  EXPECT_LE(store.GetStats().entries, 64u);
}

// A key decided through its limit's overflow state (on_full shared) and later given a slot
// starts from that state: it never gets more than its limit in one window.
class OverflowTransitionTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(OverflowTransitionTest, AnUntrackedKeyNeverExceedsItsLimitOnceItIsTracked) {
  const Limit limit = FivePer(GetParam(), kMinute);
  const Limit brief = FivePer(GetParam(), kSecond);
  ManualClock clock(kFullT0);
  MemoryStore store({.max_entries = 4, .shards = 1, .on_full = OnFull::kShared}, &clock);
  KeyName name;
  std::vector<ModelState> fillers(4);
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(store.Decide(brief, 2, name("filler-", i), 1).allowed);
    ModelDecide(fillers[i], kFullT0, brief, 1);
  }
  // The store is full of live states: "late" is decided against the overflow state.
  ModelState model;
  int allowed = 0;
  for (int i = 0; i < 3; ++i) {
    const Decision d = store.Decide(limit, 1, "late", 1);
    EXPECT_EQ(d, ModelDecide(model, clock.NowMicros(), limit, 1));
    allowed += d.allowed ? 1 : 0;
  }
  EXPECT_EQ(store.GetStats().entries, 4u);
  EXPECT_EQ(store.GetStats().no_room_allowed, 3u);
  // The fillers' states are exact.
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(store.Decide(brief, 2, name("filler-", i), 0),
              ModelDecide(fillers[i], clock.NowMicros(), brief, 0));
  }
  // The fillers go idle; "late" gets a slot, but not a fresh quota.
  clock.Advance(2 * kSecond);
  for (int i = 0; i < 10; ++i) {
    const Decision d = store.Decide(limit, 1, "late", 1);
    allowed += d.allowed ? 1 : 0;
    EXPECT_EQ(d, ModelDecide(model, clock.NowMicros(), limit, 1))
        << "request " << i << " once room";
  }
  EXPECT_GE(store.GetStats().reclaimed, 1u);
  EXPECT_LE(store.GetStats().no_room_allowed, 4u) << "a sweep interval, then room";
  EXPECT_EQ(allowed, 5) << "its limit in the window, whether tracked or not";
  EXPECT_TRUE(store.Reset(1, "late")) << "late holds a slot now";
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, OverflowTransitionTest, ::testing::ValuesIn(kAlgorithms),
                         [](const ::testing::TestParamInfo<Algorithm>& info) {
                           return std::string(AlgorithmName(info.param));
                         });

// Once the states that filled the store go idle, new keys find room again, even though no
// insert succeeded while it was full (the full sweep counts every new key, not only inserts).
TEST_P(FullStoreTest, AFullStoreRecoversRoomOnceStatesGoIdle) {
  const Limit limit = FivePer(algorithm(), kSecond);
  const uint64_t id = LimitId(limit);
  ManualClock clock(kFullT0);
  MemoryStore store({.max_entries = 1024, .shards = 4, .on_full = on_full()}, &clock);
  KeyName name;
  for (uint64_t i = 0; i < 20000; ++i) store.Decide(limit, id, name("a", i), 1);
  const MemoryStore::Stats full = store.GetStats();
  ASSERT_EQ(full.entries, 1024u);
  ASSERT_EQ(full.no_room_allowed + full.no_room_denied, 20000u - 1024u);

  // Everything goes idle. The first new keys in a shard may still find it full (the whole-shard
  // sweep runs once per capacity/8 new keys; sliding logs are only reclaimed by it), then room.
  // (on_full shared: a new key that finds room starts from its limit's overflow state while that
  // is busy, so some are denied although they found room.)
  clock.Advance(2 * kSecond);
  const auto no_room = [&store] {
    const MemoryStore::Stats s = store.GetStats();
    return s.no_room_allowed + s.no_room_denied;
  };
  const uint64_t no_room_before = no_room();
  const uint64_t no_room_allowed_before = store.GetStats().no_room_allowed;
  uint64_t allowed = 0;
  for (uint64_t i = 0; i < 384; ++i) allowed += store.Decide(limit, id, name("b", i), 1).allowed;
  EXPECT_LE(no_room() - no_room_before, 4u * 48) << "at most a sweep interval per shard";
  const MemoryStore::Stats after = store.GetStats();
  const uint64_t stored = allowed - (after.no_room_allowed - no_room_allowed_before);
  EXPECT_EQ(after.entries + after.reclaimed, 1024u + stored) << "every state accounted";
  EXPECT_GE(after.reclaimed, stored);
  if (on_full() != OnFull::kShared) {
    EXPECT_GE(stored, 384u - 4 * 48);
  }

  // A second later (the overflow states are idle too), every new key has room.
  clock.Advance(2 * kSecond);
  const uint64_t no_room_then = no_room();
  for (uint64_t i = 0; i < 128; ++i) {
    ASSERT_TRUE(store.Decide(limit, id, name("c", i), 1).allowed) << "new key " << i;
  }
  EXPECT_EQ(no_room(), no_room_then) << "the store has room again";
  const MemoryStore::Stats last = store.GetStats();
  EXPECT_EQ(last.entries + last.reclaimed, 1024u + stored + 128u);
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithmsAllModes, FullStoreTest,
                         ::testing::Combine(::testing::ValuesIn(kAlgorithms),
                                            ::testing::ValuesIn(kModes)),
                         FullStoreTestName);

// ---------------------------------------------------------------------------------------------
// Each on_full mode's own answer for a new key in a full store.

// A store whose only shard holds one live 1-minute state.
struct OneFullShard {
  explicit OneFullShard(OnFull on_full)
      : store({.max_entries = 1, .shards = 1, .on_full = on_full}, &clock) {
    EXPECT_TRUE(store.Decide(limit, 1, "tracked", 1).allowed);
  }
  ManualClock clock{kFullT0};
  Limit limit = FivePer(Algorithm::kFixedWindow, kMinute);
  MemoryStore store;
};

TEST(OnFullTest, DenyDeniesANewKeyThatWouldConsumeAndAnswersPeeks) {
  OneFullShard full(OnFull::kDeny);
  const Decision d = full.store.Decide(full.limit, 1, "new", 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.retry_after_us, MemoryStore::kNoRoomRetryAfterUs);
  const Decision peek = full.store.Decide(full.limit, 1, "new", 0);
  EXPECT_TRUE(peek.allowed) << "a peek needs no room";
  EXPECT_EQ(peek.remaining, 5);
  EXPECT_FALSE(full.store.Decide(full.limit, 1, "new", 6).allowed);
  const MemoryStore::Stats stats = full.store.GetStats();
  EXPECT_EQ(stats.no_room_denied, 1u) << "the peek and the hopeless request found no room";
  EXPECT_EQ(stats.entries, 1u);
  EXPECT_EQ(stats.on_full, OnFull::kDeny);
}

TEST(OnFullTest, AllowUntrackedAdmitsANewKeyAsFreshWithoutRecordingIt) {
  OneFullShard full(OnFull::kAllowUntracked);
  for (int i = 0; i < 8; ++i) {
    const Decision d = full.store.Decide(full.limit, 1, "new", 1);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 4) << "every time a fresh key";
  }
  EXPECT_FALSE(full.store.Decide(full.limit, 1, "new", 6).allowed) << "the limit still applies";
  EXPECT_EQ(full.store.GetStats().no_room_allowed, 8u);
  EXPECT_EQ(full.store.GetStats().entries, 1u);
  EXPECT_EQ(full.store.Decide(full.limit, 1, "tracked", 0).remaining, 4) << "tracked stays exact";
}

TEST(OnFullTest, SharedNewKeysShareOneQuotaPerLimit) {
  OneFullShard full(OnFull::kShared);
  KeyName name;
  int allowed = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    allowed += full.store.Decide(full.limit, 1, name("new-", i), 1).allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 5);
  // Another limit has its own overflow state.
  const Limit other = FivePer(Algorithm::kTokenBucket, kMinute);
  EXPECT_TRUE(full.store.Decide(other, 2, "new-0", 1).allowed);
  const MemoryStore::Stats stats = full.store.GetStats();
  EXPECT_EQ(stats.overflow_states, 2u);
  EXPECT_EQ(stats.no_room_allowed, 6u);
  EXPECT_EQ(stats.no_room_denied, 95u);
}

TEST(OnFullTest, OverflowStatesAreBoundedPerShard) {
  OneFullShard full(OnFull::kShared);
  constexpr uint64_t kLimits = MemoryStore::kMaxOverflowStates + 100;
  uint64_t allowed = 0;
  for (uint64_t id = 2; id < 2 + kLimits; ++id) {
    allowed += full.store.Decide(full.limit, id, "new", 1).allowed ? 1 : 0;
  }
  EXPECT_EQ(full.store.GetStats().overflow_states, MemoryStore::kMaxOverflowStates);
  EXPECT_EQ(allowed, MemoryStore::kMaxOverflowStates) << "past the bound, new keys are denied";
  // Idle overflow states are dropped by the next sweeps.
  full.clock.Advance(2 * kMinute);
  KeyName name;
  for (uint64_t i = 0; i < 8; ++i) full.store.Decide(full.limit, 1, name("k", i), 1);
  EXPECT_LE(full.store.GetStats().overflow_states, 1u);
}

// DecideAll is all-or-nothing over tracked and untracked items alike.
TEST(OnFullTest, DecideAllDeniesTheWholeRequestWhenANewKeyFindsNoRoom) {
  OneFullShard full(OnFull::kDeny);
  const MemoryStore::Item items[] = {{.limit = &full.limit, .limit_id = 1, .key = "tracked"},
                                     {.limit = &full.limit, .limit_id = 1, .key = "new"}};
  Decision out[2];
  EXPECT_FALSE(full.store.DecideAll(items, full.clock.NowMicros(), out));
  EXPECT_TRUE(out[0].allowed);
  EXPECT_EQ(out[0].remaining, 4) << "the tracked item's request was undone";
  EXPECT_FALSE(out[1].allowed);
  EXPECT_EQ(out[1].retry_after_us, MemoryStore::kNoRoomRetryAfterUs);
  EXPECT_EQ(full.store.Decide(full.limit, 1, "tracked", 0).remaining, 4);
  EXPECT_EQ(full.store.GetStats().no_room_denied, 1u);
}

TEST(OnFullTest, DecideAllUndoesWhatAnOverflowStateGaveWhenAnotherItemDenies) {
  OneFullShard full(OnFull::kShared);
  const Limit none{
      .algorithm = Algorithm::kFixedWindow, .requests = 0, .window_us = kMinute, .burst = {}};
  const MemoryStore::Item items[] = {{.limit = &full.limit, .limit_id = 1, .key = "new-a"},
                                     {.limit = &full.limit, .limit_id = 1, .key = "new-b"},
                                     {.limit = &none, .limit_id = 9, .key = "tracked"}};
  Decision out[3];
  EXPECT_FALSE(full.store.DecideAll(items, full.clock.NowMicros(), out));
  EXPECT_TRUE(out[0].allowed);
  EXPECT_EQ(out[0].remaining, 5) << "both new keys shared one overflow state, both undone";
  EXPECT_EQ(full.store.Decide(full.limit, 1, "new-c", 0).remaining, 5);
  // Admitted together, the two new keys take two of their shared overflow state's five.
  EXPECT_TRUE(full.store.DecideAll(std::span(items, 2), full.clock.NowMicros(), out));
  EXPECT_EQ(out[0].remaining, 4);
  EXPECT_EQ(out[1].remaining, 3);
  EXPECT_EQ(full.store.Decide(full.limit, 1, "new-d", 0).remaining, 3);
}

}  // namespace
}  // namespace sluice::store
