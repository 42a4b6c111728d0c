// sluice::RateLimiter on the memory backend, with a manual clock: several limits decided
// all-or-nothing, refunds, peeks, resets, and what Create refuses.

#include "sluice/rate_limiter.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"
#include "tests/support/units.h"

namespace sluice {
namespace {

using sluice::testing::kDay;
using sluice::testing::kSecond;
// Mid-day and mid-second, so that no window ends during a test unless it advances the clock.
constexpr int64_t kMiddayT0 = int64_t{1700000000} / 86400 * kDay + kDay / 2 + 250000;

using testing::FixedWindow;

// 2 per second and 5 per day, both fixed windows: the second limit binds first.
const Limit kPerSecond = FixedWindow(2, kSecond);
const Limit kPerDay = FixedWindow(5, kDay);

class RateLimiterTest : public ::testing::Test {
 protected:
  std::unique_ptr<RateLimiter> Make(std::vector<Limit> limits = {kPerSecond, kPerDay}) {
    RateLimiter::Options options;
    options.clock = &clock_;
    auto limiter = RateLimiter::Create(std::move(limits), options);
    EXPECT_TRUE(limiter.ok()) << limiter.status();
    return limiter.ok() ? std::move(*limiter) : nullptr;
  }

  // Decide, which must not fail on memory.
  static Verdict MustDecide(RateLimiter& limiter, std::string_view key, uint64_t cost = 1) {
    absl::StatusOr<Verdict> verdict = limiter.Decide(key, cost);
    EXPECT_TRUE(verdict.ok()) << verdict.status();
    return verdict.ok() ? std::move(*verdict) : Verdict{};
  }

  // Each limit's remaining for `key`, looked at without consuming.
  static std::vector<int64_t> Remaining(RateLimiter& limiter, std::string_view key) {
    absl::StatusOr<Verdict> peek = limiter.Peek(key);
    EXPECT_TRUE(peek.ok()) << peek.status();
    std::vector<int64_t> remaining;
    if (peek.ok()) {
      for (const Decision& d : peek->decisions) remaining.push_back(d.remaining);
    }
    return remaining;
  }

  ManualClock clock_{kMiddayT0};
};

TEST_F(RateLimiterTest, AdmitsWhileEveryLimitAdmits) {
  auto limiter = Make();
  Verdict first = MustDecide(*limiter, "alice");
  EXPECT_TRUE(first.allowed);
  ASSERT_EQ(first.decisions.size(), 2u);
  EXPECT_EQ(first.decisions[0].remaining, 1);
  EXPECT_EQ(first.decisions[1].remaining, 4);
  EXPECT_EQ(first.remaining, 1) << "the fewest remaining of the two";
  EXPECT_EQ(first.retry_after_us, 0);
  EXPECT_FALSE(first.fell_back);
  EXPECT_FALSE(first.consumption.empty());
  EXPECT_EQ(first.consumption.key(), "alice");
  EXPECT_EQ(first.consumption.cost(), 1u);
}

// The point of deciding limits together: a request the per-second limit refuses must not eat
// into the daily budget.
TEST_F(RateLimiterTest, DeniedRequestsConsumeNothingInTheLimitsThatAdmit) {
  auto limiter = Make();
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  for (int i = 0; i < 10; ++i) {
    Verdict denied = MustDecide(*limiter, "alice");
    EXPECT_FALSE(denied.allowed);
    EXPECT_FALSE(denied.decisions[0].allowed) << "the per-second limit denies";
    EXPECT_TRUE(denied.decisions[1].allowed) << "the daily limit would have admitted";
    EXPECT_EQ(denied.retry_after_us, kSecond - 250000) << "until the next second's window";
    EXPECT_TRUE(denied.consumption.empty());
  }
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 3}))
      << "the daily limit counts the two admitted requests only";

  // Three more seconds: the day's last three requests, then the daily limit denies.
  clock_.Advance(kSecond);
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  clock_.Advance(kSecond);
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  Verdict denied = MustDecide(*limiter, "alice");
  EXPECT_FALSE(denied.allowed);
  EXPECT_TRUE(denied.decisions[0].allowed) << "the per-second limit would have admitted";
  EXPECT_FALSE(denied.decisions[1].allowed);
  EXPECT_EQ(denied.retry_after_us, kDay / 2 - 2 * kSecond - 250000) << "until midnight";
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{1, 0}))
      << "the per-second limit did not count the request the daily one denied";
}

