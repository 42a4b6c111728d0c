// Tests for the limit helpers of sluice/limit.h: durations, algorithm names, validation, ids.

#include "sluice/limit.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kUs = 1;
constexpr int64_t kMs = 1000;
constexpr int64_t kSecond = 1000 * kMs;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int64_t kHour = 60 * kMinute;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kWeek = 7 * kDay;

std::string MessageOf(const absl::Status& status) { return std::string(status.message()); }

// --- ParseDuration ---------------------------------------------------------------------------

TEST(ParseDuration, AcceptsEveryUnit) {
  const struct {
    std::string_view text;
    int64_t us;
  } cases[] = {
      {"250ms", 250 * kMs}, {"1s", kSecond}, {"30s", 30 * kSecond}, {"5m", 5 * kMinute},
      {"1h", kHour},        {"1d", kDay},    {"1w", kWeek},         {"1500us", 1500 * kUs},
      {"1us", 1},           {"1ms", kMs},    {"7d", kWeek},         {"60m", kHour},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<int64_t> parsed = ParseDuration(c.text);
    ASSERT_TRUE(parsed.ok()) << c.text << ": " << parsed.status();
    EXPECT_EQ(*parsed, c.us) << c.text;
  }
}

TEST(ParseDuration, SumsSeveralTerms) {
  EXPECT_EQ(ParseDuration("1h30m").value(), kHour + 30 * kMinute);
  EXPECT_EQ(ParseDuration("1m30s").value(), 90 * kSecond);
  EXPECT_EQ(ParseDuration("1s500ms").value(), 1500 * kMs);
  EXPECT_EQ(ParseDuration("1w1d1h1m1s1ms1us").value(),
            kWeek + kDay + kHour + kMinute + kSecond + kMs + kUs);
}

TEST(ParseDuration, MinutesAreNotConfusedWithMilliseconds) {
  EXPECT_EQ(ParseDuration("5m").value(), 5 * kMinute);
  EXPECT_EQ(ParseDuration("5ms").value(), 5 * kMs);
  EXPECT_EQ(ParseDuration("5m5ms").value(), 5 * kMinute + 5 * kMs);
}

TEST(ParseDuration, AcceptsExactlyTheMaximumWindow) {
  // kMaxWindowUs is 10 * 366 days.
  EXPECT_EQ(ParseDuration("3660d").value(), kMaxWindowUs);
  EXPECT_EQ(ParseDuration(std::to_string(kMaxWindowUs) + "us").value(), kMaxWindowUs);
}

TEST(ParseDuration, RejectsMalformedText) {
  for (const std::string_view text :
       {"",    "0s", "0us", "0h0m", "10",   "10x",   "-1s",  "1.5s",  "s",    "ms",  " 1s",
        "1s ", "1S", "+1s", "1 s",  "1h30", "1s-1s", "1e3s", "0x10s", "1sec", "1mus"}) {
    const absl::StatusOr<int64_t> parsed = ParseDuration(text);
    EXPECT_FALSE(parsed.ok()) << "\"" << text << "\" parsed as " << parsed.value();
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
      EXPECT_THAT(MessageOf(parsed.status()), HasSubstr("duration")) << text;
    }
  }
}

TEST(ParseDuration, RejectsMoreThanTenYears) {
  EXPECT_FALSE(ParseDuration("3661d").ok());
  EXPECT_FALSE(ParseDuration("3660d1us").ok());
  EXPECT_FALSE(ParseDuration(std::to_string(kMaxWindowUs + 1) + "us").ok());
  EXPECT_FALSE(ParseDuration("1000w").ok());
  // Numbers that overflow 64 bits, alone or once multiplied by the unit, are errors too.
  EXPECT_FALSE(ParseDuration("99999999999999999999999s").ok());
  EXPECT_FALSE(ParseDuration("18446744073709551615w").ok());
  EXPECT_FALSE(ParseDuration("18446744073709551615us").ok());
  const absl::StatusOr<int64_t> parsed = ParseDuration("11000d");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(MessageOf(parsed.status()), HasSubstr("10 years"));
}

// --- FormatDuration --------------------------------------------------------------------------

TEST(FormatDuration, UsesTheLargestExactUnit) {
  EXPECT_EQ(FormatDuration(1500 * kMs), "1500ms");
  EXPECT_EQ(FormatDuration(kMinute), "1m");
  EXPECT_EQ(FormatDuration(90 * kMinute), "90m");
  EXPECT_EQ(FormatDuration(kWeek), "1w");
  EXPECT_EQ(FormatDuration(2 * kDay), "2d");
  EXPECT_EQ(FormatDuration(250 * kMs), "250ms");
  EXPECT_EQ(FormatDuration(1), "1us");
  EXPECT_EQ(FormatDuration(1500), "1500us");
  EXPECT_EQ(FormatDuration(0), "0us");
  EXPECT_EQ(FormatDuration(3650 * kDay), "3650d");  // 521 weeks and 3 days
  EXPECT_EQ(FormatDuration(123456789 * kMinute), "123456789m");
  EXPECT_EQ(FormatDuration(kMaxWindowUs), "3660d");
}

