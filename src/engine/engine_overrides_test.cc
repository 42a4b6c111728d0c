// Runtime overrides through the engine on the memory store (Engine::set_overrides): a descriptor
// an override applies to gets the override's limits instead of any rule's (also of none, and of
// an unlimited one), with a state of its own; removing it, or its end, brings the rule back with
// the rule's own count. Domain shadow mode still applies, Reset forgets an override's state, a
// descriptor's own RLS limit keeps that one, and Explain names it. Time is a ManualClock.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "engine/explain.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/override_book.h"
#include "rules/overrides.h"

namespace sluice::engine {
namespace {

using test::EngineTest;
using test::kMinuteUs;
using test::kSecondUs;
using ::testing::HasSubstr;
using ::testing::Not;

// kT0 is 20 s into a minute: the minute windows here end at kT0 + 40 s.
constexpr std::string_view kOverrideEngineRules = R"yaml(domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: vip
    rate_limit: {unlimited: true}
  - key: plan
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 3}
)yaml";

constexpr std::string_view kOverrideEngineShadowRules = R"yaml(domain: api
shadow_mode: true
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
)yaml";

class OverrideEngineTest : public EngineTest {
 protected:
  void SetUp() override {
    Load(kOverrideEngineRules);
    absl::StatusOr<std::unique_ptr<rules::FileOverrideBook>> book =
        rules::FileOverrideBook::Open("", *config_, [this] { return clock_.NowMicros(); });
    ASSERT_TRUE(book.ok()) << book.status();
    book_ = std::move(*book);
    engine_.set_overrides(book_.get());
  }

  // Sets the override `json` (its domain "api" is added), set by alice now.
  void SetOverride(std::string_view json) {
    const std::string text = R"({"domain": "api", )" + std::string(json) + "}";
    absl::StatusOr<rules::Override> o =
        rules::ParseOverride(text, *config_, clock_.NowMicros(), /*stored=*/false);
    ASSERT_TRUE(o.ok()) << o.status() << "\n" << text;
    o->set_by = "alice";
    o->set_at_us = clock_.NowMicros();
    absl::Status kept = absl::InternalError("done never ran");
    book_->Put(std::move(*o), [&](absl::Status s) { kept = std::move(s); });
    ASSERT_TRUE(kept.ok()) << kept;
  }

  void RemoveOverride(std::vector<rules::Entry> entries) {
    absl::StatusOr<bool> removed = absl::InternalError("done never ran");
    book_->Remove("api", std::move(entries), [&](absl::StatusOr<bool> r) { removed = r; });
    ASSERT_TRUE(removed.ok()) << removed.status();
    EXPECT_TRUE(*removed);
  }

  // One descriptor of api with `entries`; its single limit's size (requests), or -1 with none.
  int64_t LimitOf(const Response& r) const {
    if (r.descriptors.size() != 1 || r.descriptors[0].limits.size() != 1) return -1;
    return static_cast<int64_t>(r.descriptors[0].limits[0].limit.requests);
  }

  // How many of `n` checks of api `entries` are admitted (each of one descriptor).
  int Admitted(const engine::Entries& entries, int n) {
    int admitted = 0;
    for (int i = 0; i < n; ++i) admitted += Check1("api", entries).allowed ? 1 : 0;
    return admitted;
  }

  std::unique_ptr<rules::FileOverrideBook> book_;
};

TEST_F(OverrideEngineTest, OverrideReplacesTheRulesLimitForItsKeyOnly) {
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 5, "unit": "minute"}])");
  const Response first = Check1("api", {{"api_key", "acme"}});
  EXPECT_TRUE(first.allowed);
  EXPECT_EQ(LimitOf(first), 5);
  EXPECT_EQ(first.descriptors[0].rule, nullptr);
  EXPECT_EQ(Remaining(first), 4);
  EXPECT_EQ(Admitted({{"api_key", "acme"}}, 4), 4);
  const Response sixth = Check1("api", {{"api_key", "acme"}});
  EXPECT_FALSE(sixth.allowed);
  EXPECT_EQ(sixth.descriptors[0].code, DescriptorResult::Code::kOverLimit);
  // Another key: the rule's 2.
  const Response bob = Check1("api", {{"api_key", "bob"}});
  EXPECT_EQ(LimitOf(bob), 2);
  EXPECT_NE(bob.descriptors[0].rule, nullptr);
  EXPECT_EQ(Admitted({{"api_key", "bob"}}, 3), 1);
}