TEST_F(RateLimiterTest, RetryAfterIsTheLongestOfTheLimitsThatDeny) {
  auto limiter = Make({kPerSecond, FixedWindow(2, 10 * kSecond)});
  EXPECT_TRUE(MustDecide(*limiter, "k", 2).allowed);
  Verdict denied = MustDecide(*limiter, "k");
  EXPECT_FALSE(denied.allowed);
  EXPECT_FALSE(denied.decisions[0].allowed);
  EXPECT_FALSE(denied.decisions[1].allowed);
  EXPECT_EQ(denied.decisions[0].retry_after_us, kSecond - 250000);
  EXPECT_GT(denied.decisions[1].retry_after_us, kSecond);
  EXPECT_EQ(denied.retry_after_us, denied.decisions[1].retry_after_us);
}

TEST_F(RateLimiterTest, ACostNoLimitCanEverAdmitIsNeverRetried) {
  auto limiter = Make();
  Verdict denied = MustDecide(*limiter, "k", 3);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.retry_after_us, Decision::kNever);
  EXPECT_EQ(Remaining(*limiter, "k"), (std::vector<int64_t>{2, 5}));
}

TEST_F(RateLimiterTest, KeysAreIndependent) {
  auto limiter = Make();
  EXPECT_TRUE(MustDecide(*limiter, "alice", 2).allowed);
  EXPECT_FALSE(MustDecide(*limiter, "alice").allowed);
  EXPECT_TRUE(MustDecide(*limiter, "bob").allowed);
}

TEST_F(RateLimiterTest, RefundGivesBackToEveryLimitOnce) {
  auto limiter = Make();
  Verdict kept = MustDecide(*limiter, "alice");
  Verdict failed = MustDecide(*limiter, "alice");
  ASSERT_TRUE(failed.allowed);
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 3}));

  EXPECT_TRUE(limiter->Refund(failed.consumption).ok());
  EXPECT_TRUE(failed.consumption.empty()) << "a refunded consumption is spent";
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{1, 4}));
  EXPECT_TRUE(limiter->Refund(failed.consumption).ok()) << "refunding it again does nothing";
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{1, 4}));

  // What was refunded is admitted again.
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  EXPECT_FALSE(MustDecide(*limiter, "alice").allowed);
}

// Costs known after the work: decided on an estimate, settled at the actual cost.
TEST_F(RateLimiterTest, SettleGivesBackOrRecordsPastTheLimits) {
  auto limiter = Make({FixedWindow(100, kDay), FixedWindow(1000, kDay)});
  Verdict estimate = MustDecide(*limiter, "alice", 60);
  ASSERT_TRUE(estimate.allowed);
  EXPECT_TRUE(limiter->Settle(estimate.consumption, 25).ok());
  EXPECT_TRUE(estimate.consumption.empty()) << "a settled consumption is spent";
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{75, 975}));
  EXPECT_TRUE(limiter->Settle(estimate.consumption, 99).ok()) << "settling it again does nothing";
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{75, 975}));

  Verdict under = MustDecide(*limiter, "alice", 10);
  EXPECT_TRUE(limiter->Settle(under.consumption, 130).ok());  // 120 more, past 100
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 845}));
  EXPECT_FALSE(MustDecide(*limiter, "alice").allowed);
  clock_.Advance(kDay);
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed) << "the window with the excess ended";

  auto other = Make();
  Verdict theirs = MustDecide(*other, "alice");
  EXPECT_EQ(limiter->Settle(theirs.consumption, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RateLimiterTest, RecordCountsACostPastTheLimits) {
  auto limiter = Make();
  absl::StatusOr<Verdict> recorded = limiter->Record("alice", 7);
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_FALSE(recorded->allowed) << "it did not fit";
  EXPECT_TRUE(recorded->consumption.empty()) << "nothing to give back";
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 0}));
  EXPECT_FALSE(MustDecide(*limiter, "alice").allowed) << "and it was counted";
  EXPECT_TRUE(limiter->Record("bob", 1)->allowed);
  EXPECT_EQ(Remaining(*limiter, "bob"), (std::vector<int64_t>{1, 4}));
}

