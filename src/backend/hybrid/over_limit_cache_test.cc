// backend::OverLimitCache over a memory store standing in for Redis, with a manual clock: denials
// are answered without a call until their retry_after, never anything the store would admit, and
// a reset (here, or elsewhere through the epoch) or a changed limit ends them.

#include "backend/hybrid/over_limit_cache.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/memory/memory_store.h"
#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "tests/support/units.h"

namespace sluice::backend {
namespace {

using sluice::testing::kSecond;
using sluice::testing::kT0;

// The store, counting calls, with a reset epoch the test moves (a reset "elsewhere").
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(const Clock* clock)
      : store({.max_entries = 4096, .shards = 4}, clock), clock_(clock) {}

  void Decide(std::span<const Item> items, int64_t, std::span<Decision> out, Done done) override {
    ++calls;
    const int64_t now = clock_->NowMicros();
    const bool allowed = store.DecideAll(items, now, out);
    done({.status = absl::OkStatus(), .allowed = allowed, .decided_at_us = now});
  }
  void Refund(std::span<const Item>, int64_t, int64_t, RefundDone done) override {
    done(absl::OkStatus());
  }
  void Reset(std::span<const Item> items, ResetDone done) override {
    size_t n = 0;
    for (const Item& item : items) n += store.Reset(item.limit_id, item.key) ? 1 : 0;
    ++epoch;
    done(n);
  }
  void ReadResetEpoch(EpochDone done) override {
    ++epoch_reads;
    if (epoch_down) return done(absl::UnavailableError("down"));
    done(epoch);
  }
  bool answers_inline() const override { return true; }

  store::MemoryStore store;
  int calls = 0;
  int epoch_reads = 0;
  int64_t epoch = 7;
  bool epoch_down = false;

 private:
  const Clock* clock_;
};

class OverLimitCacheTest : public ::testing::Test {
 protected:
  OverLimitCacheTest() : clock_(kT0), backend_(&clock_), cache_(&backend_, &clock_, {}) {}

  Item MakeItem(const Limit* limit, std::string_view key, uint64_t cost = 1) {
    return {.limit = limit, .limit_id = 42, .key = key, .cost = cost};
  }

  // Decides through the cache (which answers inline over this backend).
  Outcome Decide(std::vector<Item> items, std::vector<Decision>* out = nullptr) {
    std::vector<Decision> decisions(items.size());
    std::optional<Outcome> got;
    cache_.Decide(items, clock_.NowMicros(), decisions, [&](const Outcome& o) { got = o; });
    EXPECT_TRUE(got.has_value());
    if (out != nullptr) *out = decisions;
    return *got;
  }
  bool Admit(const Limit* limit, std::string_view key, uint64_t cost = 1) {
    return Decide({MakeItem(limit, key, cost)}).allowed;
  }

  ManualClock clock_;
  CountingBackend backend_;
  OverLimitCache cache_;
  // 3 per second, fixed windows aligned to the second (kT0 starts one).
  Limit window_{
      .algorithm = Algorithm::kFixedWindow, .requests = 3, .window_us = kSecond, .burst = {}};
};

TEST_F(OverLimitCacheTest, DeniedKeyCostsNoCallsUntilItsRetryAfter) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Admit(&window_, "alice"));
  clock_.Advance(100000);
  std::vector<Decision> out;
  EXPECT_FALSE(Decide({MakeItem(&window_, "alice")}, &out).allowed);  // the backend denies
  EXPECT_EQ(out[0].retry_after_us, 900000);
  EXPECT_EQ(backend_.calls, 4);
  // The next request asks for the first reading of the epoch (this backend answers it inline,
  // so that request is answered here already); from then on, none calls.
  EXPECT_FALSE(Admit(&window_, "alice"));
  const int calls = backend_.calls;
  for (int i = 0; i < 100; ++i) {
    clock_.Advance(8000);  // up to 0.9 s after the denial
    ASSERT_FALSE(Decide({MakeItem(&window_, "alice")}, &out).allowed) << i;
    EXPECT_FALSE(out[0].allowed);
    EXPECT_EQ(out[0].remaining, 0);
    EXPECT_EQ(out[0].retry_after_us, 900000 - 8000 * (i + 1)) << i;
  }
  EXPECT_EQ(backend_.calls, calls);
  EXPECT_EQ(cache_.GetStats().hits, 101u);
  // The epoch was read again while in use, at most every kEpochReadUs.
  EXPECT_GE(backend_.epoch_reads, 3);
  EXPECT_LE(backend_.epoch_reads, 5);
  // Retry_after over (the next window): the backend decides, and admits.
  clock_.Advance(100000);
  EXPECT_TRUE(Admit(&window_, "alice"));
  EXPECT_EQ(backend_.calls, calls + 1);
  // Another key was never cached.
  EXPECT_TRUE(Admit(&window_, "bob"));
}

