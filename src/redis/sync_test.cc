// Merges on real Redis (decide.lua's mode 5, RedisStore::Sync; consistency: eventual): the
// merged state is the one algo::ChargeCompact computes, for states of their own and packed into
// hashes; merged units count for exact decisions; a merge of many states is cut into calls of
// kMaxSyncBatch; a flushed script cache does not fail a merge.

#include <future>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "algo/algorithms.h"
#include "gtest/gtest.h"
#include "redis/redis_store.h"
#include "tests/support/redis_calls.h"
#include "tests/support/redis_server.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using Item = backend::Item;
using Delta = backend::SyncSource::Delta;
using Merged = backend::SyncSource::Merged;
using testing::MakeLimit;

constexpr int64_t kSecond = 1000000;
constexpr int64_t kHour = 3600 * kSecond;

// Merges `deltas` and waits for every call's answer.
std::vector<Merged> MergeNow(RedisStore& store, std::span<const Delta> deltas) {
  struct Gather {
    absl::Mutex mu;
    std::vector<Merged> answers;
  };
  auto gather = std::make_shared<Gather>();
  const size_t calls = store.Sync(deltas, [gather](Merged m) {
    absl::MutexLock lock(&gather->mu);
    gather->answers.push_back(std::move(m));
  });
  absl::MutexLock lock(&gather->mu);
  const auto all_in = [&] { return gather->answers.size() == calls; };
  gather->mu.Await(absl::Condition(&all_in));
  return std::move(gather->answers);
}

int64_t Remaining(RedisStore& store, Item item) {
  item.cost = 0;
  auto result = testing::DecideNow(store, {item});
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->decisions[0].remaining : -1;
}

class SyncTest : public ::testing::TestWithParam<uint32_t> {  // RedisStore::Options::buckets
 protected:
  SyncTest()
      : client_(testing::OpenRedis({server_.url()}, false, 2s, SystemClock::Get())),
        store_(client_.get(), {.buckets = GetParam()}) {}

  testing::RedisServer server_;
  std::unique_ptr<Client> client_;
  RedisStore store_;
};

INSTANTIATE_TEST_SUITE_P(Layouts, SyncTest, ::testing::Values(0u, 16u),
                         [](const auto& info) { return info.param == 0 ? "Keys" : "Packed"; });

TEST_P(SyncTest, TheMergedStateIsChargeCompacts) {
  for (Algorithm algorithm :
       {Algorithm::kTokenBucket, Algorithm::kFixedWindow, Algorithm::kSlidingWindow}) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    const Limit limit = MakeLimit(algorithm, 50, kHour);
    const std::string key = absl::StrCat("m", static_cast<int>(algorithm));
    const Item item{.limit = &limit, .limit_id = 3, .key = key};
    algo::CompactState expected;
    int64_t last = 0;
    // Units of now's window, of the window before (a sliding window weighs them in), none (a
    // read), and many (past the limit).
    for (const auto& [units, back] :
         std::vector<std::pair<uint64_t, int64_t>>{{3, 0}, {2, kHour}, {0, 0}, {80, 0}, {1, 0}}) {
      const Delta delta{.item = item, .units = units, .counted_at_us = last - back};
      auto merged = MergeNow(store_, std::span(&delta, 1));
      ASSERT_EQ(merged.size(), 1u);
      ASSERT_TRUE(merged[0].status.ok()) << merged[0].status;
      ASSERT_EQ(merged[0].states.size(), 1u);
      if (last == 0) {  // (the first merge: its time was not known, so it counted in no window)
        if (algorithm != Algorithm::kTokenBucket) {
          EXPECT_EQ(merged[0].states[0], algo::CompactState{});
          last = merged[0].now_us;
          const Delta again{.item = item, .units = units, .counted_at_us = last};
          merged = MergeNow(store_, std::span(&again, 1));
          ASSERT_TRUE(merged[0].status.ok());
        }
        algo::ChargeCompact(expected, merged[0].now_us, merged[0].now_us, limit, units);
      } else {
        algo::ChargeCompact(expected, last - back, merged[0].now_us, limit, units);
      }
      last = merged[0].now_us;
      EXPECT_EQ(merged[0].states[0], expected) << units << " units";
    }
    // 86 units counted now (a bucket's have drained a little): past the limit of 50.
    EXPECT_EQ(Remaining(store_, item), 0);
  }
}

TEST_P(SyncTest, MergedUnitsCountForExactDecisions) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 20, kHour);
  const Item item{.limit = &limit, .limit_id = 4, .key = "x"};
  ASSERT_EQ(Remaining(store_, item), 20);
  auto first = MergeNow(store_, std::vector<Delta>{{.item = item, .units = 0, .counted_at_us = 0}});
  const Delta delta{.item = item, .units = 7, .counted_at_us = first[0].now_us};
  auto merged = MergeNow(store_, std::span(&delta, 1));
  ASSERT_TRUE(merged[0].status.ok());
  EXPECT_EQ(merged[0].states[0].aux, 7u);
  EXPECT_EQ(Remaining(store_, item), 13);
}

TEST_P(SyncTest, ManyStatesGoInCallsOfAtMostTheBatch) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 20, kHour);
  std::vector<std::string> keys;
  for (size_t i = 0; i < 2 * RedisStore::kMaxSyncBatch + 10; ++i) keys.push_back(absl::StrCat(i));
  auto first = MergeNow(
      store_,
      std::vector<Delta>{{.item = {.limit = &limit, .key = "t"}, .units = 0, .counted_at_us = 0}});
  std::vector<Delta> deltas;
  for (const std::string& key : keys) {
    deltas.push_back({.item = {.limit = &limit, .limit_id = 5, .key = key},
                      .units = 2,
                      .counted_at_us = first[0].now_us});
  }
  const uint64_t before = store_.GetStats().sync_calls;
  auto merged = MergeNow(store_, deltas);
  EXPECT_EQ(merged.size(), 3u);
  EXPECT_EQ(store_.GetStats().sync_calls - before, 3u);
  std::vector<bool> seen(deltas.size());
  for (const Merged& m : merged) {
    ASSERT_TRUE(m.status.ok()) << m.status;
    ASSERT_EQ(m.states.size(), m.deltas.size());
    for (size_t j = 0; j < m.deltas.size(); ++j) {
      seen[m.deltas[j]] = true;
      EXPECT_EQ(m.states[j].aux, 2u);
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), static_cast<long>(deltas.size()));
}

TEST_P(SyncTest, MergesSurviveAFlushedScriptCache) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 10, kSecond);
  const Delta delta{
      .item = {.limit = &limit, .limit_id = 6, .key = "f"}, .units = 1, .counted_at_us = 0};
  ASSERT_TRUE(MergeNow(store_, std::span(&delta, 1))[0].status.ok());
  std::this_thread::sleep_for(200ms);  // (the SCRIPT LOAD that learns the SHA, after the reply)
  ASSERT_TRUE(testing::RedisCommand(*client_, {"SCRIPT", "FLUSH"}).ok());
  auto merged = MergeNow(store_, std::span(&delta, 1));
  ASSERT_TRUE(merged[0].status.ok()) << merged[0].status;
  EXPECT_GE(store_.GetStats().noscript_reloads, 1u);
}

}  // namespace
}  // namespace sluice::redis