TEST_F(RateLimiterTest, ADeniedRequestHasNothingToRefund) {
  auto limiter = Make();
  EXPECT_TRUE(MustDecide(*limiter, "alice", 2).allowed);
  Verdict denied = MustDecide(*limiter, "alice");
  ASSERT_FALSE(denied.allowed);
  EXPECT_TRUE(denied.consumption.empty());
  EXPECT_TRUE(limiter->Refund(denied.consumption).ok());
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{0, 3}));
}

TEST_F(RateLimiterTest, RefundRefusesAnotherLimitersConsumption) {
  auto limiter = Make();
  auto other = Make();
  Verdict verdict = MustDecide(*other, "alice");
  absl::Status refused = limiter->Refund(verdict.consumption);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(verdict.consumption.empty()) << "still the other limiter's to refund";
  EXPECT_TRUE(other->Refund(verdict.consumption).ok());
  EXPECT_EQ(Remaining(*other, "alice"), (std::vector<int64_t>{2, 5}));
}

TEST_F(RateLimiterTest, AMovedConsumptionIsRefundedOnce) {
  auto limiter = Make();
  Verdict verdict = MustDecide(*limiter, "alice");
  Consumption moved = std::move(verdict.consumption);
  EXPECT_TRUE(verdict.consumption.empty());  // NOLINT(bugprone-use-after-move): pinned here
  EXPECT_TRUE(limiter->Refund(verdict.consumption).ok());
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{1, 4}));
  EXPECT_TRUE(limiter->Refund(moved).ok());
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{2, 5}));
}

TEST_F(RateLimiterTest, PeekConsumesNothing) {
  auto limiter = Make();
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed);
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Verdict> peek = limiter->Peek("alice");
    ASSERT_TRUE(peek.ok());
    EXPECT_TRUE(peek->allowed);
    EXPECT_EQ(peek->remaining, 1);
    EXPECT_TRUE(peek->consumption.empty());
  }
  Verdict cost_zero = MustDecide(*limiter, "alice", 0);
  EXPECT_TRUE(cost_zero.allowed);
  EXPECT_TRUE(cost_zero.consumption.empty());
  EXPECT_TRUE(MustDecide(*limiter, "alice").allowed) << "the second request of this second";
  absl::StatusOr<Verdict> exhausted = limiter->Peek("alice");
  ASSERT_TRUE(exhausted.ok());
  EXPECT_EQ(exhausted->remaining, 0) << "a peek says the next request would be denied";
  EXPECT_EQ(exhausted->decisions[1].remaining, 3);
  EXPECT_FALSE(MustDecide(*limiter, "alice").allowed);
}