TEST_F(OverLimitCacheTest, SmallerCostOrChangedLimitAsksTheBackend) {
  Limit bigger = window_;
  bigger.requests = 10;
  ASSERT_TRUE(Admit(&window_, "k", 2));
  EXPECT_FALSE(Admit(&window_, "k", 2));  // denied for cost 2: 1 left
  EXPECT_FALSE(Admit(&window_, "k", 2));  // reads the epoch
  int calls = backend_.calls;
  EXPECT_FALSE(Admit(&window_, "k", 3));  // a larger cost: cached
  EXPECT_EQ(backend_.calls, calls);
  EXPECT_TRUE(Admit(&window_, "k", 1));  // a smaller one may pass: the backend says
  EXPECT_EQ(backend_.calls, calls + 1);
  // The limit raised by a reload (same state id): the cached denial does not apply.
  calls = backend_.calls;
  EXPECT_TRUE(Admit(&bigger, "k", 2));
  EXPECT_EQ(backend_.calls, calls + 1);
}

TEST_F(OverLimitCacheTest, ResetHereOrElsewhereEndsTheDenials) {
  for (int i = 0; i < 4; ++i) Admit(&window_, "alice");
  Admit(&window_, "alice");  // epoch read
  int calls = backend_.calls;
  ASSERT_FALSE(Admit(&window_, "alice"));
  ASSERT_EQ(backend_.calls, calls);

  // Through this instance: at once.
  const Item item = MakeItem(&window_, "alice");
  std::optional<absl::StatusOr<size_t>> reset;
  cache_.Reset({&item, 1}, [&](absl::StatusOr<size_t> n) { reset = n; });
  ASSERT_TRUE(reset.has_value() && reset->ok());
  EXPECT_EQ(**reset, 1u);
  EXPECT_TRUE(Admit(&window_, "alice"));

  // Elsewhere: the backend's state reset and its epoch moved behind the cache's back.
  for (int i = 0; i < 3; ++i) Admit(&window_, "alice");
  clock_.Advance(ResetEpochWatch::kReadUs);
  Admit(&window_, "alice");  // reads the epoch (still 8), cached from here
  calls = backend_.calls;
  ASSERT_FALSE(Admit(&window_, "alice"));
  ASSERT_EQ(backend_.calls, calls);
  backend_.store.Reset(42, "alice");
  ++backend_.epoch;
  // Until the next reading the cache still denies (a reset elsewhere is seen within
  // kEpochFreshUs); the reading due kEpochReadUs after the last one drops the entry.
  clock_.Advance(ResetEpochWatch::kReadUs);
  EXPECT_TRUE(Admit(&window_, "alice"));
  // (The reset through this instance moved the epoch too, and was seen as a change.)
  EXPECT_EQ(cache_.GetStats().epoch_changes, 2u);
  EXPECT_EQ(cache_.GetStats().entries, 0u);
}

TEST_F(OverLimitCacheTest, NoAnswerWithoutAFreshEpoch) {
  for (int i = 0; i < 4; ++i) Admit(&window_, "alice");
  Admit(&window_, "alice");
  int calls = backend_.calls;
  ASSERT_FALSE(Admit(&window_, "alice"));
  ASSERT_EQ(backend_.calls, calls);
  // The epoch cannot be read: once the last reading is kEpochFreshUs old, every request goes
  // to the backend (which applies the failure policy when it is down too).
  backend_.epoch_down = true;
  clock_.Advance(ResetEpochWatch::kReadUs);
  EXPECT_FALSE(Admit(&window_, "alice"));
  EXPECT_EQ(backend_.calls, calls);  // still fresh: 250 ms old
  clock_.Advance(ResetEpochWatch::kFreshUs - ResetEpochWatch::kReadUs);
  EXPECT_FALSE(Admit(&window_, "alice"));
  EXPECT_EQ(backend_.calls, calls + 1);
}

TEST_F(OverLimitCacheTest, CountDeniedAndShadowItemsReachTheBackend) {
  Limit other = window_;
  other.requests = 100;
  for (int i = 0; i < 4; ++i) Admit(&window_, "alice");
  Admit(&window_, "alice");
  const int calls = backend_.calls;
  // Another item of the request counts denied requests: it must be counted by the backend.
  Item counted = MakeItem(&other, "global");
  counted.limit_id = 43;
  counted.count_denied = true;
  EXPECT_FALSE(Decide({MakeItem(&window_, "alice"), counted}).allowed);
  EXPECT_EQ(backend_.calls, calls + 1);
  // Without count_denied the other item is answered here: allowed, its state unread.
  counted.count_denied = false;
  std::vector<Decision> out;
  EXPECT_FALSE(Decide({MakeItem(&window_, "alice"), counted}, &out).allowed);
  EXPECT_EQ(backend_.calls, calls + 1);
  EXPECT_TRUE(out[1].allowed);
  EXPECT_FALSE(out[0].allowed);

  // A shadow item's denial is not cached (it does not deny the request).
  Item shadow = MakeItem(&window_, "shadowed");
  shadow.shadow = true;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Decide({shadow}).allowed);
  const int before = backend_.calls;
  EXPECT_TRUE(Decide({shadow}).allowed);
  EXPECT_EQ(backend_.calls, before + 1);
}

