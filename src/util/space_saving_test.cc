// Tests for util::SpaceSaving: its bounds, checked against exact counts of seeded Zipf streams
// (the shape of real traffic: a few keys carry most of it), and JoinedTop's over several sketches.

#include "util/space_saving.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::util {
namespace {

// `count` keys "k<rank>" drawn from a Zipf distribution of exponent `s` over `universe` ranks.
std::vector<std::string> ZipfStream(size_t count, size_t universe, double s, uint32_t seed) {
  std::vector<double> weights(universe);
  for (size_t r = 0; r < universe; ++r) weights[r] = 1.0 / std::pow(static_cast<double>(r + 1), s);
  std::discrete_distribution<size_t> rank(weights.begin(), weights.end());
  std::mt19937 rng(seed);
  std::vector<std::string> stream;
  stream.reserve(count);
  for (size_t i = 0; i < count; ++i) stream.push_back("k" + std::to_string(rank(rng)));
  return stream;
}

std::map<std::string, uint64_t> Exact(const std::vector<std::string>& stream) {
  std::map<std::string, uint64_t> counts;
  for (const auto& key : stream) ++counts[key];
  return counts;
}

// Every bound the header states, for every key of the stream.
void ExpectBounds(const SpaceSaving& sketch, const std::map<std::string, uint64_t>& exact,
                  uint64_t total) {
  const uint64_t m = total / sketch.capacity();
  ASSERT_EQ(sketch.total(), total);
  ASSERT_LE(sketch.Floor(), m);
  for (const auto& [key, w] : exact) {
    const SpaceSaving::Entry* e = sketch.Find(key);
    if (e == nullptr) {
      EXPECT_LE(w, sketch.Floor()) << key;
      continue;
    }
    EXPECT_LE(e->count - e->error, w) << key;
    EXPECT_GE(e->count, w) << key;
    EXPECT_LE(e->error, m) << key;
  }
}

TEST(SpaceSavingTest, AStreamOfFewerKeysThanCountersIsCountedExactly) {
  SpaceSaving sketch(8);
  for (int i = 0; i < 5; ++i) sketch.Add("a");
  sketch.Add("b", 3);
  sketch.Add("c");
  const auto top = sketch.Top(10);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].key, "a");
  EXPECT_EQ(top[0].count, 5u);
  EXPECT_EQ(top[1].key, "b");
  EXPECT_EQ(top[1].count, 3u);
  EXPECT_EQ(top[2].key, "c");
  for (const auto& e : top) EXPECT_EQ(e.error, 0u);
  EXPECT_EQ(sketch.Floor(), 0u);
}

TEST(SpaceSavingTest, ANewKeyTakesTheLeastCountedCounterAndInheritsItsCountAsError) {
  SpaceSaving sketch(2);
  sketch.Add("a", 5);
  sketch.Add("b", 2);
  sketch.Add("c");  // replaces b (2): count 3, error 2
  EXPECT_EQ(sketch.Find("b"), nullptr);
  ASSERT_NE(sketch.Find("c"), nullptr);
  EXPECT_EQ(sketch.Find("c")->count, 3u);
  EXPECT_EQ(sketch.Find("c")->error, 2u);
  EXPECT_EQ(sketch.Floor(), 3u);
  sketch.Add("a");
  EXPECT_EQ(sketch.Find("a")->count, 6u);
  EXPECT_EQ(sketch.Find("a")->error, 0u);
}

