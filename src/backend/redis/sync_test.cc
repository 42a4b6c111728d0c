// Merges on real Redis (decide.lua's mode 5, RedisStore::Sync; consistency: eventual): the
// merged state is the one algo::ChargeCompact computes, for states of their own and packed into
// hashes; merged units count for exact decisions; a merge of many states is cut into calls of
// kMaxSyncBatch, never between a state's two deltas; a flushed script cache does not fail a merge.
// Fences (Delta::fence_us): a lease of a state a merge fenced takes nothing until the fence ends,
// alone (mode 4) or in a batch (mode 6, where the other states are leased as usual); the fence is a
// key of its own in the state's slot, which goes on its own and which a later, shorter fence does
// not bring forward.

#include <algorithm>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "algo/algorithms.h"
#include "backend/redis/redis_store.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_store/redis_calls.h"
#include "tests/support/units.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using Item = backend::Item;
using Delta = backend::SyncSource::Delta;
using Merged = backend::SyncSource::Merged;
using Grant = backend::LeaseSource::Grant;
using testing::MakeLimit;
using testing::Remaining;
using testing::TakeLease;

using sluice::testing::kHour;
using sluice::testing::kMs;
using sluice::testing::kSecond;

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

// A lease by a call of decide.lua's mode 4 of its own, on the state `store` places `item` in.
absl::StatusOr<LeaseReply> LeaseAlone(Client& client, const RedisStore& store, const Item& item,
                                      uint64_t want, int64_t life_us) {
  const RedisStore::Place place = store.StatePlace(*item.limit, item.limit_id, item.key);
  const DecideItem it{item.limit, place.key, 0, false, false, place.field};
  auto promise = std::make_shared<std::promise<absl::StatusOr<Reply>>>();
  auto future = promise->get_future();
  client.Send(place.key, EncodeLease("", it, want, life_us),
              [promise](absl::StatusOr<Reply> r) { promise->set_value(std::move(r)); });
  absl::StatusOr<Reply> reply = future.get();
  if (!reply.ok()) return reply.status();
  return ParseLeaseReply(*reply, 1);
}

// The key of the fence of `item`'s state (decide.lua's "Fences").
std::string FenceKey(const RedisStore& store, const Item& item) {
  const RedisStore::Place place = store.StatePlace(*item.limit, item.limit_id, item.key);
  return place.field.empty() ? place.key + ":f" : absl::StrCat(place.key, ":f:", place.field);
}

int64_t Integer(Client& client, const std::vector<std::string>& command) {
  auto reply = testing::RedisCommand(client, command, command[1]);
  EXPECT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->type, Reply::Type::kInteger) << reply->str;
  return reply.ok() ? reply->integer : -100;
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