// A count_denied item's own denial is never kept nor answered here, whatever the algorithm: each
// of its costs must reach the backend, which records it past the limit.
TEST_F(OverLimitCacheTest, ACountDeniedItemsDenialsAllReachTheBackend) {
  const Algorithm all[] = {Algorithm::kTokenBucket, Algorithm::kLeakyBucket,
                           Algorithm::kFixedWindow, Algorithm::kSlidingLog,
                           Algorithm::kSlidingWindow};
  uint64_t id = 500;
  for (const Algorithm a : all) {
    SCOPED_TRACE(AlgorithmName(a));
    const Limit limit{.algorithm = a,
                      .requests = 5,
                      .window_us = 60 * kSecond,
                      .burst = a == Algorithm::kLeakyBucket ? std::optional<uint64_t>(4)
                                                            : std::nullopt};  // capacity 5
    Item report = MakeItem(&limit, "tokens", 4);
    report.limit_id = ++id;
    report.count_denied = true;
    Item plain = report;
    plain.count_denied = false;
    plain.cost = 1;
    const size_t kept = cache_.GetStats().entries;  // (the plain items' of the algorithms before)
    EXPECT_TRUE(Decide({report}).allowed);
    const int calls = backend_.calls;
    for (int i = 0; i < 5; ++i) EXPECT_FALSE(Decide({report}).allowed);
    EXPECT_EQ(backend_.calls, calls + 5);
    EXPECT_EQ(cache_.GetStats().entries, kept) << "a count_denied denial was kept";
    // All 24 were recorded, 19 past the limit: a look denies.
    const Decision look = backend_.store.Decide(limit, report.limit_id, "tokens", 0);
    EXPECT_FALSE(look.allowed);
    // A denial kept for the state before (a plain item's) does not answer a count_denied one.
    EXPECT_FALSE(Decide({plain}).allowed);
    EXPECT_FALSE(Decide({plain}).allowed);
    const int before = backend_.calls;
    EXPECT_FALSE(Decide({report}).allowed);
    EXPECT_EQ(backend_.calls, before + 1);
  }
}

TEST_F(OverLimitCacheTest, BoundedUnderAFloodOfDeniedKeys) {
  OverLimitCache small(&backend_, &clock_, {.max_entries = 64});
  const Limit none{
      .algorithm = Algorithm::kFixedWindow, .requests = 1, .window_us = kSecond, .burst = {}};
  std::vector<std::string> keys;
  for (int i = 0; i < 5000; ++i) keys.push_back(absl::StrCat("flood-", i));
  for (const std::string& key : keys) {
    for (int round = 0; round < 2; ++round) {
      const Item item = MakeItem(&none, key);
      Decision d;
      small.Decide({&item, 1}, clock_.NowMicros(), {&d, 1}, [](const Outcome&) {});
    }
    ASSERT_LE(small.GetStats().entries, 64u);
  }
  EXPECT_GE(small.GetStats().entries, 60u);
}

// Whatever the traffic, a request the cache denies is one the backend would deny at that moment
// (it never admits by itself, so it cannot over-admit; this checks it does not deny wrongly).
TEST_F(OverLimitCacheTest, EveryCachedDenialIsTheBackendsDenial) {
  const Limit limits[] = {
      {.algorithm = Algorithm::kTokenBucket, .requests = 5, .window_us = kSecond, .burst = {}},
      {.algorithm = Algorithm::kSlidingWindow, .requests = 4, .window_us = kSecond, .burst = {}},
      {.algorithm = Algorithm::kSlidingLog, .requests = 3, .window_us = kSecond, .burst = {}},
      {.algorithm = Algorithm::kLeakyBucket, .requests = 4, .window_us = kSecond, .burst = {}},
      window_};
  std::mt19937_64 random(1);
  int hits = 0;
  for (int step = 0; step < 20000; ++step) {
    clock_.Advance(static_cast<int64_t>(random() % 40000));
    const Limit* limit = &limits[random() % std::size(limits)];
    const std::string key = absl::StrCat("k", random() % 3);
    Item item = MakeItem(limit, key, 1 + random() % 2);
    item.limit_id = static_cast<uint64_t>(limit - limits);
    const int calls = backend_.calls;
    std::vector<Decision> out;
    const Outcome outcome = Decide({item}, &out);
    if (backend_.calls != calls) continue;  // the backend decided
    ++hits;
    ASSERT_FALSE(outcome.allowed);
    // The store itself, asked the same request now, denies it (a denial consumes nothing).
    Decision look;
    ASSERT_FALSE(backend_.store.DecideAll({&item, 1}, clock_.NowMicros(), {&look, 1}))
        << "step " << step << ": a cached denial of a request the store admits";
  }
  EXPECT_GT(hits, 1000);
}

}  // namespace
}  // namespace sluice::backend
