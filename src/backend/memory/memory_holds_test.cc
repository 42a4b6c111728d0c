// store::MemoryHolds (memory_holds.h): the holds of concurrency limits in this process. N holds
// per state, then a refusal until the earliest ends; all or none over several states; release
// and renew of live holds only; holds that end on their own; ids a state made again does not
// reuse; a store full of live states refuses a new one. Times are explicit now_us values.

#include "backend/memory/memory_holds.h"

#include <cstdint>
#include <string>
#include <vector>

#include "backend/holds.h"
#include "gtest/gtest.h"

namespace sluice::store {
namespace {

using backend::Acquisition;
using backend::Hold;
using backend::HoldRequest;

constexpr int64_t kHoldsSecondUs = 1'000'000;
constexpr int64_t kHoldsT0 = 1'700'000'000 * kHoldsSecondUs;

// MemoryHolds answers inline: these call it and return what `done` got.
Acquisition HoldsAcquire(MemoryHolds& holds, const std::vector<HoldRequest>& requests,
                         int64_t now_us) {
  Acquisition out;
  bool called = false;
  holds.Acquire(requests, now_us, [&](Acquisition a) {
    out = std::move(a);
    called = true;
  });
  EXPECT_TRUE(called);
  EXPECT_TRUE(out.status.ok()) << out.status;
  return out;
}

size_t HoldsRelease(MemoryHolds& holds, const std::vector<Hold>& list, int64_t now_us) {
  absl::StatusOr<size_t> out = absl::UnknownError("not called");
  holds.Release(list, now_us, [&](absl::StatusOr<size_t> n) { out = n; });
  EXPECT_TRUE(out.ok()) << out.status();
  return out.value_or(999);
}

size_t HoldsRenew(MemoryHolds& holds, const std::vector<Hold>& list, int64_t now_us) {
  absl::StatusOr<size_t> out = absl::UnknownError("not called");
  holds.Renew(list, now_us, [&](absl::StatusOr<size_t> n) { out = n; });
  EXPECT_TRUE(out.ok()) << out.status();
  return out.value_or(999);
}

HoldRequest HoldsReq(uint64_t limit_id, std::string_view key, uint64_t n, int64_t max_hold_us) {
  return {.limit_id = limit_id, .key = key, .n = n, .max_hold_us = max_hold_us};
}

TEST(MemoryHoldsTest, GivesNHoldsThenRefusesUntilTheEarliestEnds) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  const HoldRequest req = HoldsReq(7, "alice", 3, 10 * kHoldsSecondUs);
  for (int i = 0; i < 3; ++i) {
    const Acquisition a = HoldsAcquire(holds, {req}, t + 1000 * i);
    ASSERT_TRUE(a.ok) << i;
    ASSERT_EQ(a.holds.size(), 1u);
    EXPECT_EQ(a.holds[0].limit_id, 7u);
    EXPECT_EQ(a.holds[0].key, "alice");
    EXPECT_NE(a.holds[0].id, 0u);
    EXPECT_EQ(a.holds[0].max_hold_us, 10 * kHoldsSecondUs);
    EXPECT_EQ(a.holds[0].expires_us, t + 1000 * i + 10 * kHoldsSecondUs);
    EXPECT_EQ(a.remaining, 2 - i);
  }
  const Acquisition refused = HoldsAcquire(holds, {req}, t + 4000);
  EXPECT_FALSE(refused.ok);
  EXPECT_TRUE(refused.holds.empty());
  EXPECT_EQ(refused.refused, 0u);
  EXPECT_EQ(refused.retry_after_us, 10 * kHoldsSecondUs - 4000);  // the first ends at t + 10 s
  EXPECT_EQ(holds.LiveHolds(t + 4000), 3u);
  // Another key and another limit are states of their own.
  EXPECT_TRUE(HoldsAcquire(holds, {HoldsReq(7, "bob", 3, kHoldsSecondUs)}, t + 4000).ok);
  EXPECT_TRUE(HoldsAcquire(holds, {HoldsReq(8, "alice", 3, kHoldsSecondUs)}, t + 4000).ok);
  EXPECT_EQ(holds.LiveHolds(t + 4000), 5u);
}

TEST(MemoryHoldsTest, AllOrNoneGivesBackTheEarlierHoldsWhenOneRefuses) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  const HoldRequest first = HoldsReq(1, "k", 2, 5 * kHoldsSecondUs);
  const HoldRequest second = HoldsReq(2, "k", 1, 5 * kHoldsSecondUs);
  ASSERT_TRUE(HoldsAcquire(holds, {second}, t).ok);  // fills the second
  const Acquisition a = HoldsAcquire(holds, {first, second}, t + 100);
  EXPECT_FALSE(a.ok);
  EXPECT_TRUE(a.holds.empty());
  EXPECT_EQ(a.refused, 1u);
  EXPECT_EQ(a.retry_after_us, 5 * kHoldsSecondUs - 100);
  EXPECT_EQ(holds.LiveHolds(t + 100), 1u);  // only the second's own hold
  // The first's hold went back: it still gives its 2.
  EXPECT_TRUE(HoldsAcquire(holds, {first}, t + 200).ok);
  EXPECT_TRUE(HoldsAcquire(holds, {first}, t + 300).ok);
  EXPECT_FALSE(HoldsAcquire(holds, {first}, t + 400).ok);
  // The same state twice, with room for one: none taken.
  const HoldRequest single = HoldsReq(3, "k", 1, kHoldsSecondUs);
  const Acquisition twice = HoldsAcquire(holds, {single, single}, t + 500);
  EXPECT_FALSE(twice.ok);
  EXPECT_EQ(twice.refused, 1u);
  EXPECT_EQ(twice.retry_after_us, kHoldsSecondUs);
  EXPECT_TRUE(HoldsAcquire(holds, {single}, t + 600).ok);
}