// A state's deltas (a copy's two windows, adjacent) share a call even where the batch is full:
// split over two calls, the later one's could run first and its reply, lacking the earlier delta,
// come back last, and the merge would keep it.
TEST_P(SyncTest, AStatesTwoDeltasShareACallWhereTheBatchIsFull) {
  const Limit limit = MakeLimit(Algorithm::kSlidingWindow, 100, kHour);
  auto first = MergeNow(
      store_,
      std::vector<Delta>{{.item = {.limit = &limit, .key = "t"}, .units = 0, .counted_at_us = 0}});
  const int64_t now = first[0].now_us;
  std::vector<std::string> keys;
  for (size_t i = 0; i + 1 < RedisStore::kMaxSyncBatch; ++i) keys.push_back(absl::StrCat("k", i));
  keys.insert(keys.end(), {"edge", "edge", "next"});
  std::vector<Delta> deltas;
  for (const std::string& key : keys) {
    deltas.push_back(
        {.item = {.limit = &limit, .limit_id = 6, .key = key}, .units = 1, .counted_at_us = now});
  }
  const size_t previous = RedisStore::kMaxSyncBatch - 1;  // the batch's last room: "edge"'s
  deltas[previous].counted_at_us = now - kHour;           // previous window, then its current one
  auto merged = MergeNow(store_, deltas);
  ASSERT_EQ(merged.size(), 2u);
  for (const Merged& m : merged) {
    ASSERT_TRUE(m.status.ok()) << m.status;
    ASSERT_EQ(m.states.size(), m.deltas.size());
    EXPECT_LE(m.deltas.size(), RedisStore::kMaxSyncBatch + 1);
    const auto at = [&m](size_t d) {
      return std::find(m.deltas.begin(), m.deltas.end(), d) - m.deltas.begin();
    };
    const auto n = static_cast<long>(m.deltas.size());
    EXPECT_EQ(at(previous) < n, at(previous + 1) < n) << "the state's two deltas went in two calls";
    if (at(previous + 1) < n) {  // read back after both, in order: a unit in each window
      algo::CompactState expected;
      algo::ChargeCompact(expected, now - kHour, m.now_us, limit, 1);
      algo::ChargeCompact(expected, now, m.now_us, limit, 1);
      EXPECT_EQ(m.states[at(previous + 1)], expected);
    }
  }
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

// A merge that fences its state (100 ms): leases of it, batched (mode 6) or alone (mode 4),
// take nothing and change nothing, and say why; the fence key has an expiry (the fence's end
// rounded up to the ms), is gone once it ends, and the state is leased again.
TEST_P(SyncTest, AFencedStateIsLeasedAgainOnlyOnceItsFenceEnds) {
  constexpr int64_t kFence = 100 * kMs;
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kTokenBucket}) {
    SCOPED_TRACE(AlgorithmName(algorithm));
    const Limit limit = MakeLimit(algorithm, 20, kHour);
    const std::string key = absl::StrCat("fenced", static_cast<int>(algorithm));
    const Item item{.limit = &limit, .limit_id = 7, .key = key};
    const std::string fence = FenceKey(store_, item);
    auto read = MergeNow(store_, std::vector<Delta>{{.item = item, .counted_at_us = 0}});
    ASSERT_TRUE(read[0].status.ok()) << read[0].status;
    const Delta delta{
        .item = item, .units = 3, .counted_at_us = read[0].now_us, .fence_us = kFence};
    auto merged = MergeNow(store_, std::span(&delta, 1));
    ASSERT_TRUE(merged[0].status.ok()) << merged[0].status;
    const int64_t fence_ends = merged[0].now_us + kFence;
    EXPECT_EQ(Remaining(store_, item), 17);
    const int64_t pttl = Integer(*client_, {"PTTL", fence});
    EXPECT_GT(pttl, 0);
    EXPECT_LE(pttl, kFence / kMs + 1);

    auto lease = TakeLease(store_, item, 5, 100 * kMs);
    ASSERT_TRUE(lease.ok()) << lease.status();
    if (lease->now_us >= fence_ends) GTEST_SKIP() << "too slow: the fence ended before the lease";
    EXPECT_TRUE(lease->fenced);
    EXPECT_EQ(lease->granted, 0u);
    EXPECT_EQ(lease->left, 0u);
    EXPECT_EQ(lease->ends_us, lease->now_us);
    auto alone = LeaseAlone(*client_, store_, item, 5, 100 * kMs);
    ASSERT_TRUE(alone.ok()) << alone.status();
    if (alone->now_us < fence_ends) {
      EXPECT_TRUE(alone->grants[0].fenced);
      EXPECT_EQ(alone->grants[0].granted, 0u);
      EXPECT_EQ(alone->grants[0].ends_us, alone->now_us);
    }
    EXPECT_EQ(Remaining(store_, item), 17);  // nothing taken

    std::this_thread::sleep_for(150ms);
    EXPECT_EQ(Integer(*client_, {"EXISTS", fence}), 0);
    lease = TakeLease(store_, item, 5, 100 * kMs);
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_GE(lease->now_us, fence_ends);
    EXPECT_FALSE(lease->fenced);
    EXPECT_EQ(lease->granted, 5u);
    EXPECT_EQ(lease->left, 12u);
    alone = LeaseAlone(*client_, store_, item, 1, 100 * kMs);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_FALSE(alone->grants[0].fenced);
    EXPECT_EQ(alone->grants[0].granted, 1u);
  }
}

TEST_P(SyncTest, AMergeWithoutAFenceLeavesTheStateLeasable) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 20, kHour);
  const Item item{.limit = &limit, .limit_id = 8, .key = "open"};
  auto read = MergeNow(store_, std::vector<Delta>{{.item = item, .counted_at_us = 0}});
  ASSERT_TRUE(read[0].status.ok()) << read[0].status;
  const Delta delta{.item = item, .units = 3, .counted_at_us = read[0].now_us};
  ASSERT_TRUE(MergeNow(store_, std::span(&delta, 1))[0].status.ok());
  EXPECT_EQ(Integer(*client_, {"EXISTS", FenceKey(store_, item)}), 0);
  auto lease = TakeLease(store_, item, 5, 100 * kMs);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_FALSE(lease->fenced);
  EXPECT_EQ(lease->granted, 5u);
  EXPECT_EQ(lease->left, 12u);
}

