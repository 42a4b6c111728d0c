#include "engine/configured_limits.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/loader.h"

namespace sluice::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::FieldsAre;

TEST(ConfiguredLimitsTest, EveryLimitOfEveryDescriptorAndPlanOnceByItsLabel) {
  const rules::LoadResult loaded = rules::LoadConfigText("t.yaml", R"yaml(domain: api
plans:
  pro: {limits: [{requests: 5, window: 1m}, {requests: 100, window: 1d, name: pro_daily}]}
default_plan: pro
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: path
        limits:
          - {requests: 3, window: 1s, algorithm: token_bucket}
          - {requests: 1000, window: 1d, name: daily}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: other
    limits: [{requests: 2000, window: 1d, name: daily}]
  - key: internal
    rate_limit: {unlimited: true}
  - key: plan
    plan_from: plan
)yaml");
  ASSERT_TRUE(loaded.errors.empty()) << loaded.errors[0].ToString();
  EXPECT_THAT(ConfiguredLimits(*loaded.config),
              ElementsAre(FieldsAre("api", "10-per-1m", 10, 60'000'000),
                          FieldsAre("api", "3-per-1s", 3, 1'000'000),
                          // "daily" twice: the first (a name given to two limits is one series)
                          FieldsAre("api", "daily", 1000, 86'400'000'000),
                          FieldsAre("api", "5-per-1m", 5, 60'000'000),
                          FieldsAre("api", "pro_daily", 100, 86'400'000'000)));
}

}  // namespace
}  // namespace sluice::engine
