// backend::Eventual over a shared backend standing in for Redis (its states decided by src/algo,
// its merges by algo::ChargeCompact, as decide.lua's modes 1 and 5 do), with a manual clock:
// one instance alone is exact; several over-admit by no more than the bound of eventual.h; a
// copy too old is not decided on; units admitted while a merge is out, or whose merge failed,
// are merged later, never lost.

#include "backend/hybrid/eventual.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backend/hybrid/leases.h"
#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "tests/support/limits.h"
#include "tests/support/units.h"

namespace sluice::backend {
namespace {

using sluice::testing::kMs;
using sluice::testing::kSecond;
using sluice::testing::kT0;

// The shared states: exact decisions and merges, on the manual clock's time.
class Shared final : public Backend, public SyncSource, public LeaseSource {
 public:
  explicit Shared(const Clock* clock) : clock_(clock) {}

  void Decide(std::span<const Item> items, int64_t, std::span<Decision> out, Done done) override {
    ++decides;
    const int64_t now = clock_->NowMicros();
    bool allowed = true;
    std::vector<algo::CompactState> copies;
    for (size_t i = 0; i < items.size(); ++i) {
      copies.push_back(states[StateKey(items[i])]);
      out[i] = algo::DecideCompact(copies.back(), now, *items[i].limit, items[i].cost);
      allowed = allowed && out[i].allowed;
    }
    if (allowed) {
      for (size_t i = 0; i < items.size(); ++i) states[StateKey(items[i])] = copies[i];
    }
    done({.status = absl::OkStatus(), .allowed = allowed, .decided_at_us = now});
  }
  void Refund(std::span<const Item>, int64_t, int64_t, RefundDone done) override {
    done(absl::OkStatus());
  }
  void Reset(std::span<const Item> items, ResetDone done) override {
    for (const Item& item : items) states.erase(StateKey(item));
    done(items.size());
  }
  size_t Sync(std::span<const Delta> deltas, MergedDone done) override {
    ++syncs;
    Merged merged;
    for (size_t i = 0; i < deltas.size(); ++i) merged.deltas.push_back(i);
    if (fail_next) {
      fail_next = false;
      merged.status = absl::UnavailableError("down");
      done(std::move(merged));
      return 1;
    }
    merged.now_us = clock_->NowMicros();
    for (const Delta& d : deltas) {
      if (d.fence_us > 0) fenced_until[StateKey(d.item)] = merged.now_us + d.fence_us;
      algo::CompactState& state = states[StateKey(d.item)];
      algo::ChargeCompact(state, d.counted_at_us, merged.now_us, *d.item.limit, d.units);
      merged.states.push_back(state);
      units += d.units;
    }
    if (hold) {
      held.push_back([done, merged] { done(merged); });
    } else {
      done(std::move(merged));
    }
    return 1;
  }

  void ReadResetEpoch(EpochDone done) override { done(0); }
  // A lease as decide.lua's mode 4 takes one (of a window: to its end), refused while a merge's
  // fence lasts.
  void Lease(const Item& item, uint64_t want, int64_t life_us, GrantDone done) override {
    ++leases;
    const int64_t now = clock_->NowMicros();
    if (const auto fence = fenced_until.find(StateKey(item));
        fence != fenced_until.end() && fence->second > now) {
      return done(Grant{.granted = 0, .now_us = now, .ends_us = now, .left = 0, .fenced = true});
    }
    algo::CompactState& state = states[StateKey(item)];
    algo::CompactState look = state;
    const Decision peek = algo::DecideCompact(look, now, *item.limit, 0);
    const uint64_t granted = std::min<uint64_t>(want, static_cast<uint64_t>(peek.remaining));
    if (granted > 0) algo::DecideCompact(state, now, *item.limit, granted);
    const int64_t window_end = now - now % item.limit->window_us + item.limit->window_us;
    done(Grant{.granted = granted,
               .now_us = now,
               .ends_us = std::min(now + life_us, window_end),
               .left = static_cast<uint64_t>(peek.remaining) - granted});
  }

  absl::flat_hash_map<std::string, algo::CompactState> states;
  absl::flat_hash_map<std::string, int64_t> fenced_until;  // the merges' fences
  int leases = 0;
  int decides = 0;
  int syncs = 0;
  uint64_t units = 0;  // merged
  bool fail_next = false;
  bool hold = false;
  std::deque<std::function<void()>> held;