// A read (no units) fences too; a later merge with no fence, or a shorter one, leaves the fence
// as it was (another instance's copy may need it); a longer one moves it on.
TEST_P(SyncTest, AFenceIsOnlyEverMovedOn) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 20, kHour);
  const Item item{.limit = &limit, .limit_id = 9, .key = "long"};
  const std::string fence = FenceKey(store_, item);
  const auto merge = [&](uint64_t units, int64_t fence_us) {
    const Delta delta{.item = item, .units = units, .counted_at_us = 0, .fence_us = fence_us};
    auto merged = MergeNow(store_, std::span(&delta, 1));
    ASSERT_TRUE(merged[0].status.ok()) << merged[0].status;
  };
  const auto fenced = [&] {
    auto lease = TakeLease(store_, item, 1, 100 * kMs);
    EXPECT_TRUE(lease.ok()) << lease.status();
    return lease.ok() && lease->fenced && lease->granted == 0;
  };
  ASSERT_NO_FATAL_FAILURE(merge(0, 10 * kSecond));
  EXPECT_TRUE(fenced());
  EXPECT_EQ(Remaining(store_, item), 20);
  EXPECT_GT(Integer(*client_, {"PTTL", fence}), 9000);
  ASSERT_NO_FATAL_FAILURE(merge(2, 0));
  EXPECT_GT(Integer(*client_, {"PTTL", fence}), 9000);
  EXPECT_TRUE(fenced());
  ASSERT_NO_FATAL_FAILURE(merge(0, 50 * kMs));
  EXPECT_GT(Integer(*client_, {"PTTL", fence}), 9000);
  EXPECT_TRUE(fenced());
  ASSERT_NO_FATAL_FAILURE(merge(0, 30 * kSecond));
  EXPECT_GT(Integer(*client_, {"PTTL", fence}), 20000);
  EXPECT_TRUE(fenced());
}

// In one call of several leases (mode 6), the fenced states' take nothing and the others' are
// taken as they would be alone; RedisStore's batches answer each lease so.
TEST_P(SyncTest, ABatchOfLeasesRefusesOnlyItsFencedStates) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 20, kHour);
  const Item fenced{.limit = &limit, .limit_id = 10, .key = "fenced"};
  const Item open{.limit = &limit, .limit_id = 10, .key = "open"};
  const std::vector<Delta> deltas = {{.item = fenced, .counted_at_us = 0, .fence_us = 10 * kSecond},
                                     {.item = open, .counted_at_us = 0}};
  auto merged = MergeNow(store_, deltas);
  ASSERT_EQ(merged.size(), 1u);
  ASSERT_TRUE(merged[0].status.ok()) << merged[0].status;

  std::vector<LeaseAsk> asks;
  for (const Item* item : {&fenced, &open, &fenced, &open}) {
    const RedisStore::Place place = store_.StatePlace(limit, item->limit_id, item->key);
    asks.push_back(
        {.item = {&limit, place.key, 0, false, false, place.field}, .want = 2, .life_us = kSecond});
  }
  auto promise = std::make_shared<std::promise<absl::StatusOr<Reply>>>();
  auto future = promise->get_future();
  client_->Send(asks[0].item.key, EncodeLeases("", asks),
                [promise](absl::StatusOr<Reply> r) { promise->set_value(std::move(r)); });
  const absl::StatusOr<Reply> reply = future.get();
  ASSERT_TRUE(reply.ok()) << reply.status();
  auto parsed = ParseLeaseReply(*reply, asks.size());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::vector<LeaseGrant>& grants = parsed->grants;
  for (size_t i : {0u, 2u}) {
    EXPECT_TRUE(grants[i].fenced) << i;
    EXPECT_EQ(grants[i].granted, 0u) << i;
    EXPECT_EQ(grants[i].left, 0u) << i;
    EXPECT_EQ(grants[i].ends_us, parsed->now_us) << i;
  }
  EXPECT_FALSE(grants[1].fenced);
  EXPECT_EQ(grants[1].granted, 2u);
  EXPECT_EQ(grants[1].left, 18u);
  EXPECT_FALSE(grants[3].fenced);
  EXPECT_EQ(grants[3].granted, 2u);
  EXPECT_EQ(grants[3].left, 16u);  // it saw what the first took
  EXPECT_EQ(Remaining(store_, fenced), 20);
  EXPECT_EQ(Remaining(store_, open), 16);

  // Through RedisStore: while the first lease's call is held back, the next two queue and go in
  // one call.
  RedisStore store(client_.get(), {.max_in_flight = 1, .buckets = GetParam()});
  const Item first{.limit = &limit, .limit_id = 10, .key = "first"};
  ASSERT_TRUE(TakeLease(store, first, 1, kSecond).ok());  // sent as text: learns the SHA
  std::this_thread::sleep_for(200ms);                     // (its SCRIPT LOAD, after the reply)
  auto admin = testing::OpenRedis({server_.url()}, false);
  const uint64_t calls_before = store.GetStats().lease_calls;
  ASSERT_EQ(testing::RedisCommand(*admin, {"CLIENT", "PAUSE", "300", "WRITE"})->str, "OK");
  const Item batch[] = {first, fenced, open};
  auto granted = testing::AllAtOnce<Grant>(3, [&](size_t i, RedisStore::GrantDone done) {
    store.Lease(batch[i], 2, kSecond, std::move(done));
  });
  EXPECT_EQ(store.GetStats().lease_calls - calls_before, 2u);
  for (const auto& grant : granted) ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_FALSE(granted[0]->fenced);
  EXPECT_EQ(granted[0]->granted, 2u);
  EXPECT_TRUE(granted[1]->fenced);
  EXPECT_EQ(granted[1]->granted, 0u);
  EXPECT_EQ(granted[1]->ends_us, granted[1]->now_us);
  EXPECT_FALSE(granted[2]->fenced);
  EXPECT_EQ(granted[2]->granted, 2u);
  EXPECT_EQ(granted[2]->left, 14u);
}