TEST(MemoryHoldsTest, AllOrNoneTakesOneHoldPerRequestAndTheFewestRemaining) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  const Acquisition a = HoldsAcquire(
      holds, {HoldsReq(1, "a", 5, kHoldsSecondUs), HoldsReq(2, "b", 3, 2 * kHoldsSecondUs)}, t);
  ASSERT_TRUE(a.ok);
  ASSERT_EQ(a.holds.size(), 2u);
  EXPECT_EQ(a.holds[0].limit_id, 1u);
  EXPECT_EQ(a.holds[0].key, "a");
  EXPECT_EQ(a.holds[0].expires_us, t + kHoldsSecondUs);
  EXPECT_EQ(a.holds[1].limit_id, 2u);
  EXPECT_EQ(a.holds[1].key, "b");
  EXPECT_EQ(a.holds[1].expires_us, t + 2 * kHoldsSecondUs);
  EXPECT_EQ(a.remaining, 2);  // min(5 - 1, 3 - 1)
  EXPECT_EQ(holds.LiveHolds(t), 2u);
  EXPECT_EQ(HoldsRelease(holds, a.holds, t + 1), 2u);
  EXPECT_EQ(holds.LiveHolds(t + 1), 0u);
}

TEST(MemoryHoldsTest, ReleaseFreesASlotOnce) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  const HoldRequest req = HoldsReq(3, "k", 2, 10 * kHoldsSecondUs);
  const Acquisition a = HoldsAcquire(holds, {req}, t);
  const Acquisition b = HoldsAcquire(holds, {req}, t + 1);
  ASSERT_TRUE(a.ok && b.ok);
  EXPECT_NE(a.holds[0].id, b.holds[0].id);
  EXPECT_FALSE(HoldsAcquire(holds, {req}, t + 2).ok);
  EXPECT_EQ(HoldsRelease(holds, a.holds, t + 3), 1u);
  EXPECT_EQ(holds.LiveHolds(t + 3), 1u);
  EXPECT_EQ(HoldsRelease(holds, a.holds, t + 4), 0u);  // released already
  EXPECT_EQ(holds.LiveHolds(t + 4), 1u);               // b is untouched
  const Acquisition c = HoldsAcquire(holds, {req}, t + 5);
  EXPECT_TRUE(c.ok);
  EXPECT_FALSE(HoldsAcquire(holds, {req}, t + 6).ok);
  // A release of several counts the live ones only.
  EXPECT_EQ(HoldsRelease(holds, {a.holds[0], b.holds[0], c.holds[0]}, t + 7), 2u);
  EXPECT_EQ(holds.LiveHolds(t + 7), 0u);
  // A hold of a state never made: nothing to release.
  EXPECT_EQ(HoldsRelease(holds, {Hold{.limit_id = 99, .key = "x", .id = 1}}, t + 8), 0u);
}

