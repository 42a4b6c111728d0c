// Penalties through the engine on the memory store (issue 37, item 4): a limit with
// `penalty: {after, within, block, growth, max, forget}` blocks a key denied again and again,
// for longer at each offence, and forgets it after a quiet span; the block is answered without
// the limit (retry and reset: the block's rest), looked at without counting, and lifted by a
// reset. Time is a ManualClock.

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using test::EngineTest;
using test::kSecondUs;

constexpr std::string_view kPenaltyRules = R"yaml(domain: api
descriptors:
  - key: user
    rate_limit:
      requests: 2
      window: 1m
      penalty: {after: 2, within: 1m, block: 10s, growth: 3, max: 60s, forget: 10m}
  - key: shadowed
    rate_limit:
      requests: 1
      window: 1m
      shadow_mode: true
      penalty: {after: 1, block: 10s, max: 10s}
)yaml";

class PenaltyEngineTest : public EngineTest {
 protected:
  void SetUp() override { Load(kPenaltyRules); }
  Decision At(int64_t t_us, const std::string& user, uint64_t cost = 1) {
    clock_.Set(t_us);
    last_ = Check1("api", {{"user", user}}, cost);
    EXPECT_EQ(last_.descriptors[0].limits.size(), 1u);
    return last_.descriptors[0].limits[0].decision;
  }
  Response last_;
};

TEST_F(PenaltyEngineTest, RepeatedDenialsBlockForLongerEachTimeUpToMax) {
  // kT0 is 20 s into a minute: the windows end at t + 40 s, t + 100 s, ...
  const int64_t t = test::kT0;
  const int64_t s = kSecondUs;
  // Spends the window that holds `at` (2 admitted), then denies twice: an offence.
  const auto offend = [&](int64_t at) {
    EXPECT_TRUE(At(at, "bob").allowed);
    EXPECT_TRUE(At(at + 1, "bob").allowed);
    const Decision first_denial = At(at + 2, "bob");
    EXPECT_FALSE(first_denial.allowed);
    EXPECT_FALSE(first_denial.penalty);  // one denial: no offence yet
    return At(at + 3, "bob");
  };
  const Decision first = offend(t);
  EXPECT_FALSE(first.allowed);
  EXPECT_TRUE(first.penalty);  // the second denial within a minute: blocked 10 s
  EXPECT_EQ(first.retry_after_us, 10 * s);
  EXPECT_EQ(first.reset_after_us, 40 * s - 3);  // the window ends later than the block
  EXPECT_EQ(last_.descriptors[0].code, DescriptorResult::Code::kOverLimit);
  // Blocked: answered without the limit, the block's rest as the wait.
  const Decision blocked = At(t + 5 * s, "bob");
  EXPECT_TRUE(blocked.penalty);
  EXPECT_EQ(blocked.retry_after_us, 5 * s + 3);
  // The next window: a second offence is blocked 10 s x 3.
  EXPECT_EQ(offend(t + 41 * s).retry_after_us, 30 * s);
  // A look (cost 0) shows the block and counts nothing.
  const Decision look = At(t + 42 * s, "bob", 0);
  EXPECT_TRUE(look.penalty);
  EXPECT_EQ(look.retry_after_us, 29 * s + 3);
  // A third: 90 s, capped at max, 60 s.
  EXPECT_EQ(offend(t + 101 * s).retry_after_us, 60 * s);
  // Other keys are not blocked.
  EXPECT_TRUE(At(t + 102 * s, "carol").allowed);
}

TEST_F(PenaltyEngineTest, OffencesAreForgottenAfterAQuietSpan) {
  const int64_t t = test::kT0;
  At(t, "dan", 2);
  At(t + 1, "dan");
  EXPECT_EQ(At(t + 2, "dan").retry_after_us, 10 * kSecondUs);  // offence 1
  // Eleven minutes later (forget: 10 m), the next offence is a first one again.
  const int64_t later = t + 11 * 60 * kSecondUs;
  At(later, "dan", 2);
  At(later + 1, "dan");
  EXPECT_EQ(At(later + 2, "dan").retry_after_us, 10 * kSecondUs);
}

TEST_F(PenaltyEngineTest, AResetLiftsTheBlock) {
  const int64_t t = test::kT0;
  At(t, "eve", 2);
  At(t + 1, "eve");
  ASSERT_TRUE(At(t + 2, "eve").penalty);
  Request reset;
  reset.domain = "api";
  reset.descriptors.push_back(test::Desc({{"user", "eve"}}));
  EXPECT_GT(engine_.Reset(*config_, reset), 0u);
  const Decision after = At(t + 3, "eve");
  EXPECT_TRUE(after.allowed);
  EXPECT_FALSE(after.penalty);
}

TEST_F(PenaltyEngineTest, AShadowLimitsBlockIsReportedAndDeniesNothing) {
  const int64_t t = test::kT0;
  clock_.Set(t);
  EXPECT_TRUE(Check1("api", {{"shadowed", "x"}}).allowed);
  const Response denied = Check1("api", {{"shadowed", "x"}});
  EXPECT_TRUE(denied.allowed);                                    // shadow: admitted
  EXPECT_TRUE(denied.descriptors[0].limits[0].decision.penalty);  // an offence at once (after 1)
  const Response blocked = Check1("api", {{"shadowed", "x"}});
  EXPECT_TRUE(blocked.allowed);
  EXPECT_TRUE(blocked.descriptors[0].limits[0].decision.penalty);
}

}  // namespace
}  // namespace sluice::engine
