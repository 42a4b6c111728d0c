// Costs known only after the work (engine/reservation.h): a request that records its cost
// whatever the limits say (Request::record, POST /v1/report), a reservation settled lower (the
// difference given back) or higher (the excess recorded past the limit, no penalty counted), and
// the reservation's text and back. Time is a ManualClock; t0 = 1700000000 s.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "engine/reservation.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using test::Desc;
using test::EngineTest;
using test::kMinuteUs;
using test::kSecondUs;
using test::Req;

// Tokens per minute per key, a token bucket of 1000 a minute; requests per second beside it.
constexpr std::string_view kTokens = R"yaml(domain: llm
descriptors:
  - key: tokens
    rate_limit: {algorithm: token_bucket, requests: 1000, window: 1m}
  - key: fixed
    rate_limit: {algorithm: fixed_window, requests: 1000, window: 1m}
  - key: requests
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: penalized
    rate_limit:
      algorithm: fixed_window
      requests: 100
      window: 1m
      penalty: {after: 2, within: 1m, block: 1m}
)yaml";

class CostsTest : public EngineTest {
 protected:
  void SetUp() override { Load(kTokens); }

  // Reserves `estimate` for key `k` of descriptor `d` (and one request of `requests`): the
  // decision, and what to settle into `settled`.
  Response Reserve(const std::string& d, uint64_t estimate, Refundable* settled) {
    Request r = Req("llm", {Desc({{d, "acme"}})}, estimate);
    Descriptor per_request = Desc({{"requests", "acme"}});
    per_request.hits_addend = 1;  // a cost of its own: not settled
    r.descriptors.push_back(per_request);
    Refundable consumed;
    std::vector<Response> out =
        engine_.CheckAll(*config_, std::span(&r, 1), clock_.NowMicros(), &consumed);
    *settled = SettledPart(consumed, std::span(&r, 1));
    return out.front();
  }

  void Settle(const Refundable& settled, uint64_t actual) {
    std::vector<uint64_t> costs(settled.items.size(), actual);
    absl::Status applied = absl::UnknownError("not answered");
    engine_.Reconcile(settled, costs, clock_.NowMicros(), [&](absl::Status s) { applied = s; });
    EXPECT_TRUE(applied.ok()) << applied;
  }

  // What a look at the key's state says is left.
  int64_t Left(const std::string& d) {
    Request r = Req("llm", {Desc({{d, "acme"}})});
    r.descriptors[0].hits_addend = 0;
    return Remaining(Check(r));
  }
  int64_t RequestsLeft() { return Left("requests"); }
};

TEST_F(CostsTest, SettledPartIsTheDescriptorsThatTookTheRequestsCost) {
  Refundable settled;
  ASSERT_TRUE(Reserve("tokens", 300, &settled).allowed);
  ASSERT_EQ(settled.items.size(), 1u);  // not the per-request descriptor's
  EXPECT_EQ(settled.items[0].cost, 300u);
  EXPECT_EQ(settled.items[0].key.find("acme") != std::string::npos, true);
  EXPECT_EQ(RequestsLeft(), 9);
}

TEST_F(CostsTest, SettlingLowerGivesTheDifferenceBack) {
  for (const std::string& d : {std::string("tokens"), std::string("fixed")}) {
    Refundable settled;
    ASSERT_TRUE(Reserve(d, 800, &settled).allowed) << d;
    EXPECT_EQ(Left(d), 200) << d;
    clock_.Advance(2 * kSecondUs);
    Settle(settled, 150);
    // 150 spent: the token bucket has refilled 2 s' worth (33) meanwhile.
    EXPECT_EQ(Left(d), d == "tokens" ? 883 : 850) << d;
    EXPECT_EQ(RequestsLeft(), d == "tokens" ? 9 : 8) << "the per-request count is not settled";
  }
}

TEST_F(CostsTest, SettlingHigherRecordsTheExcessPastTheLimit) {
  Refundable settled;
  ASSERT_TRUE(Reserve("tokens", 100, &settled).allowed);
  Settle(settled, 1600);  // 600 past the bucket: a debt of 600 tokens, 36 s at 1000/min
  Response r = Check1("llm", {{"tokens", "acme"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r), 0);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.retry_after_us, 36 * kSecondUs + 60000);
  clock_.Advance(37 * kSecondUs);
  EXPECT_TRUE(Check1("llm", {{"tokens", "acme"}}).allowed);

  // A fixed window counts the excess in the window of the settlement, past N.
  ASSERT_TRUE(Reserve("fixed", 10, &settled).allowed);
  Settle(settled, 1500);
  EXPECT_FALSE(Check1("llm", {{"fixed", "acme"}}).allowed);
}

