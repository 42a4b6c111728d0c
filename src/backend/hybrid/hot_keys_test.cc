// backend::HotKeys on a clock of whole microseconds given by hand: a state is promoted once its
// own rate passes hot_key_rate and demoted after seconds under half of it; a cold state is never
// promoted, whatever it inherits from the states it displaces; memory stays fixed under 100 000
// distinct keys; Top lists the k fastest promoted states.

#include "backend/hybrid/hot_keys.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/units.h"

namespace sluice::backend {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

using sluice::testing::kSecond;
constexpr int64_t kHotKeysT0 = int64_t{86400} * kSecond;

class HotKeysTest : public ::testing::Test {
 protected:
  Item MakeItem(std::string_view key, uint32_t rate = 100) const {
    return {
        .limit = &limit_, .limit_id = 7, .key = key, .cost = 1, .sharing = {.hot_key_rate = rate}};
  }
  // `per_second` requests of `key`, evenly spread over the next second; whether the last one
  // found the state promoted.
  bool Second(HotKeys& hot, std::string_view key, int per_second) {
    bool promoted = false;
    const Item item = MakeItem(key);
    for (int i = 0; i < per_second; ++i) {
      promoted = hot.Record(item, now_ + i * kSecond / per_second);
    }
    now_ += kSecond;
    return promoted;
  }
  // `seconds` seconds of several keys, each at its rate, their requests interleaved in time.
  void Run(HotKeys& hot, const std::vector<std::pair<std::string, int>>& rates, int seconds) {
    for (int s = 0; s < seconds; ++s) {
      std::vector<std::pair<int64_t, size_t>> events;  // when, which key
      for (size_t k = 0; k < rates.size(); ++k) {
        for (int i = 0; i < rates[k].second; ++i) {
          events.emplace_back(now_ + i * kSecond / rates[k].second, k);
        }
      }
      std::sort(events.begin(), events.end());
      for (const auto& [t, k] : events) hot.Record(MakeItem(rates[k].first), t);
      now_ += kSecond;
    }
  }