TEST(FormatDuration, RoundTripsThroughParseDuration) {
  for (const int64_t us :
       {int64_t{1}, int64_t{7}, int64_t{999}, kMs, 1500 * kUs, 250 * kMs, kSecond, 30 * kSecond,
        5 * kMinute, kHour, kHour + 30 * kMinute, kDay, kWeek, 3 * kWeek + 1, int64_t{8571428},
        kMaxWindowUs - 1, kMaxWindowUs}) {
    const std::string text = FormatDuration(us);
    const absl::StatusOr<int64_t> parsed = ParseDuration(text);
    ASSERT_TRUE(parsed.ok()) << us << " -> " << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, us) << text;
  }
  for (const std::string_view text : {"250ms", "1s", "30s", "5m", "1h", "1d", "1w", "1500us"}) {
    EXPECT_EQ(FormatDuration(ParseDuration(text).value()), text);
  }
}

// --- Algorithm names -------------------------------------------------------------------------

TEST(ParseAlgorithm, AcceptsEveryCanonicalName) {
  for (const Algorithm algorithm :
       {Algorithm::kTokenBucket, Algorithm::kLeakyBucket, Algorithm::kFixedWindow,
        Algorithm::kSlidingLog, Algorithm::kSlidingWindow}) {
    const std::string_view name = AlgorithmName(algorithm);
    const absl::StatusOr<Algorithm> parsed = ParseAlgorithm(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(*parsed, algorithm) << name;
  }
  EXPECT_EQ(AlgorithmName(Algorithm::kTokenBucket), "token_bucket");
  EXPECT_EQ(AlgorithmName(Algorithm::kLeakyBucket), "leaky_bucket");
  EXPECT_EQ(AlgorithmName(Algorithm::kFixedWindow), "fixed_window");
  EXPECT_EQ(AlgorithmName(Algorithm::kSlidingLog), "sliding_log");
  EXPECT_EQ(AlgorithmName(Algorithm::kSlidingWindow), "sliding_window");
}

TEST(ParseAlgorithm, GcraIsAnAliasOfTokenBucket) {
  EXPECT_EQ(ParseAlgorithm("gcra").value(), Algorithm::kTokenBucket);
  EXPECT_EQ(AlgorithmName(ParseAlgorithm("gcra").value()), "token_bucket");
}

TEST(ParseAlgorithm, UnknownNameIsAnErrorListingTheKnownNames) {
  for (const std::string_view name :
       {"", "token-bucket", "TOKEN_BUCKET", "Token_Bucket", "token_bucket ", "leaky", "sliding"}) {
    const absl::StatusOr<Algorithm> parsed = ParseAlgorithm(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message = MessageOf(parsed.status());
    for (const char* known : {"token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_log",
                              "sliding_window"}) {
      EXPECT_THAT(message, HasSubstr(known)) << name;
    }
  }
  EXPECT_THAT(MessageOf(ParseAlgorithm("bogus").status()), HasSubstr("bogus"));
}

// --- ValidateLimit ---------------------------------------------------------------------------

using testing::MakeLimit;

constexpr Algorithm kAllAlgorithms[] = {Algorithm::kTokenBucket, Algorithm::kLeakyBucket,
                                        Algorithm::kFixedWindow, Algorithm::kSlidingLog,
                                        Algorithm::kSlidingWindow};

TEST(ValidateLimit, AcceptsOrdinaryLimits) {
  for (const Algorithm algorithm : kAllAlgorithms) {
    EXPECT_TRUE(ValidateLimit(MakeLimit(algorithm, 10, kSecond)).ok()) << AlgorithmName(algorithm);
    EXPECT_TRUE(ValidateLimit(MakeLimit(algorithm, 7, kMinute, 3)).ok());
    EXPECT_TRUE(ValidateLimit(MakeLimit(algorithm, 1, 1)).ok());
  }
}

TEST(ValidateLimit, ZeroRequestsIsValid) {
  for (const Algorithm algorithm : kAllAlgorithms) {
    EXPECT_TRUE(ValidateLimit(MakeLimit(algorithm, 0, kSecond)).ok()) << AlgorithmName(algorithm);
  }
}

TEST(ValidateLimit, RequestsAboveUint32AreInvalid) {
  for (const Algorithm algorithm : kAllAlgorithms) {
    EXPECT_TRUE(ValidateLimit(MakeLimit(algorithm, kMaxRequests, kSecond)).ok())
        << AlgorithmName(algorithm);
    const absl::Status status = ValidateLimit(MakeLimit(algorithm, kMaxRequests + 1, kSecond));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << AlgorithmName(algorithm);
    EXPECT_THAT(MessageOf(status), HasSubstr("requests"));
  }
  EXPECT_EQ(kMaxRequests, uint64_t{4294967295});
}

TEST(ValidateLimit, WindowMustBeBetweenOneMicrosecondAndTheMaximum) {
  for (const Algorithm algorithm : kAllAlgorithms) {
    for (const int64_t bad : {int64_t{0}, int64_t{-1}, kMaxWindowUs + 1, INT64_MAX}) {
      const absl::Status status = ValidateLimit(MakeLimit(algorithm, 10, bad));
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
          << AlgorithmName(algorithm) << " window " << bad;
      EXPECT_THAT(MessageOf(status), HasSubstr("window"));
    }
    EXPECT_TRUE(ValidateLimit(MakeLimit(algorithm, 10, 1)).ok());
    EXPECT_TRUE(ValidateLimit(MakeLimit(algorithm, 10, kMaxWindowUs)).ok());
  }
}

TEST(ValidateLimit, BurstAboveUint32IsInvalid) {
  for (const Algorithm algorithm : kAllAlgorithms) {
    const absl::Status status =
        ValidateLimit(MakeLimit(algorithm, kMaxRequests, kSecond, kMaxBurst + 1));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << AlgorithmName(algorithm);
    EXPECT_THAT(MessageOf(status), HasSubstr("burst"));
  }
  EXPECT_TRUE(
      ValidateLimit(MakeLimit(Algorithm::kTokenBucket, kMaxRequests, kSecond, kMaxBurst)).ok());
  EXPECT_TRUE(
      ValidateLimit(MakeLimit(Algorithm::kLeakyBucket, kMaxRequests, kSecond, kMaxBurst)).ok());
}

TEST(ValidateLimit, TokenBucketBurstZeroIsInvalid) {
  const absl::Status status = ValidateLimit(MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 0));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(status), HasSubstr("burst"));
  EXPECT_TRUE(ValidateLimit(MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 1)).ok());
}

