// The buckets of algo/algorithms.h, token_bucket and leaky_bucket: the worked examples of issue #3
// and of docs/algorithms.md, "Worked examples" (cited by heading), refills, capacity, costs and
// delays; and rates that are no whole number of µs per request, kept exact over thousands of
// requests. Times are µs from kT0 (algorithms_testing.h).

#include <cstdint>
#include <string>

#include "algo/algorithms.h"
#include "algo/algorithms_testing.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"

namespace sluice::algo {
namespace {

__extension__ using Int128 = __int128;
using test::Allow;
using test::Decide;
using test::Deny;
using test::EveryAlgorithm;
using test::KeyState;
using test::kMinute;
using test::kMs;
using test::kNever;
using test::kSecond;
using test::kT0;
using testing::MakeLimit;
using testing::WithCapacity;

// ============================================================================================
// token_bucket
// ============================================================================================

// "Token bucket: capacity 5, 1 per second": B = 5, r = 1/s, full at t = 0.
TEST(TokenBucket, WorkedExampleFromAlgorithmsDoc) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1, kSecond, 5);
  KeyState s;
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(5 - i, i * kSecond)) << "request #" << i;
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, kSecond, 5 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 500 * kMs, limit, 1), Deny(0, 500 * kMs, 4500 * kMs));
  EXPECT_EQ(Decide(s, kT0 + kSecond, limit, 1), Allow(0, 5 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 4 * kSecond, limit, 2), Allow(1, 4 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 4 * kSecond, limit, 6), Deny(1, kNever, 4 * kSecond));
}

TEST(TokenBucket, GcraAliasIsTheSameAlgorithm) {
  const Limit limit = MakeLimit(ParseAlgorithm("gcra").value(), 1, kSecond, 5);
  KeyState s;
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(Decide(s, kT0, limit, 1).allowed);
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, kSecond, 5 * kSecond));
}

TEST(TokenBucket, NewKeyStartsFullWithCapacityN) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 10, kSecond);
  KeyState s;
  for (int i = 1; i <= 10; ++i) {
    EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(10 - i, int64_t{i} * 100 * kMs)) << "request #" << i;
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, 100 * kMs, kSecond));
}

TEST(TokenBucket, RefillIsCappedAtCapacity) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 3);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 3), Allow(0, 300 * kMs));
  // An hour later the bucket holds 3 tokens, not 36000.
  const int64_t later = kT0 + 3600 * kSecond;
  EXPECT_EQ(Decide(s, later, limit, 3), Allow(0, 300 * kMs));
  EXPECT_EQ(Decide(s, later, limit, 1), Deny(0, 100 * kMs, 300 * kMs));
}

TEST(TokenBucket, RemainingIsTheFloorOfTheTokens) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 1, kSecond, 5);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 5), Allow(0, 5 * kSecond));
  // 1.999999 tokens: remaining 1, a cost of 2 waits 1 µs.
  EXPECT_EQ(Decide(s, kT0 + 2 * kSecond - 1, limit, 2), Deny(1, 1, 3 * kSecond + 1));
  EXPECT_EQ(Decide(s, kT0 + 2 * kSecond, limit, 2), Allow(0, 5 * kSecond));
}

TEST(TokenBucket, CostAboveOneWaitsForEnoughTokens) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 4, kSecond, 8);  // T = 250 ms
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 7), Allow(1, 1750 * kMs));
  // 1 token left; a cost of 4 needs 3 more: 750 ms.
  EXPECT_EQ(Decide(s, kT0, limit, 4), Deny(1, 750 * kMs, 1750 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 750 * kMs - 1, limit, 4).allowed, false);
  EXPECT_EQ(Decide(s, kT0 + 750 * kMs, limit, 4), Allow(0, 2 * kSecond));
  // A cost equal to the capacity is admitted only from a full bucket.
  EXPECT_EQ(Decide(s, kT0 + 750 * kMs, limit, 8), Deny(0, 2 * kSecond, 2 * kSecond));
  EXPECT_EQ(Decide(s, kT0 + 2750 * kMs, limit, 8), Allow(0, 2 * kSecond));
}

// ============================================================================================
// leaky_bucket
// ============================================================================================

// Issue #3: N = 10/s, B = 5, seven requests at t = 0.
TEST(LeakyBucket, WorkedExampleFromIssue) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 5);
  KeyState s;
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(Decide(s, kT0, limit, 1),
              Allow(5 - i, (int64_t{i} + 1) * 100 * kMs, int64_t{i} * 100 * kMs))
        << "request #" << i + 1;
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, 100 * kMs, 600 * kMs));
}

// "Leaky bucket: nginx `limit_req`", `rate=1r/s burst=5` x7 (without nodelay).
TEST(LeakyBucket, NginxBurstDelaysEveryExcessRequestToItsSlot) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 1, kSecond, 5);
  KeyState s;
  for (int i = 0; i < 6; ++i) {
    const Decision d = Decide(s, kT0, limit, 1);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.delay_us, i * kSecond);
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, kSecond, 6 * kSecond));
}

// "Leaky bucket: nginx `limit_req`", `rate=10r/s` (burst 0) at t = 0, 50, 100 ms.
TEST(LeakyBucket, NginxWithoutBurstAdmitsOnePerEmissionInterval) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1), Allow(0, 100 * kMs, 0));
  EXPECT_EQ(Decide(s, kT0 + 50 * kMs, limit, 1), Deny(0, 50 * kMs, 50 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs, limit, 1), Allow(0, 100 * kMs, 0));
}

