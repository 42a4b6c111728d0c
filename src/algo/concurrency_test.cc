// Tests for algo/concurrency.h with given times: at most N live holds, retry until the earliest
// expiry, release and renew of live holds only, and a crashed holder's slot back at its expiry.

#include "algo/concurrency.h"

#include <cstdint>
#include <set>

#include "gtest/gtest.h"
#include "tests/support/units.h"

namespace sluice::algo {
namespace {

using sluice::testing::kSecond;
using sluice::testing::kT0;

constexpr int64_t kHold = 30 * kSecond;  // max_hold

TEST(ConcurrencyTest, AtMostNHeldAtOnce) {
  ConcurrencyState s;
  const Acquired a = Acquire(s, kT0, 2, kHold);
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(a.remaining, 1);
  EXPECT_EQ(a.expires_us, kT0 + kHold);
  const Acquired b = Acquire(s, kT0 + kSecond, 2, kHold);
  ASSERT_TRUE(b.ok);
  EXPECT_EQ(b.remaining, 0);
  EXPECT_NE(a.id, b.id);
  const Acquired c = Acquire(s, kT0 + 2 * kSecond, 2, kHold);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.retry_after_us, kHold - 2 * kSecond);  // a's expiry, the earliest
  EXPECT_EQ(LiveHolds(s, kT0 + 2 * kSecond), 2u);
}

TEST(ConcurrencyTest, AReleaseGivesItsSlotBackOnce) {
  ConcurrencyState s;
  const Acquired a = Acquire(s, kT0, 1, kHold);
  EXPECT_FALSE(Acquire(s, kT0 + 1, 1, kHold).ok);
  EXPECT_TRUE(Release(s, a.id, kT0 + 2));
  EXPECT_FALSE(Release(s, a.id, kT0 + 3));  // released already
  EXPECT_FALSE(Release(s, 999, kT0 + 3));   // never given
  EXPECT_TRUE(Acquire(s, kT0 + 4, 1, kHold).ok);
}

TEST(ConcurrencyTest, ACrashedHoldersSlotComesBackAtItsExpiry) {
  ConcurrencyState s;
  const Acquired a = Acquire(s, kT0, 1, kHold);  // never released
  EXPECT_FALSE(Acquire(s, a.expires_us - 1, 1, kHold).ok);
  EXPECT_TRUE(s.IsIdle(a.expires_us));
  const Acquired b = Acquire(s, a.expires_us, 1, kHold);
  EXPECT_TRUE(b.ok);
  EXPECT_FALSE(Release(s, a.id, a.expires_us + 1));  // too late: it expired
  EXPECT_EQ(s.holds.size(), 1u);                     // the expired one is gone
}

TEST(ConcurrencyTest, RenewMovesALiveHoldsExpiryOn) {
  ConcurrencyState s;
  const Acquired a = Acquire(s, kT0, 1, kHold);
  EXPECT_EQ(Renew(s, a.id, kT0 + 20 * kSecond, kHold), kT0 + 50 * kSecond);
  EXPECT_FALSE(Acquire(s, kT0 + 40 * kSecond, 1, kHold).ok);  // still held past the first expiry
  EXPECT_EQ(Renew(s, a.id, kT0 + 50 * kSecond, kHold), std::nullopt);  // expired: not renewed
  EXPECT_EQ(Renew(s, 12345, kT0, kHold), std::nullopt);
  EXPECT_TRUE(Acquire(s, kT0 + 50 * kSecond, 1, kHold).ok);
}

TEST(ConcurrencyTest, ZeroAdmitsNothingEver) {
  ConcurrencyState s;
  const Acquired a = Acquire(s, kT0, 0, kHold);
  EXPECT_FALSE(a.ok);
  EXPECT_EQ(a.retry_after_us, -1);
}

TEST(ConcurrencyTest, HoldsNeverPassNOverAnyInterleaving) {
  // A seeded random run of acquires, releases and renewals: live holds never exceed N, and the
  // state never keeps more than N holds.
  ConcurrencyState s;
  std::set<uint64_t> mine;
  uint64_t x = 88172645463325252u;
  int64_t now = kT0;
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    now += static_cast<int64_t>(x % (3 * kSecond));
    switch (x % 3) {
      case 0:
        if (const Acquired a = Acquire(s, now, 5, kHold); a.ok) mine.insert(a.id);
        break;
      case 1:
        if (!mine.empty()) {
          Release(s, *mine.begin(), now);
          mine.erase(mine.begin());
        }
        break;
      default:
        if (!mine.empty()) Renew(s, *mine.rbegin(), now, kHold);
    }
    ASSERT_LE(LiveHolds(s, now), 5u);
    ASSERT_LE(s.holds.size(), 5u);
  }
}

}  // namespace
}  // namespace sluice::algo
