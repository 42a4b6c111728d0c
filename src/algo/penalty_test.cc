// Tests for algo/penalty.h, with given times: when denials make an offence, how blocks grow and
// stop growing, when offences are forgotten, and what a blocked key's denials do.

#include "algo/penalty.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "tests/support/units.h"

namespace sluice::algo {
namespace {

using sluice::testing::kHour;
using sluice::testing::kMinute;
using sluice::testing::kSecond;
using sluice::testing::kT0;

// The issue's example: {after: 3, within: 10m, block: 2m, growth: 2.5, max: 1h}.
Penalty Example() { return Penalty{}; }

// Three denials a second apart from `at`; the block the third one starts.
int64_t Offend(PenaltyState& s, const Penalty& p, int64_t at) {
  EXPECT_EQ(RecordDenial(s, p, at), 0);
  EXPECT_EQ(RecordDenial(s, p, at + kSecond), 0);
  return RecordDenial(s, p, at + 2 * kSecond);
}

TEST(PenaltyTest, TheDefaultsAreTheIssuesExample) {
  const Penalty p = Example();
  EXPECT_EQ(p.after, 3u);
  EXPECT_EQ(p.within_us, 10 * kMinute);
  EXPECT_EQ(p.block_us, 2 * kMinute);
  EXPECT_EQ(p.growth, 2.5);
  EXPECT_EQ(p.max_us, kHour);
  EXPECT_TRUE(ValidatePenalty(p).ok());
}

TEST(PenaltyTest, DenialsWithinTheSpanMakeAnOffenceThatBlocks) {
  PenaltyState s;
  const Penalty p = Example();
  EXPECT_EQ(BlockedFor(s, kT0), 0);
  EXPECT_EQ(Offend(s, p, kT0), 2 * kMinute);
  const int64_t third = kT0 + 2 * kSecond;
  EXPECT_EQ(BlockedFor(s, third), 2 * kMinute);
  EXPECT_EQ(BlockedFor(s, third + kMinute), kMinute);
  EXPECT_EQ(BlockedFor(s, third + 2 * kMinute), 0);
  EXPECT_EQ(s.offences, 1u);
}

TEST(PenaltyTest, DenialsSpreadWiderThanTheSpanMakeNoOffence) {
  PenaltyState s;
  const Penalty p = Example();
  // Two denials, then the third after the span of the first ended: it starts a new span.
  EXPECT_EQ(RecordDenial(s, p, kT0), 0);
  EXPECT_EQ(RecordDenial(s, p, kT0 + 5 * kMinute), 0);
  EXPECT_EQ(RecordDenial(s, p, kT0 + 10 * kMinute), 0);
  EXPECT_EQ(s.denials, 1u);
  EXPECT_EQ(BlockedFor(s, kT0 + 10 * kMinute), 0);
  EXPECT_EQ(s.offences, 0u);
}

TEST(PenaltyTest, EachFurtherOffenceBlocksLongerUpToTheMax) {
  PenaltyState s;
  const Penalty p = Example();
  // 2 min, 5, 12.5, 31.25, then 1 h (78.125 min capped), and 1 h from then on.
  const int64_t want[] = {
      2 * kMinute, 5 * kMinute, 12 * kMinute + 30 * kSecond, 31 * kMinute + 15 * kSecond, kHour,
      kHour,       kHour};
  int64_t at = kT0;
  for (const int64_t block : want) {
    EXPECT_EQ(Offend(s, p, at), block) << s.offences;
    // Denied while blocked: nothing counted, no longer block.
    EXPECT_EQ(RecordDenial(s, p, at + 3 * kSecond), 0);
    EXPECT_EQ(s.denials, 0u);
    at += 2 * kSecond + block;  // the next offence right after the block ends
  }
  EXPECT_EQ(BlockOf(p, 1000000), kHour);  // no overflow however many
}

TEST(PenaltyTest, OffencesAreForgottenAfterTheQuietSpan) {
  PenaltyState s;
  Penalty p = Example();
  p.forget_us = 2 * kHour;
  EXPECT_EQ(Offend(s, p, kT0), 2 * kMinute);
  EXPECT_EQ(Offend(s, p, kT0 + 10 * kMinute), 5 * kMinute);
  // Quiet for two hours after the last offence began (its third denial, 2 s after its first):
  // the next one is a first offence again.
  const int64_t later = kT0 + 10 * kMinute + 2 * kSecond + 2 * kHour;
  EXPECT_FALSE(PenaltyIdle(s, p, later - 1));
  EXPECT_TRUE(PenaltyIdle(s, p, later));
  EXPECT_EQ(Offend(s, p, later), 2 * kMinute);
  EXPECT_EQ(s.offences, 1u);
}

TEST(PenaltyTest, AStateIsIdleOnlyWhenNothingIsBlockedCountedOrRemembered) {
  PenaltyState s;
  const Penalty p = Example();
  EXPECT_TRUE(PenaltyIdle(s, p, kT0));
  RecordDenial(s, p, kT0);
  EXPECT_FALSE(PenaltyIdle(s, p, kT0 + kSecond));      // a span counting
  EXPECT_TRUE(PenaltyIdle(s, p, kT0 + 10 * kMinute));  // its span over, no offence
}

TEST(PenaltyTest, BadSettingsAreRefusedNamingTheField) {
  const auto message = [](Penalty p) { return std::string(ValidatePenalty(p).message()); };
  Penalty p = Example();
  p.after = 0;
  EXPECT_NE(message(p).find("after"), std::string::npos);
  p = Example();
  p.growth = 0.5;
  EXPECT_NE(message(p).find("growth"), std::string::npos);
  p = Example();
  p.max_us = kMinute;
  EXPECT_NE(message(p).find("max"), std::string::npos);
  p = Example();
  p.forget_us = 30 * kMinute;
  EXPECT_NE(message(p).find("forget"), std::string::npos);
  p = Example();
  p.within_us = 0;
  EXPECT_NE(message(p).find("within"), std::string::npos);
}

}  // namespace
}  // namespace sluice::algo