// On a cluster a fence is in its state's slot: merges that fence states on every node succeed,
// and every lease of them then takes nothing, in batches (mode 6) or alone (mode 4), with states
// of their own and packed.
TEST(FenceClusterTest, AFenceIsInItsStatesSlot) {
  testing::RedisCluster cluster(3);
  ASSERT_TRUE(cluster.created());
  auto client = testing::OpenRedis({cluster.url(0)}, true, 5s);
  ASSERT_TRUE(client->Ready()) << client->last_error();
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 20, kHour);
  std::vector<std::string> keys;
  for (int i = 0; i < 30; ++i) keys.push_back(absl::StrCat("k", i));
  for (uint32_t buckets : {0u, 16u}) {
    for (bool batch : {true, false}) {
      SCOPED_TRACE(absl::StrCat(buckets, " buckets, batch_cluster ", batch));
      RedisStore store(client.get(), {.key_prefix = absl::StrCat("c", buckets, batch, ":"),
                                      .buckets = buckets,
                                      .batch_cluster = batch});
      std::vector<Delta> deltas;
      std::set<std::string> nodes;
      for (const std::string& key : keys) {
        const Item item{.limit = &limit, .limit_id = 1, .key = key};
        const RedisStore::Place place = store.StatePlace(limit, 1, key);
        EXPECT_EQ(KeySlot(FenceKey(store, item)), KeySlot(place.key)) << key;
        nodes.insert(client->NodeFor(place.key));
        deltas.push_back({.item = item, .units = 1, .counted_at_us = 0, .fence_us = 10 * kSecond});
      }
      EXPECT_EQ(nodes.size(), 3u);
      for (const Merged& m : MergeNow(store, deltas)) ASSERT_TRUE(m.status.ok()) << m.status;
      auto grants =
          testing::AllAtOnce<Grant>(keys.size(), [&](size_t i, RedisStore::GrantDone done) {
            store.Lease(deltas[i].item, 2, kSecond, std::move(done));
          });
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_TRUE(grants[i].ok()) << keys[i] << ": " << grants[i].status();
        EXPECT_TRUE(grants[i]->fenced) << keys[i];
        EXPECT_EQ(grants[i]->granted, 0u) << keys[i];
      }
    }
  }
}

}  // namespace
}  // namespace sluice::redis