TEST_F(OverrideEngineTest, RemovingItBringsBackTheRuleAndItsCount) {
  EXPECT_TRUE(Check1("api", {{"api_key", "acme"}}).allowed);  // the rule's first of 2
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 5, "unit": "minute"}])");
  EXPECT_EQ(Admitted({{"api_key", "acme"}}, 6), 5);  // its own state: all 5
  RemoveOverride({{"api_key", "acme"}});
  const Response back = Check1("api", {{"api_key", "acme"}});
  EXPECT_TRUE(back.allowed);  // the rule's second
  EXPECT_EQ(LimitOf(back), 2);
  EXPECT_EQ(Remaining(back), 0);
  EXPECT_FALSE(Check1("api", {{"api_key", "acme"}}).allowed);
}

TEST_F(OverrideEngineTest, AnOverrideForEndsExactlyAtItsEnd) {
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 5, "unit": "minute"}], "for": "60s")");
  const int64_t end = test::kT0 + 60 * kSecondUs;
  clock_.Set(end - 1);
  const Response last = Check1("api", {{"api_key", "acme"}});
  EXPECT_EQ(LimitOf(last), 5);
  EXPECT_EQ(last.descriptors[0].rule, nullptr);
  clock_.Set(end);
  const Response after = Check1("api", {{"api_key", "acme"}});
  EXPECT_EQ(LimitOf(after), 2);
  EXPECT_NE(after.descriptors[0].rule, nullptr);
  EXPECT_EQ(Remaining(after), 1);
}

TEST_F(OverrideEngineTest, AnOverrideLimitsAKeyNoRuleMatches) {
  EXPECT_EQ(LimitOf(Check1("api", {{"user", "u1"}})), -1);  // no rule: no limit
  SetOverride(R"("entries": [{"key": "user", "value": "u1"}],
                 "limits": [{"requests": 1, "unit": "minute"}])");
  EXPECT_EQ(Admitted({{"user", "u1"}}, 3), 1);
  const Response other = Check1("api", {{"user", "u2"}});
  EXPECT_TRUE(other.allowed);
  EXPECT_TRUE(other.descriptors[0].limits.empty());
}

TEST_F(OverrideEngineTest, AnOverrideOutranksAnUnlimitedRule) {
  SetOverride(R"("entries": [{"key": "vip", "value": "x"}],
                 "limits": [{"requests": 1, "unit": "minute"}])");
  const Response first = Check1("api", {{"vip", "x"}});
  EXPECT_TRUE(first.allowed);
  EXPECT_FALSE(first.descriptors[0].unlimited);
  EXPECT_EQ(LimitOf(first), 1);
  EXPECT_FALSE(Check1("api", {{"vip", "x"}}).allowed);
  const Response other = Check1("api", {{"vip", "y"}});
  EXPECT_TRUE(other.descriptors[0].unlimited);
  EXPECT_EQ(Admitted({{"vip", "y"}}, 5), 5);
}

TEST_F(OverrideEngineTest, ATwoEntryOverrideNeedsBoth) {
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}, {"key": "plan", "value": "gold"}],
                 "limits": [{"requests": 5, "unit": "minute"}])");
  EXPECT_EQ(LimitOf(Check1("api", {{"plan", "gold"}, {"api_key", "acme"}})), 5);
  EXPECT_EQ(LimitOf(Check1("api", {{"plan", "free"}, {"api_key", "acme"}})), 3);
  EXPECT_EQ(LimitOf(Check1("api", {{"api_key", "acme"}})), 2);
  EXPECT_EQ(LimitOf(Check1("api", {{"plan", "gold"}, {"api_key", "bob"}})), 3);
  EXPECT_EQ(Admitted({{"plan", "gold"}, {"api_key", "acme"}}, 6), 4);  // 1 of 5 used above
}

TEST_F(OverrideEngineTest, DomainShadowModeKeepsItFromDenying) {
  Load(kOverrideEngineShadowRules);
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 1, "unit": "minute"}])");
  EXPECT_TRUE(Check1("api", {{"api_key", "acme"}}).allowed);
  const Response over = Check1("api", {{"api_key", "acme"}});
  EXPECT_TRUE(over.allowed);
  ASSERT_EQ(over.descriptors[0].limits.size(), 1u);
  EXPECT_EQ(over.descriptors[0].limits[0].limit.requests, 1u);
  EXPECT_TRUE(over.descriptors[0].limits[0].shadow);
  EXPECT_FALSE(over.descriptors[0].limits[0].decision.allowed);
}