TEST(ValidateLimit, LeakyBucketBurstZeroIsValid) {
  EXPECT_TRUE(ValidateLimit(MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 0)).ok());
}

TEST(ValidateLimit, WindowAlgorithmsIgnoreBurstZero) {
  for (const Algorithm algorithm :
       {Algorithm::kFixedWindow, Algorithm::kSlidingLog, Algorithm::kSlidingWindow}) {
    EXPECT_TRUE(ValidateLimit(MakeLimit(algorithm, 10, kSecond, 0)).ok())
        << AlgorithmName(algorithm);
  }
}

TEST(ValidateLimit, BucketDrainTimeIsBoundedBy2To60Microseconds) {
  // Capacity * W / N must not exceed 2^60 µs: exactly 2^60 is fine, one more is not.
  constexpr int64_t kWindow = int64_t{1} << 40;  // ~12.7 days
  EXPECT_TRUE(
      ValidateLimit(MakeLimit(Algorithm::kTokenBucket, 1, kWindow, uint64_t{1} << 20)).ok());
  const absl::Status too_slow =
      ValidateLimit(MakeLimit(Algorithm::kTokenBucket, 1, kWindow, (uint64_t{1} << 20) + 1));
  EXPECT_EQ(too_slow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(too_slow), HasSubstr("burst"));

  // leaky_bucket's capacity is B + 1.
  EXPECT_TRUE(
      ValidateLimit(MakeLimit(Algorithm::kLeakyBucket, 1, kWindow, (uint64_t{1} << 20) - 1)).ok());
  EXPECT_FALSE(
      ValidateLimit(MakeLimit(Algorithm::kLeakyBucket, 1, kWindow, uint64_t{1} << 20)).ok());

  // Without a burst the token bucket drains in exactly W, which is always fine.
  EXPECT_TRUE(ValidateLimit(MakeLimit(Algorithm::kTokenBucket, 1, kMaxWindowUs)).ok());
  EXPECT_TRUE(
      ValidateLimit(MakeLimit(Algorithm::kTokenBucket, kMaxRequests, kMaxWindowUs, kMaxBurst))
          .ok());
  // The largest burst with the slowest rate is not.
  EXPECT_FALSE(ValidateLimit(MakeLimit(Algorithm::kTokenBucket, 1, kMaxWindowUs, kMaxBurst)).ok());
  EXPECT_FALSE(ValidateLimit(MakeLimit(Algorithm::kLeakyBucket, 1, kMaxWindowUs, kMaxBurst)).ok());

  // N == 0 never refills and has no drain time to bound.
  EXPECT_TRUE(ValidateLimit(MakeLimit(Algorithm::kTokenBucket, 0, kMaxWindowUs, kMaxBurst)).ok());
  // The window algorithms ignore the burst, so there is no drain bound for them.
  EXPECT_TRUE(ValidateLimit(MakeLimit(Algorithm::kFixedWindow, 1, kMaxWindowUs, kMaxBurst)).ok());
}