TEST(MemoryHoldsTest, RenewMovesTheEndOfALiveHoldOnly) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  const int64_t s = kHoldsSecondUs;
  const HoldRequest req = HoldsReq(4, "k", 1, 10 * s);
  const Acquisition a = HoldsAcquire(holds, {req}, t);
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(HoldsRenew(holds, a.holds, t + 5 * s), 1u);  // now ends at t + 15 s
  // After its first end it is still live.
  EXPECT_EQ(holds.LiveHolds(t + 12 * s), 1u);
  const Acquisition refused = HoldsAcquire(holds, {req}, t + 12 * s);
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.retry_after_us, 3 * s);
  EXPECT_EQ(holds.LiveHolds(t + 15 * s - 1), 1u);
  EXPECT_EQ(holds.LiveHolds(t + 15 * s), 0u);
  // Ended: a renew does not bring it back.
  EXPECT_EQ(HoldsRenew(holds, a.holds, t + 20 * s), 0u);
  EXPECT_EQ(holds.LiveHolds(t + 20 * s), 0u);
  EXPECT_TRUE(HoldsAcquire(holds, {req}, t + 20 * s).ok);
  // A hold of a state never made: nothing to renew.
  EXPECT_EQ(
      HoldsRenew(holds, {Hold{.limit_id = 99, .key = "x", .id = 1, .max_hold_us = s}}, t + 20 * s),
      0u);
}

TEST(MemoryHoldsTest, HoldsEndOnTheirOwnAtTheirExpiry) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  const HoldRequest req = HoldsReq(5, "k", 1, 1000);
  const Acquisition a = HoldsAcquire(holds, {req}, t);
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(holds.LiveHolds(t + 999), 1u);
  const Acquisition refused = HoldsAcquire(holds, {req}, t + 999);
  EXPECT_FALSE(refused.ok);
  EXPECT_EQ(refused.retry_after_us, 1);
  EXPECT_EQ(holds.LiveHolds(t + 1000), 0u);  // now >= expires: ended
  const Acquisition again = HoldsAcquire(holds, {req}, t + 1000);
  EXPECT_TRUE(again.ok);
  EXPECT_EQ(again.remaining, 0);
  // The ended hold is no longer live: neither released nor renewed.
  EXPECT_EQ(HoldsRelease(holds, a.holds, t + 1001), 0u);
  EXPECT_EQ(HoldsRenew(holds, a.holds, t + 1001), 0u);
  EXPECT_EQ(holds.LiveHolds(t + 1001), 1u);  // `again`
  // Ended with no acquire since: neither renewed nor released, at its expiry already.
  const Acquisition b = HoldsAcquire(holds, {HoldsReq(5, "other", 2, 1000)}, t);
  ASSERT_TRUE(b.ok);
  EXPECT_EQ(HoldsRelease(holds, b.holds, t + 1000), 0u);
  EXPECT_EQ(HoldsRenew(holds, b.holds, t + 1000), 0u);
  const Acquisition c = HoldsAcquire(holds, {HoldsReq(5, "third", 2, 1000)}, t);
  ASSERT_TRUE(c.ok);
  EXPECT_EQ(HoldsRenew(holds, c.holds, t + 1000), 0u);
  EXPECT_EQ(holds.LiveHolds(t + 1000), 1u);  // `again`
}