  int64_t now_ = kHotKeysT0;
  Limit limit_{.algorithm = Algorithm::kFixedWindow,
               .requests = 100000,
               .window_us = 60 * kSecond,
               .burst = {}};
};

TEST_F(HotKeysTest, PromotedOnceItsRatePassesHotKeyRateAndNotBefore) {
  HotKeys hot;
  for (int s = 0; s < 5; ++s) EXPECT_FALSE(Second(hot, "alice", 90)) << s;  // under 100/s
  EXPECT_EQ(hot.GetStats().promotions, 0u);
  // At 300/s, promoted within the first second.
  const Item item = MakeItem("alice");
  int promoted_at = -1;
  for (int i = 0; i < 300 && promoted_at < 0; ++i) {
    if (hot.Record(item, now_ + i * kSecond / 300)) promoted_at = i;
  }
  EXPECT_GT(promoted_at, 0);
  EXPECT_LT(promoted_at, 300);
  EXPECT_EQ(hot.GetStats().promoted, 1u);
  EXPECT_EQ(hot.GetStats().promotions, 1u);
}

TEST_F(HotKeysTest, DemotedAfterSecondsUnderHalfTheRateAndNotAboveIt) {
  HotKeys hot;
  for (int s = 0; s < 2; ++s) Second(hot, "bob", 400);
  ASSERT_EQ(hot.GetStats().promoted, 1u);
  // Under the rate but above half of it: stays promoted (hysteresis).
  for (int s = 0; s < 6; ++s) EXPECT_TRUE(Second(hot, "bob", 60)) << s;
  // Under half: promoted for kDemoteAfterSeconds whole seconds more, then demoted.
  for (uint32_t s = 0; s < HotKeys::kDemoteAfterSeconds; ++s) {
    EXPECT_TRUE(Second(hot, "bob", 40)) << s;
  }
  EXPECT_FALSE(Second(hot, "bob", 40));
  EXPECT_EQ(hot.GetStats().promoted, 0u);
  EXPECT_EQ(hot.GetStats().demotions, 1u);
  // Hot again: promoted again.
  EXPECT_TRUE(Second(hot, "bob", 400));
  EXPECT_EQ(hot.GetStats().promotions, 2u);
}

TEST_F(HotKeysTest, AnIdleStateIsDemotedWhenTimeHasPassed) {
  HotKeys hot;
  Second(hot, "carol", 400);
  ASSERT_EQ(hot.GetStats().promoted, 1u);
  now_ += 10 * kSecond;  // nothing at all
  EXPECT_FALSE(hot.Record(MakeItem("carol"), now_));
  EXPECT_EQ(hot.GetStats().promoted, 0u);
}

// Cold keys interleaved with hot ones, and a flood of new keys that keeps every slot changing
// hands (each newcomer inherits the weight of the one it displaces): only the hot ones are ever
// promoted.
TEST_F(HotKeysTest, AColdKeyAmongHotOnesIsNeverPromoted) {
  HotKeys hot(16);
  std::vector<std::string> flood;
  for (int i = 0; i < 2000; ++i) flood.push_back(absl::StrCat("flood-", i));
  const std::vector<std::string> hot_keys = {"h0", "h1", "h2"};
  for (int s = 0; s < 10; ++s) {
    // 500/s for each hot key, 90/s for "cold" (the rate is 100/s), 2000 keys once each.
    for (int i = 0; i < 2000; ++i) {
      const int64_t t = now_ + i * kSecond / 2000;
      if (i % 4 < 3) hot.Record(MakeItem(hot_keys[i % 4]), t);
      if (i % 4 == 3 && (i / 4) % 50 < 9) {
        EXPECT_FALSE(hot.Record(MakeItem("cold"), t)) << s << " " << i;
      }
      hot.Record(MakeItem(flood[i]), t);
    }
    now_ += kSecond;
  }
  const std::vector<HotKeys::Hot> top = hot.Top(10, now_);
  ASSERT_EQ(top.size(), 3u);
  for (const HotKeys::Hot& h : top) EXPECT_THAT(hot_keys, ::testing::Contains(h.key));
  EXPECT_EQ(hot.GetStats().promotions, 3u);  // never demoted in between either
}

TEST_F(HotKeysTest, MemoryStaysBoundedWith100000DistinctKeys) {
  HotKeys hot;
  const size_t before = hot.memory_bytes();
  std::string key;
  for (int64_t i = 0; i < 100000; ++i) {
    key = absl::StrCat("user-", i);
    hot.Record(MakeItem(key), now_ + i * 10);                     // 100 000 a second, each key once
    if (i % 50 == 0) hot.Record(MakeItem("hot"), now_ + i * 10);  // 2000/s
  }
  EXPECT_EQ(hot.memory_bytes(), before);
  EXPECT_EQ(hot.GetStats().tracked, 256u);
  const std::vector<HotKeys::Hot> top = hot.Top(10, now_ + kSecond - 1);
  ASSERT_EQ(top.size(), 1u);  // the one hot key kept its slot throughout
  EXPECT_EQ(top[0].key, "hot");
}

TEST_F(HotKeysTest, TopIsTheKFastestPromotedStatesFastestFirst) {
  HotKeys hot;
  // Keys k0..k14 at 110, 120, ..., 250 requests a second.
  std::vector<std::string> keys;
  std::vector<std::pair<std::string, int>> rates;
  for (int k = 0; k < 15; ++k) {
    keys.push_back(absl::StrCat("k", k));
    rates.emplace_back(keys.back(), 110 + 10 * k);
  }
  Run(hot, rates, 1);
  const std::vector<HotKeys::Hot> top = hot.Top(10, now_ - 1);
  ASSERT_EQ(top.size(), 10u);
  for (size_t i = 0; i < top.size(); ++i) {
    EXPECT_EQ(top[i].key, keys[14 - i]);
    EXPECT_EQ(top[i].limit, "100000/1m fixed_window");
  }
  EXPECT_NEAR(top[0].rate, 250, 1);
  EXPECT_EQ(hot.GetStats().promoted, 15u);
  // A key that stops: demoted after its quiet seconds, it leaves the list.
  rates.pop_back();
  Run(hot, rates, HotKeys::kDemoteAfterSeconds + 1);
  EXPECT_THAT(hot.Top(3, now_ - 1),
              ElementsAre(Field(&HotKeys::Hot::key, "k13"), Field(&HotKeys::Hot::key, "k12"),
                          Field(&HotKeys::Hot::key, "k11")));
  EXPECT_EQ(hot.GetStats().promoted, 14u);
}

}  // namespace
}  // namespace sluice::backend
