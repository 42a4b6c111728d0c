#include "sim/sim.h"

#include <sstream>

#include "gtest/gtest.h"

namespace sluice::sim {
namespace {

TEST(SimLimitSpec, ParsesAlgorithmRequestsWindowAndBurst) {
  auto fixed = ParseLimitSpec("fixed_window:100/1s");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(fixed->requests, 100u);
  EXPECT_EQ(fixed->window_us, 1000000);
  EXPECT_FALSE(fixed->burst.has_value());
  auto bucket = ParseLimitSpec("gcra:10/1m30s:burst=20");
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  EXPECT_EQ(bucket->algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(bucket->window_us, 90000000);
  EXPECT_EQ(bucket->burst, 20u);
}

TEST(SimLimitSpec, RefusesMalformedSpecsWithTheExpectedForm) {
  for (const char* bad : {"fixed_window", "nope:1/1s", "fixed_window:100", "fixed_window:x/1s",
                          "fixed_window:1/1x", "token_bucket:1/1s:b=2", "token_bucket:1/1s:burst=",
                          "token_bucket:1/1s:burst=0", "fixed_window:-1/1s"}) {
    auto limit = ParseLimitSpec(bad);
    ASSERT_FALSE(limit.ok()) << bad;
    EXPECT_NE(limit.status().message().find("ALGORITHM:N/WINDOW"), std::string_view::npos)
        << limit.status().message();
  }
}

TEST(SimMode, ParsesTheThreeModes) {
  EXPECT_EQ(*ParseMode("exact"), Mode::kExact);
  EXPECT_EQ(*ParseMode("leased"), Mode::kLeased);
  EXPECT_EQ(*ParseMode("eventual"), Mode::kEventual);
  EXPECT_FALSE(ParseMode("fast").ok());
  EXPECT_EQ(ModeName(Mode::kEventual), "eventual");
}

}  // namespace
}  // namespace sluice::sim