 private:
  const Clock* clock_;
};

using testing::MakeLimit;

class EventualTest : public ::testing::Test {
 protected:
  std::unique_ptr<Eventual> Make() {
    return std::make_unique<Eventual>(&shared_, &shared_, &shared_, &clock_,
                                      Eventual::Options{.sync_interval_us = 100 * kMs});
  }
  Item ItemOf(const Limit& limit, std::string_view key = "k") const {
    return {.limit = &limit,
            .limit_id = 7,
            .key = key,
            .sharing = {.consistency = Consistency::kEventual}};
  }
  // Decides one item; whether admitted.
  static bool Admit(Eventual& e, const Item& item, Decision* out = nullptr) {
    Decision d;
    bool allowed = false;
    e.Decide({&item, 1}, 0, {&d, 1},
             [&](const Outcome& o) { allowed = o.status.ok() && o.allowed; });
    if (out != nullptr) *out = d;
    return allowed;
  }

  ManualClock clock_{kT0};
  Shared shared_{&clock_};
};

TEST_F(EventualTest, OneInstanceAloneIsExact) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100, kSecond);
  const Item item = ItemOf(limit);
  auto e = Make();
  int admitted = 0;
  for (int i = 0; i < 3000; ++i) {  // 3 s at 1000/s
    admitted += Admit(*e, item);
    clock_.Advance(kMs);
  }
  EXPECT_EQ(admitted, 300);       // 100 in each window, as deciding each there would
  EXPECT_LE(shared_.decides, 3);  // the first request, then the copies
  EXPECT_EQ(e->GetStats().local, 3000u - static_cast<uint64_t>(shared_.decides));
}

// cold_keys: lease (Item::hot_key_rate): one instance's stack, Eventual in front of Leases in
// front of the shared backend, as Stack builds it.
struct ColdKeysInstance {
  ColdKeysInstance(Shared* shared, const Clock* clock)
      : leases(shared, shared, clock, {}),
        eventual(&leases, shared, shared, clock,
                 Eventual::Options{.sync_interval_us = 100 * kMs, .leases = &leases}) {}
  Leases leases;
  Eventual eventual;
};

// A key under hot_key_rate on this instance is decided from leases, with nothing merged; one over
// it gets a copy, decided on only once a merge has fenced it (a lease taken before that merge is
// in the state it reads back), and then with no call.
TEST_F(EventualTest, AColdKeyIsDecidedFromLeasesAndAHotOneOnAFencedCopy) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100000, 60 * kSecond);
  ColdKeysInstance a(&shared_, &clock_);
  Item cold = ItemOf(limit, "cold");
  cold.sharing.hot_key_rate = 50;
  for (int i = 0; i < 20; ++i) {  // 10 a second
    ASSERT_TRUE(Admit(a.eventual, cold));
    clock_.Advance(100 * kMs);
  }
  EXPECT_EQ(a.eventual.GetStats().leased, 20u);
  EXPECT_EQ(a.eventual.GetStats().states_synced, 0u);
  EXPECT_LE(shared_.leases, 3);  // a first lease, then ones sized by its rate
  EXPECT_EQ(shared_.decides, 0);
  EXPECT_FALSE(shared_.fenced_until.contains(StateKey(cold)));

  Item hot = ItemOf(limit, "hot");
  hot.sharing.hot_key_rate = 50;
  int requests = 0;
  while (a.eventual.GetStats().exact == 0 && requests < 1000) {  // 1000 a second until promoted
    ASSERT_TRUE(Admit(a.eventual, hot));
    clock_.Advance(kMs);
    ++requests;
  }
  ASSERT_EQ(a.eventual.GetStats().exact, 1u) << "not promoted after " << requests << " requests";
  EXPECT_LE(requests, 60);
  ASSERT_TRUE(Admit(a.eventual, hot));  // a copy not merged yet is not decided on
  EXPECT_EQ(a.eventual.GetStats().exact, 2u);
  const int64_t synced_at = clock_.NowMicros();
  a.eventual.Sync();  // its first merge fences it
  EXPECT_EQ(shared_.fenced_until[StateKey(hot)], synced_at + 300 * kMs);  // V + T
  const uint64_t local = a.eventual.GetStats().local;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(Admit(a.eventual, hot));
  EXPECT_EQ(a.eventual.GetStats().local, local + 50);
  EXPECT_EQ(a.eventual.GetStats().exact, 2u);
}

