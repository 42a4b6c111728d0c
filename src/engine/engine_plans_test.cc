// The engine (engine.h) on plans: the plan named by a request's entry or a clients file, the
// default plan when it names none or an unknown one, and counters per full descriptor. Time is a
// ManualClock; t0 = 1700000000 s.

#include <string>
#include <string_view>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"

namespace sluice::engine {
namespace {

using test::EngineTest;
using ::testing::SizeIs;
using testing::TempDir;

constexpr std::string_view kPlans = R"yaml(domain: plans
plans:
  free: {limits: [{requests: 2, window: 1m}]}
  pro:  {limits: [{requests: 5, window: 1m}, {requests: 100, window: 1d, name: pro_daily}]}
default_plan: free
descriptors:
  - key: plan
    descriptors:
      - key: api_key
        plan_from: plan
  - key: api_key
    plan_from: plan
)yaml";

TEST_F(EngineTest, PlanFromTheRequestEntry) {
  Load(kPlans);
  const Response r = Check1("plans", {{"plan", "pro"}, {"api_key", "abc"}});
  EXPECT_TRUE(r.allowed);
  EXPECT_EQ(r.descriptors[0].plan, "pro");
  ASSERT_THAT(r.descriptors[0].limits, SizeIs(2));
  EXPECT_EQ(r.descriptors[0].limits[0].limit.requests, 5u);
  EXPECT_EQ(r.descriptors[0].limits[1].name, "pro_daily");
  EXPECT_EQ(Remaining(r, 0, 0), 4);
  EXPECT_EQ(Remaining(r, 0, 1), 99);
}

TEST_F(EngineTest, UnknownOrMissingPlanFallsBackToDefaultPlan) {
  Load(kPlans);
  Response r = Check1("plans", {{"plan", "gold"}, {"api_key", "abc"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
  EXPECT_EQ(Remaining(r), 1);
  r = Check1("plans", {{"api_key", "abc"}});  // no plan entry, no clients file
  EXPECT_EQ(r.descriptors[0].plan, "free");
  EXPECT_EQ(Remaining(r), 1);
  r = Check1("plans", {{"plan", ""}, {"api_key", "abc"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
}

TEST_F(EngineTest, PlansCountPerFullDescriptor) {
  Load(kPlans);
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(Check1("plans", {{"plan", "pro"}, {"api_key", "abc"}}).allowed);
  EXPECT_FALSE(Check1("plans", {{"plan", "pro"}, {"api_key", "abc"}}).allowed);
  // Another API key on the same plan, and the same key on another plan, are other counters.
  EXPECT_EQ(Remaining(Check1("plans", {{"plan", "pro"}, {"api_key", "def"}})), 4);
  EXPECT_EQ(Remaining(Check1("plans", {{"plan", "free"}, {"api_key", "abc"}})), 1);
  EXPECT_EQ(Remaining(Check1("plans", {{"plan", "gold"}, {"api_key", "abc"}})), 1);
  EXPECT_EQ(Remaining(Check1("plans", {{"api_key", "abc"}})), 1);
}

TEST_F(EngineTest, ClientsCsvLookupByApiKey) {
  TempDir dir;
  dir.Write("plans.yaml", std::string(kPlans) + "clients: clients.csv\n");
  dir.Write("clients.csv", "key,plan\nk-pro,pro\nk-free,free\n");
  LoadPaths({dir.path().string()});
  ASSERT_NE(config_, nullptr);
  Response r = Check1("plans", {{"api_key", "k-pro"}});
  EXPECT_EQ(r.descriptors[0].plan, "pro");
  EXPECT_EQ(Remaining(r), 4);
  r = Check1("plans", {{"api_key", "k-free"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
  r = Check1("plans", {{"api_key", "unlisted"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
  // A plan in the request takes precedence over the clients file.
  r = Check1("plans", {{"plan", "free"}, {"api_key", "k-pro"}});
  EXPECT_EQ(r.descriptors[0].plan, "free");
}

}  // namespace
}  // namespace sluice::engine