// --- LimitId ---------------------------------------------------------------------------------

TEST(LimitId, EqualLimitsHaveEqualIds) {
  const Limit a = MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 20);
  const Limit b =
      MakeLimit(ParseAlgorithm("gcra").value(), 10, ParseDuration("1000ms").value(), uint64_t{20});
  ASSERT_EQ(a, b);
  EXPECT_EQ(LimitId(a), LimitId(b));
  EXPECT_EQ(LimitId(MakeLimit(Algorithm::kSlidingLog, 3, 10 * kSecond)),
            LimitId(MakeLimit(Algorithm::kSlidingLog, 3, 10 * kSecond)));
}

TEST(LimitId, DiffersWhenAnyFieldDiffers) {
  const Limit base = MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 20);
  const uint64_t id = LimitId(base);
  for (const Algorithm algorithm : {Algorithm::kLeakyBucket, Algorithm::kFixedWindow,
                                    Algorithm::kSlidingLog, Algorithm::kSlidingWindow}) {
    Limit other = base;
    other.algorithm = algorithm;
    EXPECT_NE(LimitId(other), id) << AlgorithmName(algorithm);
  }
  Limit other = base;
  other.requests = 11;
  EXPECT_NE(LimitId(other), id);
  other = base;
  other.window_us = kSecond + 1;
  EXPECT_NE(LimitId(other), id);
  other = base;
  other.burst = 21;
  EXPECT_NE(LimitId(other), id);
  other = base;
  other.burst = std::nullopt;  // capacity 10 instead of 20
  EXPECT_NE(LimitId(other), id);
  // Swapping N and B must not collide either.
  EXPECT_NE(LimitId(MakeLimit(Algorithm::kTokenBucket, 20, kSecond, 10)), id);
}

// --- Limit::Capacity -------------------------------------------------------------------------

TEST(LimitCapacity, TokenBucketIsTheBurstOrN) {
  EXPECT_EQ(MakeLimit(Algorithm::kTokenBucket, 10, kSecond).Capacity(), 10u);
  EXPECT_EQ(MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 25).Capacity(), 25u);
  EXPECT_EQ(MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 1).Capacity(), 1u);
  EXPECT_EQ(MakeLimit(Algorithm::kTokenBucket, kMaxRequests, kSecond).Capacity(), kMaxRequests);
}

TEST(LimitCapacity, LeakyBucketIsTheQueueDepthPlusOne) {
  EXPECT_EQ(MakeLimit(Algorithm::kLeakyBucket, 10, kSecond).Capacity(), 1u);
  EXPECT_EQ(MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 0).Capacity(), 1u);
  EXPECT_EQ(MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, 5).Capacity(), 6u);
  EXPECT_EQ(MakeLimit(Algorithm::kLeakyBucket, 10, kSecond, kMaxBurst).Capacity(), kMaxBurst + 1);
}

TEST(LimitCapacity, WindowAlgorithmsAreNAndIgnoreTheBurst) {
  for (const Algorithm algorithm :
       {Algorithm::kFixedWindow, Algorithm::kSlidingLog, Algorithm::kSlidingWindow}) {
    EXPECT_EQ(MakeLimit(algorithm, 10, kSecond).Capacity(), 10u) << AlgorithmName(algorithm);
    EXPECT_EQ(MakeLimit(algorithm, 10, kSecond, 50).Capacity(), 10u) << AlgorithmName(algorithm);
    EXPECT_EQ(MakeLimit(algorithm, 0, kSecond).Capacity(), 0u) << AlgorithmName(algorithm);
  }
}

// --- DescribeLimit ---------------------------------------------------------------------------

TEST(DescribeLimit, SpellsRateAlgorithmAndBurst) {
  EXPECT_EQ(DescribeLimit(MakeLimit(Algorithm::kTokenBucket, 10, kSecond, 20)),
            "10/1s token_bucket burst=20");
  EXPECT_EQ(DescribeLimit(MakeLimit(Algorithm::kSlidingWindow, 50, kMinute)),
            "50/1m sliding_window");
}

}  // namespace
}  // namespace sluice