// A lease refused because another instance decides the state on a copy sends this instance to a
// copy too: no lease is taken while the copy's fence lasts, so none is hidden from it.
TEST_F(EventualTest, AFencedLeaseSendsTheColdInstanceToACopy) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100000, 60 * kSecond);
  ColdKeysInstance a(&shared_, &clock_);
  ColdKeysInstance b(&shared_, &clock_);
  Item item = ItemOf(limit, "shared");
  item.sharing.hot_key_rate = 50;
  while (a.eventual.GetStats().exact == 0) {  // hot on a
    ASSERT_TRUE(Admit(a.eventual, item));
    clock_.Advance(kMs);
  }
  a.eventual.Sync();
  ASSERT_TRUE(shared_.fenced_until.contains(StateKey(item)));
  const int leases = shared_.leases;
  const int decides = shared_.decides;
  ASSERT_TRUE(Admit(b.eventual, item));  // cold on b: a lease, refused; decided exactly
  EXPECT_EQ(shared_.leases, leases + 1);
  EXPECT_EQ(shared_.decides, decides + 1);
  EXPECT_EQ(b.leases.GetStats().units_granted, 0u);
  ASSERT_TRUE(Admit(b.eventual, item));  // fenced: a copy, not a lease
  EXPECT_EQ(shared_.leases, leases + 1);
  EXPECT_EQ(b.eventual.GetStats().exact, 1u);
  b.eventual.Sync();
  ASSERT_TRUE(Admit(b.eventual, item));
  EXPECT_EQ(b.eventual.GetStats().local, 1u);
  EXPECT_EQ(shared_.leases, leases + 1);
}

// A reload that turns cold_keys: lease on (the same limit, so the same state) makes a fresh copy
// one that fences: it is not decided on until a merge has fenced its state, and a merge sent
// before the switch (with no fence) does not make it fresh.
TEST_F(EventualTest, ACopyIsDecidedOnAfterTurningFencesOnOnlyOnceAMergeFenced) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100000, 60 * kSecond);
  ColdKeysInstance a(&shared_, &clock_);
  Item item = ItemOf(limit, "k");  // cold_keys: copy
  ASSERT_TRUE(Admit(a.eventual, item));
  a.eventual.Sync();
  ASSERT_TRUE(Admit(a.eventual, item));
  ASSERT_EQ(a.eventual.GetStats().local, 1u);
  EXPECT_FALSE(shared_.fenced_until.contains(StateKey(item)));
  shared_.hold = true;
  a.eventual.Sync();               // a merge with no fence, out while the reload comes
  item.sharing.hot_key_rate = 50;  // the reload
  ASSERT_TRUE(Admit(a.eventual, item));
  EXPECT_EQ(a.eventual.GetStats().local, 1u) << "an unfenced copy was decided on";
  shared_.hold = false;
  shared_.held.front()();
  shared_.held.clear();
  ASSERT_TRUE(Admit(a.eventual, item));
  EXPECT_EQ(a.eventual.GetStats().local, 1u) << "a merge with no fence made the copy fresh";
  clock_.Advance(100 * kMs);
  a.eventual.Sync();
  ASSERT_TRUE(shared_.fenced_until.contains(StateKey(item)));
  ASSERT_TRUE(Admit(a.eventual, item));
  EXPECT_EQ(a.eventual.GetStats().local, 2u);
}

// An exact decision's reply that comes after a merge's (replies on several connections overtake
// each other) leaves a fencing copy unfresh until the next merge: its state may be older than the
// merge, and a lease taken between the two would be in neither.
TEST_F(EventualTest, AnExactReplyAfterAFencingMergeWaitsForTheNextMerge) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 100000, 60 * kSecond);
  ColdKeysInstance a(&shared_, &clock_);
  Item hot = ItemOf(limit, "hot");
  hot.sharing.hot_key_rate = 50;
  while (a.eventual.GetStats().exact == 0) {
    ASSERT_TRUE(Admit(a.eventual, hot));
    clock_.Advance(kMs);
  }
  a.eventual.Sync();
  ASSERT_TRUE(Admit(a.eventual, hot));
  const uint64_t local = a.eventual.GetStats().local;
  ASSERT_GT(local, 0u);
  // A request of two items of the state cannot be decided on the copy: it goes to the backend,
  // and its reply is adopted.
  const Item two[] = {hot, hot};
  Decision d[2];
  a.eventual.Decide(two, 0, d, [](const Outcome&) {});
  EXPECT_EQ(a.eventual.GetStats().exact, 2u);
  ASSERT_TRUE(Admit(a.eventual, hot));
  EXPECT_EQ(a.eventual.GetStats().local, local) << "decided on a copy adopted after its merge";
  a.eventual.Sync();
  ASSERT_TRUE(Admit(a.eventual, hot));
  EXPECT_EQ(a.eventual.GetStats().local, local + 1);
}