TEST_F(CostsTest, SettlingAtTheEstimateChangesNothing) {
  Refundable settled;
  ASSERT_TRUE(Reserve("fixed", 400, &settled).allowed);
  Settle(settled, 400);
  EXPECT_EQ(Left("fixed"), 600);
}

TEST_F(CostsTest, AnExcessIsNoOffenceOfThePenalty) {
  Refundable settled;
  ASSERT_TRUE(Reserve("penalized", 10, &settled).allowed);
  Settle(settled, 500);  // the excess goes past N = 100 without a denial being counted
  Response r = Check1("llm", {{"penalized", "acme"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_FALSE(r.descriptors[0].limits[0].decision.penalty)
      << "the first denial: the excess was no offence (after: 2)";
  r = Check1("llm", {{"penalized", "acme"}});
  EXPECT_TRUE(r.descriptors[0].limits[0].decision.penalty) << "the second one blocks";
}

TEST_F(CostsTest, ARecordedRequestCountsPastTheLimitAndDeniesLaterOnes) {
  Request r = Req("llm", {Desc({{"fixed", "acme"}})}, 1200);
  r.record = true;
  Response out = Check(r);
  EXPECT_FALSE(out.allowed) << "the decision says it is past the limit";
  EXPECT_EQ(Remaining(out), 0);
  EXPECT_FALSE(Check1("llm", {{"fixed", "acme"}}).allowed) << "and it was counted";
  clock_.Advance(kMinuteUs);
  EXPECT_TRUE(Check1("llm", {{"fixed", "acme"}}).allowed);
}

TEST(ReservationTextTest, RoundTripsEveryField) {
  Refundable taken;
  taken.decided_at_us = 1700000000123456;
  auto calendar = Calendar::Make("calendar_month", "Europe/Berlin");
  ASSERT_TRUE(calendar.ok());
  taken.items.push_back({.limit = CalendarLimit(10000, *calendar),
                         .limit_id = 42,
                         .key = std::string("api_key\0acme \n x", 17),
                         .cost = 700});
  taken.items.push_back({.limit = {.algorithm = Algorithm::kTokenBucket,
                                   .requests = 1000,
                                   .window_us = kMinuteUs,
                                   .burst = 5000},
                         .limit_id = UINT64_MAX,
                         .key = "",
                         .cost = 1});
  const std::string text = EncodeReservation(taken);
  auto back = DecodeReservation(text);
  ASSERT_TRUE(back.has_value()) << text;
  EXPECT_EQ(back->decided_at_us, taken.decided_at_us);
  ASSERT_EQ(back->items.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back->items[i].limit, taken.items[i].limit) << i;
    EXPECT_EQ(back->items[i].limit_id, taken.items[i].limit_id) << i;
    EXPECT_EQ(back->items[i].key, taken.items[i].key) << i;
    EXPECT_EQ(back->items[i].cost, taken.items[i].cost) << i;
  }
}

TEST(ReservationTextTest, TextThatIsNoReservationIsRefused) {
  Refundable taken;
  taken.items.push_back(
      {.limit = {.algorithm = Algorithm::kFixedWindow, .requests = 10, .window_us = kSecondUs},
       .limit_id = 1,
       .key = "k",
       .cost = 3});
  const std::string good = EncodeReservation(taken);
  ASSERT_TRUE(DecodeReservation(good).has_value());
  for (const std::string& bad :
       {std::string(""), std::string("hello"), good.substr(0, good.size() - 3) + "zz\n",
        std::string("sluice-reservation 1 x\n"),
        std::string("sluice-reservation 1 5\n1 9 10 1000000 - - - 3 6b\n"),  // no algorithm 9
        std::string("sluice-reservation 1 5\n1 2 10 0 - - - 3 6b\n"),        // no window
        std::string("sluice-reservation 1 5\n1 2 10 1 - calendar_month Mars/X 3 6b\n")}) {
    EXPECT_FALSE(DecodeReservation(bad).has_value()) << bad;
  }
}

TEST(ReservationIdTest, IdsAre32HexDigitsAndDiffer) {
  const std::string a = NewReservationId(), b = NewReservationId();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace sluice::engine