TEST(MemoryHoldsTest, LiveHoldsCountsEveryStateAtNow) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  EXPECT_EQ(holds.LiveHolds(t), 0u);
  for (int i = 0; i < 4; ++i) {  // ending at t + 1 s, t + 2 s, t + 3 s, t + 4 s
    const std::string key = "key" + std::to_string(i);
    ASSERT_TRUE(HoldsAcquire(holds, {HoldsReq(i, key, 1, (i + 1) * kHoldsSecondUs)}, t).ok);
  }
  ASSERT_TRUE(HoldsAcquire(holds, {HoldsReq(0, "key0", 2, 10 * kHoldsSecondUs)}, t).ok);
  EXPECT_EQ(holds.LiveHolds(t), 5u);
  EXPECT_EQ(holds.LiveHolds(t + kHoldsSecondUs), 4u);
  EXPECT_EQ(holds.LiveHolds(t + 3 * kHoldsSecondUs), 2u);
  EXPECT_EQ(holds.LiveHolds(t + 4 * kHoldsSecondUs), 1u);
  EXPECT_EQ(holds.LiveHolds(t + 10 * kHoldsSecondUs), 0u);
}

TEST(MemoryHoldsTest, AStateMadeAgainGivesOtherIds) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  const HoldRequest req = HoldsReq(6, "k", 1, 10 * kHoldsSecondUs);
  const Acquisition old_hold = HoldsAcquire(holds, {req}, t);
  ASSERT_TRUE(old_hold.ok);
  EXPECT_EQ(HoldsRelease(holds, old_hold.holds, t + 1), 1u);  // idle: the state is dropped
  const Acquisition new_hold = HoldsAcquire(holds, {req}, t + 2);
  ASSERT_TRUE(new_hold.ok);
  EXPECT_NE(new_hold.holds[0].id, old_hold.holds[0].id);
  // A late release of the old lease does not free the new hold.
  EXPECT_EQ(HoldsRelease(holds, old_hold.holds, t + 3), 0u);
  EXPECT_EQ(holds.LiveHolds(t + 3), 1u);
  EXPECT_FALSE(HoldsAcquire(holds, {req}, t + 4).ok);
  EXPECT_EQ(HoldsRenew(holds, old_hold.holds, t + 5), 0u);
  EXPECT_EQ(HoldsRelease(holds, new_hold.holds, t + 6), 1u);
}

TEST(MemoryHoldsTest, AStateMadeAgainAfterItsHoldsEndedGivesOtherIds) {
  MemoryHolds holds;
  const int64_t t = kHoldsT0;
  const HoldRequest req = HoldsReq(6, "k", 1, 1000);
  const Acquisition old_hold = HoldsAcquire(holds, {req}, t);
  ASSERT_TRUE(old_hold.ok);
  // Ended on its own (the state is kept, its ids count on): the next hold is another id.
  const Acquisition new_hold = HoldsAcquire(holds, {req}, t + 2000);
  ASSERT_TRUE(new_hold.ok);
  EXPECT_NE(new_hold.holds[0].id, old_hold.holds[0].id);
  EXPECT_EQ(HoldsRelease(holds, old_hold.holds, t + 2001), 0u);
  EXPECT_EQ(holds.LiveHolds(t + 2001), 1u);
}