TEST_F(EventualTest, ADenialOnTheCopyCostsNoCallAndSaysWhenToRetry) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 5, kSecond);
  const Item item = ItemOf(limit);
  auto e = Make();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Admit(*e, item));
  clock_.Advance(300 * kMs);
  const int decides = shared_.decides;
  Decision d;
  EXPECT_FALSE(Admit(*e, item, &d));
  EXPECT_EQ(shared_.decides, decides);
  EXPECT_EQ(d.retry_after_us, 700 * kMs);
  EXPECT_EQ(shared_.units, 4u);  // the first went to the backend; the 4 others were merged
}

TEST_F(EventualTest, ACopyTooOldIsNotDecidedOn) {
  const Limit limit = MakeLimit(Algorithm::kTokenBucket, 10, kSecond);
  const Item item = ItemOf(limit);
  auto e = Make();
  ASSERT_TRUE(Admit(*e, item));
  ASSERT_EQ(shared_.decides, 1);
  clock_.Advance(150 * kMs);  // within 2 T of the exact decision: on the copy
  ASSERT_TRUE(Admit(*e, item));
  EXPECT_EQ(shared_.decides, 1);
  shared_.fail_next = true;  // that sync fails: the copy is not refreshed
  clock_.Advance(100 * kMs);
  ASSERT_TRUE(Admit(*e, item));
  EXPECT_EQ(shared_.decides, 2) << "a copy 250 ms old went on being decided on";
}

TEST_F(EventualTest, UnitsAdmittedWhileAMergeIsOutAreMergedNext) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 1000, 10 * kSecond);
  const Item item = ItemOf(limit);
  auto e = Make();
  ASSERT_TRUE(Admit(*e, item));  // exact: the copy
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Admit(*e, item));
  shared_.hold = true;
  e->Sync();
  ASSERT_EQ(shared_.held.size(), 1u);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(Admit(*e, item));  // while the merge is out
  shared_.hold = false;
  shared_.held.front()();
  shared_.held.clear();
  Decision d;
  ASSERT_TRUE(Admit(*e, item, &d));
  EXPECT_EQ(d.remaining, 1000 - 19);  // the merged 11, the 7 charged on top, this one
  e->Sync();
  EXPECT_EQ(shared_.units, 18u);
  EXPECT_EQ(shared_.states[StateKey(item)].aux, 19u);
}

TEST_F(EventualTest, AFailedMergeSendsItsUnitsAgain) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 1000, 10 * kSecond);
  const Item item = ItemOf(limit);
  auto e = Make();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Admit(*e, item));
  shared_.fail_next = true;
  e->Sync();
  EXPECT_EQ(e->GetStats().sync_errors, 1u);
  EXPECT_EQ(shared_.units, 0u);
  ASSERT_TRUE(Admit(*e, item));
  e->Sync();
  EXPECT_EQ(shared_.units, 6u);  // 5 from before the failure, 1 since
  EXPECT_EQ(shared_.states[StateKey(item)].aux, 7u);
}

TEST_F(EventualTest, FailedMergesAcrossAWindowEndLoseNoUnitsOfTheNewWindow) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 1000, kSecond);
  const Item item = ItemOf(limit);
  auto e = Make();
  clock_.Set(kT0 - kT0 % kSecond + kSecond - 50 * kMs);      // 50 ms before a window ends
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Admit(*e, item));  // 1 exact, 3 on the copy
  shared_.fail_next = true;
  e->Sync();
  clock_.Advance(60 * kMs);  // the next window, before a merge is due
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Admit(*e, item));
  shared_.fail_next = true;  // the 3 of the window before and the 5 fail again
  e->Sync();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Admit(*e, item));
  e->Sync();
  EXPECT_EQ(e->GetStats().sync_errors, 2u);
  // The window before is over (its 3 no longer count); this one holds all 7 admitted in it.
  const algo::CompactState state = shared_.states[StateKey(item)];
  EXPECT_EQ(state.idle_at_us, kT0 - kT0 % kSecond + 2 * kSecond);
  EXPECT_EQ(state.aux, 7u);
}