TEST(SpaceSavingTest, OnZipfStreamsEveryBoundHoldsAndTheHeavyKeysAreFoundInOrder) {
  for (const double s : {0.8, 1.1, 1.5}) {
    const auto stream = ZipfStream(200000, 50000, s, 7);
    const auto exact = Exact(stream);
    SpaceSaving sketch(1000);
    for (const auto& key : stream) sketch.Add(key);
    ExpectBounds(sketch, exact, stream.size());
    // Every key heavier than N / capacity is counted; the three heaviest come first, in order;
    // each of the ten listed first weighs at least the tenth heaviest key's weight less N /
    // capacity (a heavier key can only rank below it by the error of an estimate).
    const uint64_t m = stream.size() / sketch.capacity();
    std::vector<uint64_t> weights;
    for (const auto& [key, w] : exact) {
      if (w > m) {
        EXPECT_NE(sketch.Find(key), nullptr) << key << " s=" << s;
      }
      weights.push_back(w);
    }
    std::sort(weights.rbegin(), weights.rend());
    const auto top = sketch.Top(10);
    ASSERT_EQ(top.size(), 10u);
    for (size_t r = 0; r < 3; ++r) EXPECT_EQ(top[r].key, "k" + std::to_string(r)) << s;
    for (const auto& e : top) EXPECT_GE(exact.at(e.key) + m, weights[9]) << e.key << " s=" << s;
  }
}

TEST(SpaceSavingTest, WeightsCountAsThatManyAdds) {
  const auto stream = ZipfStream(50000, 5000, 1.1, 3);
  std::map<std::string, uint64_t> exact;
  SpaceSaving sketch(100);
  uint64_t total = 0;
  std::mt19937 rng(5);
  for (const auto& key : stream) {
    const uint64_t w = 1 + rng() % 4;
    exact[key] += w;
    total += w;
    sketch.Add(key, w);
  }
  ExpectBounds(sketch, exact, total);
}

TEST(SpaceSavingTest, JoinedTopBoundsTheJoinedStream) {
  // Three "minutes" of different traffic: the joined answer bounds the keys' sums.
  std::vector<std::unique_ptr<SpaceSaving>> minutes;
  std::map<std::string, uint64_t> exact;
  uint64_t total = 0;
  for (uint32_t minute = 0; minute < 3; ++minute) {
    minutes.push_back(std::make_unique<SpaceSaving>(200));
    for (const auto& key : ZipfStream(30000, 20000, 1.0 + 0.2 * minute, 11 + minute)) {
      minutes.back()->Add(key);
      ++exact[key];
      ++total;
    }
  }
  const std::vector<const SpaceSaving*> all = {minutes[0].get(), minutes[1].get(),
                                               minutes[2].get()};
  const auto top = JoinedTop(all, 50);
  ASSERT_EQ(top.size(), 50u);
  uint64_t floors = 0;
  for (const auto* s : all) floors += s->Floor();
  for (size_t i = 0; i < top.size(); ++i) {
    const uint64_t w = exact[top[i].key];
    EXPECT_LE(top[i].count - top[i].error, w) << top[i].key;
    EXPECT_GE(top[i].count, w) << top[i].key;
    if (i > 0) {
      EXPECT_GE(top[i - 1].count, top[i].count);
    }
  }
  // A key missing from the answer weighs at most the 50th count (else it would rank above it)
  // or is absent from every sketch, hence at most the sum of their floors.
  for (const auto& [key, w] : exact) {
    bool listed = false;
    for (const auto& e : top) listed = listed || e.key == key;
    if (!listed) {
      EXPECT_LE(w, std::max(top.back().count, floors)) << key;
    }
  }
  EXPECT_LE(floors, total / 200);
  EXPECT_EQ(top[0].key, "k0");
}

TEST(SpaceSavingTest, ClearForgetsEveryKey) {
  SpaceSaving sketch(2);
  sketch.Add("a");
  sketch.Add("b");
  sketch.Add("c");
  sketch.Clear();
  EXPECT_EQ(sketch.total(), 0u);
  EXPECT_TRUE(sketch.Top(5).empty());
  EXPECT_EQ(sketch.Floor(), 0u);
  sketch.Add("d");
  EXPECT_EQ(sketch.Find("d")->count, 1u);
  EXPECT_EQ(sketch.Find("d")->error, 0u);
}

}  // namespace
}  // namespace sluice::util