TEST_F(RateLimiterTest, ResetForgetsTheKeyInEveryLimit) {
  auto limiter = Make();
  EXPECT_TRUE(MustDecide(*limiter, "alice", 2).allowed);
  EXPECT_TRUE(MustDecide(*limiter, "bob").allowed);
  absl::StatusOr<size_t> reset = limiter->Reset("alice");
  ASSERT_TRUE(reset.ok()) << reset.status();
  EXPECT_EQ(*reset, 2u) << "one state per limit";
  EXPECT_EQ(Remaining(*limiter, "alice"), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(Remaining(*limiter, "bob"), (std::vector<int64_t>{1, 4})) << "bob untouched";
  reset = limiter->Reset("nobody");
  ASSERT_TRUE(reset.ok());
  EXPECT_EQ(*reset, 0u);
}

TEST_F(RateLimiterTest, AsynchronousCallsAnswerInlineOnMemory) {
  auto limiter = Make();
  std::optional<absl::StatusOr<Verdict>> verdict;
  limiter->DecideAsync("alice", 1, [&](absl::StatusOr<Verdict> v) { verdict = std::move(v); });
  ASSERT_TRUE(verdict.has_value()) << "the callback ran before DecideAsync returned";
  ASSERT_TRUE(verdict->ok());
  EXPECT_TRUE((*verdict)->allowed);

  std::optional<absl::Status> refunded;
  limiter->RefundAsync((*verdict)->consumption, [&](absl::Status s) { refunded = s; });
  ASSERT_TRUE(refunded.has_value());
  EXPECT_TRUE(refunded->ok());

  std::optional<absl::StatusOr<Verdict>> peek;
  limiter->PeekAsync("alice", [&](absl::StatusOr<Verdict> v) { peek = std::move(v); });
  ASSERT_TRUE(peek.has_value() && peek->ok());
  EXPECT_EQ((*peek)->remaining, 2);

  std::optional<absl::StatusOr<size_t>> reset;
  limiter->ResetAsync("alice", [&](absl::StatusOr<size_t> n) { reset = n; });
  ASSERT_TRUE(reset.has_value() && reset->ok());
}

TEST_F(RateLimiterTest, CreateRefusesWhatCannotWork) {
  RateLimiter::Options options;
  options.clock = &clock_;
  const Limit invalid = FixedWindow(1, 0);
  struct Case {
    const char* what;
    std::vector<Limit> limits;
  };
  const Case cases[] = {
      {"no limit", {}},
      {"an invalid limit", {kPerSecond, invalid}},
      {"the same limit twice", {kPerSecond, kPerDay, kPerSecond}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto limiter = RateLimiter::Create(c.limits, options);
    ASSERT_FALSE(limiter.ok());
    EXPECT_EQ(limiter.status().code(), absl::StatusCode::kInvalidArgument);
  }
  RateLimiter::Options no_clock;
  no_clock.clock = nullptr;
  EXPECT_EQ(RateLimiter::Create({kPerSecond}, no_clock).status().code(),
            absl::StatusCode::kInvalidArgument);
  RateLimiter::Options bad_url;
  bad_url.redis.emplace();
  bad_url.redis->url = "http://localhost:6379";
  EXPECT_EQ(RateLimiter::Create({kPerSecond}, bad_url).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RateLimiterTest, LimitsAndWhereDescribeIt) {
  auto limiter = Make();
  EXPECT_EQ(limiter->limits(), (std::vector<Limit>{kPerSecond, kPerDay}));
  EXPECT_EQ(limiter->where(), "memory");
}

// A runtime override: the key is decided against the override's limits, in states of its own,
// until its end or its removal; other keys keep the limiter's limits, and the key's own state in
// them is where it was.
TEST_F(RateLimiterTest, AnOverrideDecidesItsKeyUntilItEndsOrIsRemoved) {
  auto limiter = Make();
  ASSERT_TRUE(limiter);
  EXPECT_TRUE(MustDecide(*limiter, "acme").allowed);  // one of the limiter's 2 per second
  const int64_t end = clock_.NowMicros() + 10 * kSecond;
  ASSERT_TRUE(limiter->SetOverride("acme", {FixedWindow(4, kSecond)}, end).ok());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(MustDecide(*limiter, "acme").allowed) << i;
  const Verdict over = MustDecide(*limiter, "acme");
  EXPECT_FALSE(over.allowed);
  EXPECT_EQ(over.decisions.size(), 1u);                                  // the override's one limit
  EXPECT_EQ(Remaining(*limiter, "beta"), (std::vector<int64_t>{2, 5}));  // not overridden
  // Its end: the limiter's limits again, with acme's count in them as it was.
  clock_.Set(end);
  EXPECT_EQ(Remaining(*limiter, "acme"), (std::vector<int64_t>{2, 4}));  // a new second
  // Removed: gone (an ended one counts as none).
  EXPECT_FALSE(limiter->RemoveOverride("acme"));
  ASSERT_TRUE(limiter->SetOverride("acme", {FixedWindow(1, kSecond)}).ok());
  EXPECT_EQ(Remaining(*limiter, "acme"), (std::vector<int64_t>{1}));
  EXPECT_TRUE(limiter->RemoveOverride("acme"));
  EXPECT_FALSE(limiter->RemoveOverride("acme"));
  EXPECT_EQ(Remaining(*limiter, "acme"), (std::vector<int64_t>{2, 4}));
}

TEST_F(RateLimiterTest, AnOverrideIsRefusedForLimitsCreateRefusesOrAnEndPast) {
  auto limiter = Make();
  ASSERT_TRUE(limiter);
  EXPECT_EQ(limiter->SetOverride("acme", {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter->SetOverride("acme", {FixedWindow(1, 0)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter->SetOverride("acme", {kPerSecond}, clock_.NowMicros()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(limiter->RemoveOverride("acme"));
}

}  // namespace
}  // namespace sluice