TEST_F(EventualTest, AResetDropsTheCopy) {
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 3, 10 * kSecond);
  const Item item = ItemOf(limit);
  auto e = Make();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Admit(*e, item));
  ASSERT_FALSE(Admit(*e, item));
  e->Reset({&item, 1}, [](absl::StatusOr<size_t>) {});
  EXPECT_TRUE(Admit(*e, item));
}

// Several instances, each sent requests at its own steady rate, syncing every T: the admissions
// of any window pass the limit by no more than the bound of eventual.h (here D = 0), and without
// merging (one sync at the start only) they would pass it by far more.
class EventualBoundTest : public ::testing::TestWithParam<Algorithm> {};

INSTANTIATE_TEST_SUITE_P(Algorithms, EventualBoundTest,
                         ::testing::Values(Algorithm::kFixedWindow, Algorithm::kTokenBucket,
                                           Algorithm::kSlidingWindow),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

TEST_P(EventualBoundTest, OverAdmissionStaysUnderTheBound) {
  constexpr int kInstances = 4;
  constexpr int64_t kT = 100 * kMs;
  ManualClock clock(kT0);
  Shared shared(&clock);
  const Limit limit = MakeLimit(GetParam(), 200, kSecond);
  const Item item = {.limit = &limit,
                     .limit_id = 1,
                     .key = "hot",
                     .sharing = {.consistency = Consistency::kEventual}};
  std::vector<std::unique_ptr<Eventual>> fleet;
  for (int i = 0; i < kInstances; ++i) {
    fleet.push_back(std::make_unique<Eventual>(&shared, &shared, &shared, &clock,
                                               Eventual::Options{.sync_interval_us = kT}));
  }
  // 4 s; each instance gets a request every 1 ms + its index (about 4 times the limit in all).
  std::vector<std::vector<int64_t>> admitted_at(kInstances);
  uint64_t decisions = 0;
  for (int64_t t = 0; t < 4 * kSecond; t += 250, clock.Advance(250)) {
    for (int i = 0; i < kInstances; ++i) {
      if (t % (kMs + int64_t{250} * i) != 0) continue;
      ++decisions;
      Decision d;
      bool allowed = false;
      fleet[i]->Decide({&item, 1}, 0, {&d, 1}, [&](const Outcome& o) { allowed = o.allowed; });
      if (allowed) admitted_at[i].push_back(t);
    }
  }
  // The bound: what the other instances admit in any span of V + T + D = 3 T.
  const auto most_in_span = [](const std::vector<int64_t>& at, int64_t span) {
    size_t most = 0;
    for (size_t a = 0, b = 0; b < at.size(); ++b) {
      while (at[b] - at[a] >= span) ++a;
      most = std::max(most, b - a + 1);
    }
    return most;
  };
  std::vector<size_t> in_span;
  for (const auto& at : admitted_at) in_span.push_back(most_in_span(at, 3 * kT));
  std::sort(in_span.begin(), in_span.end());
  size_t bound = 0;  // the instances but the one that admits most in a span, which may be `i`
  for (int i = 0; i + 1 < kInstances; ++i) bound += in_span[static_cast<size_t>(i) + 1];
  // Admissions per window of the limit (a bucket: over any span of W, it admits at most its
  // capacity plus the refill, 2 N; a sliding window at most 2 N across a boundary, N in an
  // aligned window).
  std::vector<int64_t> all;
  for (const auto& at : admitted_at) all.insert(all.end(), at.begin(), at.end());
  std::sort(all.begin(), all.end());
  size_t worst = 0;
  for (int64_t start = 0; start < 4 * kSecond; start += kSecond) {
    worst = std::max<size_t>(worst, std::count_if(all.begin(), all.end(), [&](int64_t t) {
                               return t >= start && t < start + kSecond;
                             }));
  }
  const size_t allowance = GetParam() == Algorithm::kTokenBucket ? 2 * 200 : 200;
  EXPECT_LE(worst, allowance + bound) << "bound " << bound;
  EXPECT_GE(worst, 200u);  // the load is well over the limit
  EXPECT_GT(shared.syncs, 4 * 30);
  uint64_t local = 0;
  for (const auto& e : fleet) local += e->GetStats().local;
  EXPECT_GT(local, decisions * 9 / 10);  // most decisions made on the copies
}

}  // namespace
}  // namespace sluice::backend