TEST(LeakyBucket, CapacityIsQueueDepthPlusOne) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 5);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 7), Deny(6, kNever, 0));
  EXPECT_EQ(Decide(s, kT0, limit, 6), Allow(0, 600 * kMs, 0));
  // The request of cost 6 occupies slots 0..500 ms, so a cost of 1 waits for slot 600 ms:
  // admitted once its wait (600 ms - elapsed) is at most B*T = 500 ms.
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs - 1, limit, 1), Deny(0, 1, 500 * kMs + 1));
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs, limit, 1), Allow(0, 600 * kMs, 500 * kMs));
}

TEST(LeakyBucket, CostAboveOneIsDelayedByTheQueueAheadOfIt) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 5);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 2), Allow(4, 200 * kMs, 0));
  EXPECT_EQ(Decide(s, kT0, limit, 3), Allow(1, 500 * kMs, 200 * kMs));
  // wait 500 ms + (2 - 1) * 100 ms > 500 ms: denied, admitted after 100 ms.
  EXPECT_EQ(Decide(s, kT0, limit, 2), Deny(1, 100 * kMs, 500 * kMs));
  EXPECT_EQ(Decide(s, kT0 + 100 * kMs, limit, 2), Allow(0, 600 * kMs, 400 * kMs));
}

TEST(LeakyBucket, DelayIsZeroOnDenyAndOnAnEmptyQueue) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 1);
  KeyState s;
  EXPECT_EQ(Decide(s, kT0, limit, 1).delay_us, 0);
  EXPECT_EQ(Decide(s, kT0, limit, 1).delay_us, 100 * kMs);
  const Decision denied = Decide(s, kT0, limit, 1);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.delay_us, 0);
  // After the queue drained, no delay again.
  EXPECT_EQ(Decide(s, kT0 + 200 * kMs, limit, 1), Allow(1, 100 * kMs, 0));
}

// The two buckets: the window algorithms have no rate.
class EveryBucket : public EveryAlgorithm {};

INSTANTIATE_TEST_SUITE_P(All, EveryBucket,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kLeakyBucket),
                         [](const ::testing::TestParamInfo<Algorithm>& info) {
                           return std::string(AlgorithmName(info.param));
                         });

struct Rate {
  uint64_t n;
  int64_t w;
};

constexpr Rate kNonIntegralRates[] = {
    {7, kMinute}, {13, kSecond}, {3, kMs}, {1000003, 7 * kSecond}};

// For the buckets with capacity 2, driving a key as fast as it allows (retrying exactly when
// told) admits the k-th request after the initial burst at exactly t0 + ceil(k * W / N): the
// tokens never reach the capacity, so nothing is lost, and there is no drift from rounding even
// after thousands of requests at a rate whose emission interval is not a whole number of µs.
TEST_P(EveryBucket, NonIntegralRatesStayExactOverThousandsOfRequests) {
  for (const Rate& rate : kNonIntegralRates) {
    const Limit limit = WithCapacity(algorithm(), rate.n, rate.w, 2);
    ASSERT_TRUE(ValidateLimit(limit).ok());
    const std::string name = DescribeLimit(limit);
    KeyState s;
    ASSERT_TRUE(Decide(s, kT0, limit, 1).allowed);
    ASSERT_TRUE(Decide(s, kT0, limit, 1).allowed);
    int64_t t = kT0;
    for (int64_t k = 1; k <= 7000; ++k) {
      const Int128 exact_num = static_cast<Int128>(k) * rate.w;  // k*W/N, rounded up
      const int64_t due = kT0 + static_cast<int64_t>((exact_num + rate.n - 1) / rate.n);
      const Decision d = Decide(s, t, limit, 1);
      ASSERT_FALSE(d.allowed) << name << " request " << k;
      ASSERT_EQ(t + d.retry_after_us, due) << name << " request " << k;
      ASSERT_FALSE(Decide(s, due - 1, limit, 1).allowed) << name << " request " << k;
      t = due;
      ASSERT_TRUE(Decide(s, t, limit, 1).allowed) << name << " request " << k;
    }
  }
}

// With capacity 1 the bucket is full again at the exact instant t + W/N, and the refill beyond
// the capacity is lost while the next request waits for the next whole µs: one admission every
// ceil(W/N) µs.
TEST_P(EveryBucket, CapacityOneAdmitsOnePerEmissionIntervalRoundedUp) {
  for (const Rate& rate : kNonIntegralRates) {
    const Limit limit = WithCapacity(algorithm(), rate.n, rate.w, 1);
    const int64_t period =
        (rate.w + static_cast<int64_t>(rate.n) - 1) / static_cast<int64_t>(rate.n);
    KeyState s;
    for (int64_t t = kT0; t < kT0 + 3000 * period; t += period) {
      ASSERT_TRUE(Decide(s, t, limit, 1).allowed) << DescribeLimit(limit) << " at " << t - kT0;
      ASSERT_EQ(Decide(s, t, limit, 1).retry_after_us, period) << DescribeLimit(limit);
    }
  }
}

TEST(LeakyBucket, NonIntegralRateDelaysAreExactForTenThousandQueuedRequests) {
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket, 7, kMinute, 10000);
  KeyState s;
  for (int64_t k = 0; k <= 10000; ++k) {
    const Decision d = Decide(s, kT0, limit, 1);
    ASSERT_TRUE(d.allowed) << k;
    ASSERT_EQ(d.delay_us, (k * kMinute + 6) / 7) << k;  // ceil(k * 8571428.571 µs)
    ASSERT_EQ(d.remaining, 10000 - k) << k;
    ASSERT_EQ(d.reset_after_us, ((k + 1) * kMinute + 6) / 7) << k;
  }
  EXPECT_EQ(Decide(s, kT0, limit, 1), Deny(0, (kMinute + 6) / 7, (10001 * kMinute + 6) / 7));
}

}  // namespace
}  // namespace sluice::algo