TEST_F(OverrideEngineTest, TheLimitsOwnShadowModeKeepsItFromDenying) {
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 1, "unit": "minute", "shadow_mode": true}])");
  EXPECT_EQ(Admitted({{"api_key", "acme"}}, 3), 3);
  const Response over = Check1("api", {{"api_key", "acme"}});
  ASSERT_EQ(over.descriptors[0].limits.size(), 1u);
  EXPECT_TRUE(over.descriptors[0].limits[0].shadow);
  EXPECT_FALSE(over.descriptors[0].limits[0].decision.allowed);
}

TEST_F(OverrideEngineTest, ResetForgetsTheOverridesState) {
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 5, "unit": "minute"}])");
  EXPECT_EQ(Admitted({{"api_key", "acme"}}, 6), 5);
  EXPECT_EQ(engine_.Reset(*config_, test::Req("api", {test::Desc({{"api_key", "acme"}})})), 1u);
  const Response again = Check1("api", {{"api_key", "acme"}});
  EXPECT_TRUE(again.allowed);
  EXPECT_EQ(Remaining(again), 4);
}

// After an override's end (still listed until the book's next change), Reset forgets what is in
// force: the rule's state.
TEST_F(OverrideEngineTest, ResetAfterTheEndForgetsTheRulesState) {
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 5, "unit": "minute"}], "for": "10s")");
  clock_.Set(test::kT0 + 10 * kSecondUs);  // ended; the rule's window runs to kT0 + 40 s
  EXPECT_EQ(Admitted({{"api_key", "acme"}}, 3), 2);
  // The rule's state, the one there is (the ended override's was never made).
  EXPECT_EQ(engine_.Reset(*config_, test::Req("api", {test::Desc({{"api_key", "acme"}})})), 1u);
  const Response again = Check1("api", {{"api_key", "acme"}});
  EXPECT_TRUE(again.allowed);
  EXPECT_EQ(LimitOf(again), 2);
}

TEST_F(OverrideEngineTest, ADescriptorsOwnLimitKeepsIt) {
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 5, "unit": "minute"}])");
  Descriptor own = test::Desc({{"api_key", "acme"}});
  own.limit = LimitOverride{.requests_per_unit = 1, .window_us = kMinuteUs, .unit = "minute"};
  const Response first = Check(test::Req("api", {own}));
  EXPECT_TRUE(first.allowed);
  EXPECT_EQ(LimitOf(first), 1);
  EXPECT_FALSE(Check(test::Req("api", {own})).allowed);
  // The override still applies without the descriptor's own limit, on a state of its own.
  const Response plain = Check1("api", {{"api_key", "acme"}});
  EXPECT_EQ(LimitOf(plain), 5);
  EXPECT_EQ(Remaining(plain), 4);
}

TEST_F(OverrideEngineTest, ExplainNamesTheOverride) {
  SetOverride(R"("entries": [{"key": "api_key", "value": "acme"}],
                 "limits": [{"requests": 5, "unit": "minute"}], "for": "1h", "reason": "launch")");
  const std::shared_ptr<const rules::OverrideSet> set = book_->Current();
  ASSERT_NE(set, nullptr);
  const absl::StatusOr<std::string> text =
      Explain(*config_, "api", "api_key=acme", set.get(), clock_.NowMicros());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("descriptor 1 result: runtime override api_key=acme set by alice "
                               "at 2023-11-14T22:13:20Z until 2023-11-14T23:13:20Z (launch), "
                               "outranking rule api.api_key, 1 limit(s)\n  5/1m fixed_window\n"));
  // A key no rule matches.
  SetOverride(R"("entries": [{"key": "user", "value": "u1"}],
                 "limits": [{"requests": 1, "unit": "minute"}])");
  const absl::StatusOr<std::string> none =
      Explain(*config_, "api", "user=u1", book_->Current().get(), clock_.NowMicros());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, HasSubstr("runtime override user=u1 set by alice"));
  EXPECT_THAT(*none, HasSubstr("outranking no rule, 1 limit(s)"));
  // After its end, the rule.
  const absl::StatusOr<std::string> later =
      Explain(*config_, "api", "api_key=acme", set.get(), clock_.NowMicros() + 3600 * kSecondUs);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_THAT(*later, Not(HasSubstr("runtime override")));
  EXPECT_THAT(*later, HasSubstr("descriptor 1 result: rule api.api_key, 1 limit(s)"));
}

}  // namespace
}  // namespace sluice::engine
