// sluice::ConcurrencyLimiter on memory (a manual clock) and on a real redis-server: N holds, the
// guard that gives its slot back, renewals, holds that end on their own, and what Create refuses.

#include "sluice/concurrency_limiter.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "tests/support/redis_server.h"
#include "tests/support/units.h"

namespace sluice {
namespace {

using sluice::testing::kSecond;
constexpr int64_t kHoldsT0 = int64_t{1700000000} * kSecond;

std::unique_ptr<ConcurrencyLimiter> MakeHolds(const RateLimiter::Options& options, uint64_t n,
                                              int64_t max_hold_us) {
  auto limiter = ConcurrencyLimiter::Create(n, max_hold_us, options);
  EXPECT_TRUE(limiter.ok()) << limiter.status();
  return limiter.ok() ? std::move(*limiter) : nullptr;
}

ConcurrencyLimiter::Hold MustAcquire(ConcurrencyLimiter& limiter, std::string_view key) {
  absl::StatusOr<ConcurrencyLimiter::Hold> hold = limiter.Acquire(key);
  EXPECT_TRUE(hold.ok()) << hold.status();
  return hold.ok() ? std::move(*hold) : ConcurrencyLimiter::Hold{};
}

TEST(ConcurrencyLimiterTest, NHoldsThenRefusedUntilAGuardGoes) {
  ManualClock clock(kHoldsT0);
  RateLimiter::Options options;
  options.clock = &clock;
  auto limiter = MakeHolds(options, 2, 10 * kSecond);
  ASSERT_TRUE(limiter);
  ConcurrencyLimiter::Hold a = MustAcquire(*limiter, "acme");
  EXPECT_TRUE(a.held());
  EXPECT_EQ(a.remaining(), 1);
  {
    ConcurrencyLimiter::Hold b = MustAcquire(*limiter, "acme");
    EXPECT_TRUE(b.held());
    clock.Advance(3 * kSecond);
    const ConcurrencyLimiter::Hold refused = MustAcquire(*limiter, "acme");
    EXPECT_FALSE(refused.held());
    EXPECT_EQ(refused.retry_after_us(), 7 * kSecond);    // until `a` ends
    EXPECT_TRUE(MustAcquire(*limiter, "other").held());  // (and gone again at once)
  }                                                      // b's slot back
  ConcurrencyLimiter::Hold c = MustAcquire(*limiter, "acme");
  EXPECT_TRUE(c.held());
  // Moved: one slot, one owner.
  ConcurrencyLimiter::Hold moved = std::move(c);
  EXPECT_FALSE(c.held());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_TRUE(moved.held());
  EXPECT_FALSE(MustAcquire(*limiter, "acme").held());
  moved.Release();
  EXPECT_FALSE(moved.held());
  EXPECT_TRUE(MustAcquire(*limiter, "acme").held());
}

TEST(ConcurrencyLimiterTest, HoldsEndOnTheirOwnUnlessRenewed) {
  ManualClock clock(kHoldsT0);
  RateLimiter::Options options;
  options.clock = &clock;
  auto limiter = MakeHolds(options, 1, 10 * kSecond);
  ASSERT_TRUE(limiter);
  ConcurrencyLimiter::Hold a = MustAcquire(*limiter, "acme");
  clock.Advance(8 * kSecond);
  EXPECT_TRUE(a.Renew().ok());  // now ends at +18 s
  clock.Advance(9 * kSecond);
  EXPECT_FALSE(MustAcquire(*limiter, "acme").held());
  clock.Advance(1 * kSecond);  // +18 s: ended
  EXPECT_EQ(a.Renew().code(), absl::StatusCode::kNotFound);
  ConcurrencyLimiter::Hold b = MustAcquire(*limiter, "acme");
  EXPECT_TRUE(b.held());
  a.Release();  // a late release of the ended hold frees nothing of b's
  EXPECT_FALSE(MustAcquire(*limiter, "acme").held());
  ConcurrencyLimiter::Hold none;
  EXPECT_EQ(none.Renew().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ConcurrencyLimiterTest, CreateRefusesNoMaxHoldAndTooLargeAnN) {
  EXPECT_EQ(ConcurrencyLimiter::Create(1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConcurrencyLimiter::Create(kMaxRequests + 1, kSecond).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto zero = MakeHolds(RateLimiter::Options{}, 0, kSecond);
  ASSERT_TRUE(zero);
  EXPECT_EQ(MustAcquire(*zero, "k").retry_after_us(), -1);
}

// On Redis, two limiters of one name share the holds of a key, as processes do; a guard of one
// gives its slot back for the other.
TEST(ConcurrencyLimiterTest, OnRedisLimitersOfOneNameShareTheirHolds) {
  testing::RedisServer server;
  RateLimiter::Options options;
  options.name = "reports";
  options.redis.emplace();
  options.redis->url = server.url();
  options.redis->timeout_us = 2000000;
  auto a = MakeHolds(options, 2, 10 * kSecond);
  auto b = MakeHolds(options, 2, 10 * kSecond);
  ASSERT_TRUE(a && b);
  ConcurrencyLimiter::Hold first = MustAcquire(*a, "acme");
  std::vector<ConcurrencyLimiter::Hold> kept;
  kept.push_back(MustAcquire(*b, "acme"));
  EXPECT_TRUE(first.held() && kept.back().held());
  const ConcurrencyLimiter::Hold refused = MustAcquire(*b, "acme");
  EXPECT_FALSE(refused.held());
  EXPECT_GT(refused.retry_after_us(), 9 * kSecond);
  EXPECT_TRUE(first.Renew().ok());
  kept.clear();  // b's hold given back
  EXPECT_TRUE(MustAcquire(*a, "acme").held());
}

}  // namespace
}  // namespace sluice