TEST(MemoryHoldsTest, AFullStoreRefusesANewStateUntilItsStatesEnd) {
  MemoryHolds holds(16);  // one state per shard
  const int64_t t = kHoldsT0;
  const int64_t s = kHoldsSecondUs;
  std::vector<std::string> keys;
  for (int i = 0; i < 64; ++i) keys.push_back("user" + std::to_string(i));
  // 16 shards of one state: among 17 new keys one finds its shard full (of live holds).
  std::vector<size_t> taken;
  size_t refused_key = keys.size();
  for (size_t i = 0; i < keys.size() && refused_key == keys.size(); ++i) {
    const Acquisition a = HoldsAcquire(holds, {HoldsReq(1, keys[i], 2, 10 * s)}, t);
    if (a.ok) {
      taken.push_back(i);
    } else {
      EXPECT_EQ(a.refused, 0u);
      EXPECT_EQ(a.retry_after_us, s);  // a full store: 1 s
      refused_key = i;
    }
  }
  ASSERT_LT(refused_key, keys.size());
  ASSERT_LE(taken.size(), 16u);
  ASSERT_FALSE(taken.empty());
  EXPECT_EQ(holds.LiveHolds(t), taken.size());  // the refused one took nothing
  // Still refused while they are live, even at its last µs.
  EXPECT_FALSE(HoldsAcquire(holds, {HoldsReq(1, keys[refused_key], 2, 10 * s)}, t + 10 * s - 1).ok);
  // A state already kept still gives holds.
  EXPECT_TRUE(HoldsAcquire(holds, {HoldsReq(1, keys[taken[0]], 2, 10 * s)}, t + 1).ok);
  EXPECT_EQ(holds.LiveHolds(t + 1), taken.size() + 1);
  // Once they ended, their idle states make room.
  const Acquisition later =
      HoldsAcquire(holds, {HoldsReq(1, keys[refused_key], 2, 10 * s)}, t + 10 * s + 1);
  EXPECT_TRUE(later.ok);
  EXPECT_EQ(holds.LiveHolds(t + 10 * s + 1), 1u);
}

TEST(MemoryHoldsTest, AFullStoreInAllOrNoneGivesBackTheEarlierHolds) {
  MemoryHolds holds(16);
  const int64_t t = kHoldsT0;
  const int64_t s = kHoldsSecondUs;
  // Fill the shards with live states, remembering the first key refused.
  std::string refused_key;
  std::string first_key;
  for (int i = 0; i < 64 && refused_key.empty(); ++i) {
    const std::string key = "u" + std::to_string(i);
    if (HoldsAcquire(holds, {HoldsReq(1, key, 5, 10 * s)}, t).ok) {
      if (first_key.empty()) first_key = key;
    } else {
      refused_key = key;
    }
  }
  ASSERT_FALSE(refused_key.empty());
  const uint64_t live = holds.LiveHolds(t);
  const Acquisition a = HoldsAcquire(
      holds, {HoldsReq(1, first_key, 5, 10 * s), HoldsReq(1, refused_key, 5, 10 * s)}, t + 1);
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.refused, 1u);
  EXPECT_EQ(a.retry_after_us, s);
  EXPECT_EQ(holds.LiveHolds(t + 1), live);  // first_key's hold went back
}

TEST(MemoryHoldsTest, SizeZeroRefusesForever) {
  MemoryHolds holds;
  const Acquisition a = HoldsAcquire(holds, {HoldsReq(9, "k", 0, kHoldsSecondUs)}, kHoldsT0);
  EXPECT_FALSE(a.ok);
  EXPECT_TRUE(a.holds.empty());
  EXPECT_EQ(a.refused, 0u);
  EXPECT_EQ(a.retry_after_us, -1);
  EXPECT_EQ(holds.LiveHolds(kHoldsT0), 0u);
  // Second of two: the first's hold goes back.
  const Acquisition b = HoldsAcquire(
      holds, {HoldsReq(9, "j", 1, kHoldsSecondUs), HoldsReq(9, "k", 0, kHoldsSecondUs)}, kHoldsT0);
  EXPECT_FALSE(b.ok);
  EXPECT_EQ(b.refused, 1u);
  EXPECT_EQ(b.retry_after_us, -1);
  EXPECT_EQ(holds.LiveHolds(kHoldsT0), 0u);
}

TEST(MemoryHoldsTest, NoRequestsIsOkWithNoHolds) {
  MemoryHolds holds;
  const Acquisition a = HoldsAcquire(holds, {}, kHoldsT0);
  EXPECT_TRUE(a.ok);
  EXPECT_TRUE(a.holds.empty());
}

}  // namespace
}  // namespace sluice::store
