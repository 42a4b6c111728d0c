// The engine (engine.h) in quota mode and global shadow mode (issue 19 #4, #5), with the cases of
// envoyproxy/ratelimit's test/service/ratelimit_test.go: there the cache's answers are given, here
// they come from real decisions (a limit spent first where the case has it over); and near_limit
// as upstream computes it. Time is a ManualClock; t0 = 1700000000 s.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"

namespace sluice::engine {
namespace {

using ::testing::ElementsAre;
using Code = DescriptorResult::Code;
using test::Desc;
using test::EngineTest;
using test::Req;
using testing::TempDir;

constexpr std::string_view kQuotaRules = R"yaml(domain: q
descriptors:
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
)yaml";

class QuotaModeTest : public EngineTest {
 protected:
  void SetUp() override { Load(kQuotaRules); }
  // Settings (`quota_mode`, `shadow_mode`) and the rules, loaded together.
  void LoadWith(std::string_view settings) {
    LoadPaths({dir_.Write("settings.yaml", settings), dir_.Write("q.yaml", kQuotaRules)});
  }
  // Spends what is left of `key`=`value`'s limit.
  void Spend(const std::string& key, const std::string& value) {
    for (int i = 0; i < 10 && Check1("q", {{key, value}}).descriptors[0].code == Code::kOk; ++i) {
    }
    ASSERT_EQ(Check1("q", {{key, value}}).descriptors[0].code, Code::kOverLimit);
  }
  static std::vector<Code> Codes(const Response& r) {
    std::vector<Code> out;
    for (const auto& d : r.descriptors) out.push_back(d.code);
    return out;
  }
  // What is left of a descriptor's limit, looked at without consuming.
  int64_t Left(const std::string& key, const std::string& value) {
    Descriptor peek = Desc({{key, value}});
    peek.hits_addend = 0;
    return Remaining(Check(Req("q", {peek})));
  }
  TempDir dir_;
};

TEST_F(QuotaModeTest, ARegularDescriptorOverItsLimitDenies) {  // TestServicePerDescriptorQuotaMode
  Spend("regular", "r");
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOk));
  EXPECT_EQ(Left("quota", "a"), 3);  // all-or-nothing: the quota took nothing
}

TEST_F(QuotaModeTest,
       TheOnlyQuotaOverItsLimitDeniesAndTheOthersGiveBack) {  // ...MixedPerDescriptorModes
  Spend("quota", "a");
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOk, Code::kOverLimit));
  EXPECT_EQ(Left("regular", "r"), 5);  // consumed, then given back
}

// With count_denied (upstream's counting), a denied request counts: nothing is given back.
TEST_F(QuotaModeTest, CountDeniedKeepsWhatARequestWithItsQuotasSpentTook) {
  std::string rules(kQuotaRules);
  rules.replace(0, std::string_view("domain: q\n").size(), "domain: q\ncount_denied: true\n");
  Load(rules);
  Spend("quota", "a");
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Left("regular", "r"), 4);
}

TEST_F(QuotaModeTest, UnderEveryLimitIsOk) {  // ...MixedPerDescriptorModesUnderLimit
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOk, Code::kOk));
  EXPECT_EQ(Left("regular", "r"), 4);
  EXPECT_EQ(Left("quota", "a"), 2);
}

TEST_F(QuotaModeTest,
       AllQuotasOverDeniesSomeOverAdmits) {  // ...QuotaModeOnly{All,Some}OverTheLimit
  Spend("quota", "a");
  Response r = Check(Req("q", {Desc({{"quota", "a"}}), Desc({{"quota2", "b"}})}));
  EXPECT_TRUE(r.allowed);  // one quota left: the request goes through
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOk));  // its status stays OVER
  EXPECT_EQ(Left("quota2", "b"), 4);
  Spend("quota2", "b");
  r = Check(Req("q", {Desc({{"quota", "a"}}), Desc({{"quota2", "b"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOverLimit));
}

TEST_F(QuotaModeTest, AnUnlimitedDescriptorIsNotAQuotaThatPassed) {
  Spend("quota", "a");
  const Response r = Check(Req("q", {Desc({{"quota", "a"}}), Desc({{"free", "x"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_FALSE(r.descriptors[1].quota);
}

TEST_F(QuotaModeTest, GlobalQuotaModeMakesEveryDescriptorAQuota) {  // TestServiceGlobalQuotaMode
  LoadWith("quota_mode: true\n");
  Spend("regular", "r");
  Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_TRUE(r.allowed);  // regular is a quota now, and the other has room
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOk));
  // A descriptor no rule matches counts as a quota that passed.
  r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"nothing", "matches"}})}));
  EXPECT_TRUE(r.allowed);
  Spend("quota", "a");
  r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_FALSE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOverLimit));
}

TEST_F(QuotaModeTest, GlobalShadowModeAdmitsAndKeepsEachStatus) {  // TestServiceGlobalShadowMode
  LoadWith("shadow_mode: true\n");
  Spend("regular", "r");  // (each over-limit answer of Spend was admitted too)
  const Response r = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"nothing", "matches"}})}));
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOk));
  EXPECT_FALSE(r.descriptors[0].limits[0].decision.allowed);
  EXPECT_FALSE(r.descriptors[0].limits[0].shadow);
  // As enforcement would have it, the request that would be denied consumed nothing.
  const Response again = Check(Req("q", {Desc({{"regular", "r"}}), Desc({{"quota", "a"}})}));
  EXPECT_TRUE(again.allowed);
  EXPECT_EQ(Left("quota", "a"), 3);
}

TEST_F(QuotaModeTest, GlobalShadowModeOverQuotaModeIsOk) {  // TestServiceQuotaModeWithShadowMode
  LoadWith("shadow_mode: true\n");
  Spend("quota", "a");
  Spend("quota2", "b");
  const Response r = Check(Req("q", {Desc({{"quota", "a"}}), Desc({{"quota2", "b"}})}));
  EXPECT_TRUE(r.allowed);
  EXPECT_THAT(Codes(r), ElementsAre(Code::kOverLimit, Code::kOverLimit));
}

// Issue 19 (9): near_limit as upstream computes it: admitted with what is used of the limit
// above floor(limit × ratio), the product in single precision (limit 10 at 0.7: 7, where
// double precision would give 6), denials never near.
TEST_F(QuotaModeTest, NearLimitIsPastTheRatioInSinglePrecision) {
  TempDir dir;
  LoadPaths({dir.Write("settings.yaml", "near_limit_ratio: 0.7\n"),
             dir.Write("n.yaml",
                       "domain: n\ndescriptors:\n  - key: k\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 10}\n")});
  std::vector<bool> near;
  for (int i = 0; i < 11; ++i)
    near.push_back(Check1("n", {{"k", "v"}}).descriptors[0].limits[0].near_limit);
  EXPECT_THAT(near, ElementsAre(false, false, false, false, false, false, false,  // used 1..7
                                true, true, true,                                 // used 8..10
                                false));                                          // denied
  Load(
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: "
      "5}\n");
  near.clear();  // the default ratio, 0.8: past 4 of 5
  for (int i = 0; i < 5; ++i)
    near.push_back(Check1("d", {{"k", "v"}}).descriptors[0].limits[0].near_limit);
  EXPECT_THAT(near, ElementsAre(false, false, false, false, true));
}

}  // namespace
}  // namespace sluice::engine
