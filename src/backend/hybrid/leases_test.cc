// backend::Leases over a memory store standing in for Redis (its leases: a request of the
// granted cost, as decide.lua's mode 4 does for a fixed window), with a manual clock: requests
// are decided locally from leased units, never more than the limit in a window across several
// instances, a state with nothing left goes to the backend, unspent units go back, and resets
// drop leases.

#include "backend/hybrid/leases.h"

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "backend/memory/memory_store.h"
#include "gtest/gtest.h"
#include "sluice/clock.h"
#include "tests/support/units.h"

namespace sluice::backend {
namespace {

using sluice::testing::kSecond;
using sluice::testing::kT0;

// The shared backend: decides, refunds and leases on one store, counting each.
class SharedBackend final : public Backend, public LeaseSource {
 public:
  explicit SharedBackend(const Clock* clock)
      : store({.max_entries = 4096, .shards = 4}, clock), clock_(clock) {}

  void Decide(std::span<const Item> items, int64_t, std::span<Decision> out, Done done) override {
    ++decides;
    const int64_t now = clock_->NowMicros();
    const bool allowed = store.DecideAll(items, now, out);
    done({.status = absl::OkStatus(), .allowed = allowed, .decided_at_us = now});
  }
  void Refund(std::span<const Item> items, int64_t at, int64_t, RefundDone done) override {
    for (const Item& item : items) refunded += item.cost;
    store.Refund(items, at, clock_->NowMicros());
    done(absl::OkStatus());
  }
  void Reset(std::span<const Item> items, ResetDone done) override {
    for (const Item& item : items) store.Reset(item.limit_id, item.key);
    ++epoch;
    done(items.size());
  }
  void ReadResetEpoch(EpochDone done) override { done(epoch); }
  void Lease(const Item& item, uint64_t want, int64_t life_us, GrantDone done) override {
    ++leases;
    wants.push_back(want);
    const int64_t now = clock_->NowMicros();
    Item look = item;
    look.cost = 0;
    Decision d;
    store.DecideAll({&look, 1}, now, {&d, 1});
    const uint64_t granted = std::min<uint64_t>(want, static_cast<uint64_t>(d.remaining));
    if (granted > 0) {
      Item take = item;
      take.cost = granted;
      store.DecideAll({&take, 1}, now, {&d, 1});
    }
    const int64_t window_end = now - now % item.limit->window_us + item.limit->window_us;
    done(Grant{.granted = granted,
               .now_us = now,
               .ends_us = std::min(now + life_us, window_end),
               .left = static_cast<uint64_t>(d.remaining)});
  }

  store::MemoryStore store;
  int decides = 0;
  int leases = 0;
  uint64_t refunded = 0;
  int64_t epoch = 0;
  std::vector<uint64_t> wants;

 private:
  const Clock* clock_;
};

class LeasesTest : public ::testing::Test {
 protected:
  LeasesTest() : clock_(kT0), shared_(&clock_), leases_(&shared_, &shared_, &clock_, {}) {}

  Item MakeItem(std::string_view key, uint64_t cost = 1) const {
    return {.limit = &limit_,
            .limit_id = 1,
            .key = key,
            .cost = cost,
            .sharing = {.instances = 1, .consistency = Consistency::kLeased}};
  }
  Outcome Decide(Leases& leases, const Item& item, Decision* out = nullptr) {
    Decision d;
    std::optional<Outcome> got;
    leases.Decide({&item, 1}, clock_.NowMicros(), {&d, 1}, [&](const Outcome& o) { got = o; });
    EXPECT_TRUE(got.has_value());
    if (out != nullptr) *out = d;
    return *got;
  }

  ManualClock clock_;
  SharedBackend shared_;
  Leases leases_;
  // 100 per minute, fixed windows.
  Limit limit_{.algorithm = Algorithm::kFixedWindow,
               .requests = 100,
               .window_us = 60 * kSecond,
               .burst = {}};
};

TEST_F(LeasesTest, RequestsAreDecidedFromALeaseWithNoCall) {
  const Item item = MakeItem("alice");
  Decision d;
  EXPECT_TRUE(Decide(leases_, item, &d).allowed);  // a first lease: four times the cost
  EXPECT_EQ(shared_.leases, 1);
  EXPECT_EQ(shared_.wants.back(), 4u);
  EXPECT_EQ(d.remaining, 3);  // what the lease has left
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Decide(leases_, item).allowed);
  EXPECT_EQ(shared_.leases, 1);
  clock_.Advance(1000);
  EXPECT_TRUE(Decide(leases_, item).allowed);  // four a ms: the next lease asks for ~8000
  EXPECT_EQ(shared_.leases, 2);
  EXPECT_EQ(shared_.wants.back(), 48u);  // capped: half of what is left (96), one instance
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Decide(leases_, item).allowed);
  EXPECT_EQ(shared_.leases, 2);
  EXPECT_EQ(shared_.decides, 0);            // nothing asked of the backend but the lease
  EXPECT_EQ(leases_.GetStats().local, 8u);  // (the first ones too, once their lease came)
  // Requests that are not leased go to the backend as they are.
  Item exact = item;
  exact.sharing.consistency = Consistency::kExact;
  const int decides = shared_.decides;
  Decide(leases_, exact);
  EXPECT_EQ(shared_.decides, decides + 1);
}

// A window's next lease is about twice the rate its last one was spent at over the life it will
// have (window_lease_life), not over a shorter span: longer leases of a sparse key are what save
// the calls.
TEST_F(LeasesTest, AWindowLeaseIsSizedForTheLifeItWillHave) {
  const Limit limit{.algorithm = Algorithm::kFixedWindow,
                    .requests = 100000,
                    .window_us = 3600 * kSecond,
                    .burst = {}};
  Leases leases(&shared_, &shared_, &clock_, {.life_us = 100000, .window_life_us = 60 * kSecond});
  Item item = MakeItem("sparse");
  item.limit = &limit;
  EXPECT_TRUE(Decide(leases, item).allowed);  // a first lease: four
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(kSecond);  // one a second
    EXPECT_TRUE(Decide(leases, item).allowed);
  }
  clock_.Advance(kSecond);
  EXPECT_TRUE(Decide(leases, item).allowed);
  ASSERT_EQ(shared_.wants.size(), 2u);
  // 4 spent over 4 s: 1/s, twice that over 60 s, and one more.
  EXPECT_EQ(shared_.wants.back(), 121u);
}

// A lease that ended (here with its window) is remembered for one more lease life: the state's
// first lease of the next window is sized by the rate the ended one was spent at, instead of
// starting again from four (on a zipf mix that was one call per key, instance and window). Then
// it is forgotten, and sooner when the table is half full.
TEST_F(LeasesTest, TheNextWindowsFirstLeaseIsSizedByTheRateTheLastOneWasSpentAt) {
  constexpr int64_t kWindow = 10 * kSecond;
  const Limit limit{
      .algorithm = Algorithm::kFixedWindow, .requests = 100000, .window_us = kWindow, .burst = {}};
  const auto run = [&](Leases& leases, std::string_view key) {
    Item item = MakeItem(key);
    item.limit = &limit;
    clock_.Set(kT0 - kT0 % kWindow + kWindow);  // a window's start
    shared_.wants.clear();
    for (int i = 0; i < 100; ++i) {  // ten a second for the whole window
      EXPECT_TRUE(Decide(leases, item).allowed);
      clock_.Advance(kSecond / 10);
    }
    EXPECT_EQ(shared_.wants.size(), 2u);  // four, then one sized by that rate to the window's end
    EXPECT_TRUE(Decide(leases, item).allowed);  // the next window's first request
    return item;
  };
  Leases leases(&shared_, &shared_, &clock_, {.life_us = 100000, .window_life_us = kWindow});
  Item item = run(leases, "steady");
  ASSERT_EQ(shared_.wants.size(), 3u);
  // 96 spent over the 9.6 s its lease lived: 10/s, twice that over 10 s, and one more.
  EXPECT_NEAR(static_cast<double>(shared_.wants.back()), 201, 1);
  // Idle for the rest of that window and a whole life more: forgotten, a first lease again.
  clock_.Advance(2 * kWindow + kSecond);
  EXPECT_TRUE(Decide(leases, item).allowed);
  EXPECT_EQ(shared_.wants.back(), 4u);

  // With room for two states, one ended lease already fills half the table: not remembered.
  Leases small(&shared_, &shared_, &clock_,
               {.life_us = 100000, .window_life_us = kWindow, .max_entries = 2});
  run(small, "crowded");
  ASSERT_EQ(shared_.wants.size(), 3u);
  EXPECT_EQ(shared_.wants.back(), 4u);
}

TEST_F(LeasesTest, AStateThatRanDryLeasesAgainAsSoonAsItsWindowTurns) {
  // Out of quota 30 ms before the window ends: the empty lease sends the state to the backend
  // until then, not for a whole lease interval (100 ms) into the next window.
  const int64_t window_end = kT0 - kT0 % (60 * kSecond) + 60 * kSecond;
  clock_.Set(window_end - 30000);
  const Item item = MakeItem("dry");
  int admitted = 0;
  for (int i = 0; i < 200; ++i) admitted += Decide(leases_, item).allowed ? 1 : 0;
  ASSERT_EQ(admitted, 100);
  ASSERT_FALSE(Decide(leases_, item).allowed);  // an empty lease, then the backend's denial
  clock_.Advance(40000);                        // 10 ms into the next window
  const int decides = shared_.decides;
  EXPECT_TRUE(Decide(leases_, item).allowed);
  EXPECT_EQ(shared_.decides, decides) << "the new window's first request went to the backend";
}

TEST_F(LeasesTest, SeveralInstancesNeverAdmitMoreThanTheLimit) {
  std::vector<std::unique_ptr<Leases>> instances;
  for (int i = 0; i < 4; ++i) {
    instances.push_back(std::make_unique<Leases>(&shared_, &shared_, &clock_, Leases::Options{}));
  }
  std::mt19937_64 random(3);
  limit_.window_us = kSecond;       // 100 per second
  std::map<int64_t, int> admitted;  // per window
  for (int step = 0; step < 20000; ++step) {
    clock_.Advance(static_cast<int64_t>(random() % 2000));  // ~1000 requests a second
    Item item = MakeItem("hot", 1 + random() % 2);
    item.sharing.instances = 4;
    if (Decide(*instances[random() % 4], item).allowed) {
      admitted[clock_.NowMicros() / limit_.window_us] += static_cast<int>(item.cost);
    }
  }
  ASSERT_GT(admitted.size(), 10u);
  int full = 0;
  for (const auto& [window, count] : admitted) {
    EXPECT_LE(count, 100) << "window " << window;
    if (count >= 95) ++full;
  }
  // The load (about 1500 units a window) exceeds the limit: leases hand out nearly all of it.
  EXPECT_GT(full, static_cast<int>(admitted.size()) - 2);
}

// A fixed window that ran dry gets nothing back before it ends but what is given back: it is not
// leased again for ten lease intervals (its denials come from the over-limit cache meanwhile).
TEST_F(LeasesTest, AnExhaustedWindowIsDecidedByTheBackendAndNotLeasedForTenLeaseIntervals) {
  // Leases that could live a minute: the dry spell is still ten intervals, 1 s (units given back
  // by another instance are found within it).
  constexpr int64_t kInterval = 100000;
  Leases leases(&shared_, &shared_, &clock_,
                {.life_us = kInterval, .window_life_us = 60 * kSecond});
  Item all = MakeItem("bob", 100);
  all.sharing.consistency = Consistency::kExact;
  ASSERT_TRUE(Decide(leases, all).allowed);  // nothing left on the backend now
  const Item item = MakeItem("bob", 1);
  Decision d;
  EXPECT_FALSE(Decide(leases, item, &d).allowed);  // an empty lease, then the backend denies
  EXPECT_EQ(shared_.leases, 1);
  EXPECT_GT(d.retry_after_us, 0);
  EXPECT_FALSE(Decide(leases, item).allowed);  // no lease asked for
  EXPECT_EQ(shared_.leases, 1);
  // Two sweeps later: the state holds no lease, and is still remembered as dry.
  clock_.Advance(2 * kInterval);
  EXPECT_FALSE(Decide(leases, item).allowed);
  EXPECT_EQ(shared_.leases, 1);
  clock_.Advance(8 * kInterval);  // ten: asked again
  EXPECT_FALSE(Decide(leases, item).allowed);
  EXPECT_EQ(shared_.leases, 2);
}

// A fixed window that stays over its limit is asked less often the longer it has been dry: after
// ten lease intervals, then after as long as it has been dry, up to an eighth of its window (7.5 s
// of a minute's), not every second to its end. Its next window starts again at ten intervals.
TEST_F(LeasesTest, AWindowThatStaysDryIsAskedLessOftenUpToAnEighthOfItsWindow) {
  constexpr int64_t kInterval = 100000;
  const int64_t window_start = kT0 - kT0 % (60 * kSecond) + 60 * kSecond;
  clock_.Set(window_start + kSecond);
  Leases leases(&shared_, &shared_, &clock_,
                {.life_us = kInterval, .window_life_us = 60 * kSecond});
  Item all = MakeItem("carol", 100);
  all.sharing.consistency = Consistency::kExact;
  ASSERT_TRUE(Decide(leases, all).allowed);
  const Item item = MakeItem("carol", 1);
  std::vector<int64_t> asked;  // the lease intervals since it ran dry at which a lease was asked
  for (int64_t step = 0; step < 590; ++step) {  // to the window's end, a request every interval
    const int before = shared_.leases;
    EXPECT_FALSE(Decide(leases, item).allowed);
    if (shared_.leases > before) asked.push_back(step);
    clock_.Advance(kInterval);
  }
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 10, 20, 40, 80, 155, 230, 305, 380, 455, 530}));
  EXPECT_EQ(leases.GetStats().empty, asked.size());

  // The next window, spent at once by exact callers: dry from its first lease, with no lease
  // granted in between, and still its spell starts again at ten intervals.
  ASSERT_EQ(clock_.NowMicros(), window_start + 60 * kSecond);
  ASSERT_TRUE(Decide(leases, all).allowed);
  EXPECT_FALSE(Decide(leases, item).allowed);  // an empty lease
  EXPECT_EQ(shared_.leases, 12);
  clock_.Advance(9 * kInterval);
  EXPECT_FALSE(Decide(leases, item).allowed);
  EXPECT_EQ(shared_.leases, 12);
  clock_.Advance(kInterval);
  EXPECT_FALSE(Decide(leases, item).allowed);
  EXPECT_EQ(shared_.leases, 13) << "a new window's dry spell starts again at ten intervals";
}

// A lease that ended while its state was in a dry spell (a request costing more than the lease
// held got an empty lease) gives its units back when it ends, not when the spell does.
TEST_F(LeasesTest, AnEndedLeaseGivesItsUnitsBackDuringADrySpell) {
  constexpr int64_t kInterval = 100000;
  const int64_t window_start = kT0 - kT0 % (3600 * kSecond) + 3600 * kSecond;
  clock_.Set(window_start + kSecond);
  limit_.window_us = 3600 * kSecond;  // 100 an hour; a lease lives 1 s
  Leases leases(&shared_, &shared_, &clock_, {.life_us = kInterval, .window_life_us = kSecond});
  ASSERT_TRUE(Decide(leases, MakeItem("dave", 1)).allowed);  // a lease of 4 to 1 s: 3 held
  clock_.Advance(5 * kInterval);
  Item rest = MakeItem("dave", 96);
  rest.sharing.consistency = Consistency::kExact;
  ASSERT_TRUE(Decide(leases, rest).allowed);  // nothing left in the window but the 3 held
  EXPECT_FALSE(Decide(leases, MakeItem("dave", 5)).allowed);  // an empty lease: dry to 1.5 s
  EXPECT_EQ(leases.GetStats().empty, 1u);
  clock_.Advance(7 * kInterval);  // 1.2 s: the lease has ended, the spell has not
  leases.SweepEnded();
  EXPECT_EQ(shared_.refunded, 3u) << "the ended lease's units wait for the dry spell's end";
}

// A sliding window frees units as time passes: one that ran dry is leased again after one lease
// interval, even with leases that could live a minute.
TEST_F(LeasesTest, AnExhaustedSlidingWindowIsLeasedAgainAfterALeaseInterval) {
  constexpr int64_t kInterval = 100000;
  Leases leases(&shared_, &shared_, &clock_,
                {.life_us = kInterval, .window_life_us = 60 * kSecond});
  const Limit sliding{.algorithm = Algorithm::kSlidingWindow,
                      .requests = 100,
                      .window_us = 60 * kSecond,
                      .burst = {}};
  Item all = MakeItem("slide", 100);
  all.limit = &sliding;
  all.sharing.consistency = Consistency::kExact;
  ASSERT_TRUE(Decide(leases, all).allowed);
  Item item = MakeItem("slide", 1);
  item.limit = &sliding;
  EXPECT_FALSE(Decide(leases, item).allowed);  // an empty lease
  EXPECT_EQ(shared_.leases, 1);
  clock_.Advance(kInterval / 2);
  EXPECT_FALSE(Decide(leases, item).allowed);
  EXPECT_EQ(shared_.leases, 1);
  clock_.Advance(kInterval / 2);
  Decide(leases, item);
  EXPECT_EQ(shared_.leases, 2);
}

// A lease that ended is remembered with what its state had left: in the same window the next one
// is still at most half of that (one instance), not sized as a new window's.
TEST_F(LeasesTest, ARememberedLeaseInTheSameWindowIsBoundByWhatWasLeft) {
  const Limit limit{.algorithm = Algorithm::kFixedWindow,
                    .requests = 1000,
                    .window_us = 3600 * kSecond,
                    .burst = {}};
  Leases leases(&shared_, &shared_, &clock_, {.life_us = 100000, .window_life_us = kSecond});
  Item all = MakeItem("near", 990);
  all.limit = &limit;
  all.sharing.consistency = Consistency::kExact;
  ASSERT_TRUE(Decide(leases, all).allowed);
  Item item = MakeItem("near");
  item.limit = &limit;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Decide(leases, item).allowed);  // a first lease: 6 left
  clock_.Advance(kSecond + kSecond / 10);  // the lease ended (its life, 1 s): remembered
  EXPECT_TRUE(Decide(leases, item).allowed);
  ASSERT_EQ(shared_.wants.size(), 2u);
  // 4 spent in its 1 s: twice that over 1 s, and one more, is 9; half of the 6 left is 3.
  EXPECT_EQ(shared_.wants.back(), 3u);
}

TEST_F(LeasesTest, UnspentUnitsGoBackWhenTheLeaseEndsAndAtShutdown) {
  const Item item = MakeItem("carol");
  const auto spend_two = [&] {  // two of a first lease (4 units): two left
    Decide(leases_, item);
    Decide(leases_, item);
  };
  spend_two();
  const uint64_t unspent = leases_.GetStats().units_granted - 2;
  ASSERT_EQ(unspent, 2u);
  clock_.Advance(Leases::Options{}.window_life_us + 1);
  Decide(leases_, MakeItem("dave"));  // a decision sweeps the ended lease
  EXPECT_EQ(shared_.refunded, unspent);
  EXPECT_EQ(leases_.GetStats().units_returned, unspent);
  // At shutdown, every lease's unspent units.
  spend_two();
  const uint64_t before = shared_.refunded;
  bool returned = false;
  leases_.ReturnAll([&] { returned = true; });
  EXPECT_TRUE(returned);
  EXPECT_GT(shared_.refunded, before);
  Decision look;
  Item peek = item;
  peek.cost = 0;
  shared_.store.DecideAll({&peek, 1}, clock_.NowMicros(), {&look, 1});
  EXPECT_EQ(look.remaining, 96);  // four spent, the rest back
}

// The sweep scans the lease table only when something in it is due: with window-long leases a
// scan every 100 ms would hold the lock over the whole table to find nothing. A shorter lease
// taken later still ends on time, and a window's lease gives its units back when it ends.
TEST_F(LeasesTest, TheTableIsScannedOnlyWhenALeaseIsDue) {
  Leases leases(&shared_, &shared_, &clock_, {.life_us = 100000, .window_life_us = 10 * kSecond});
  const int64_t start = clock_.MonotonicMicros();
  const auto tick_until = [&](int64_t at) {  // the Stack's ticker: every 100 ms
    while (clock_.MonotonicMicros() - start < at) {
      clock_.Advance(100000);
      leases.SweepEnded();
    }
  };
  Decide(leases, MakeItem("alice"));  // a first lease of 4 units, ending in 10 s
  const uint64_t scans = leases.GetStats().sweeps;
  tick_until(kSecond);
  EXPECT_EQ(leases.GetStats().sweeps, scans);  // nothing due: no scan
  // A bucket's lease lives 100 ms: its three unspent units are lost when it ends.
  const Limit bucket{
      .algorithm = Algorithm::kTokenBucket, .requests = 100, .window_us = kSecond, .burst = {}};
  Item bob = MakeItem("bob");
  bob.limit = &bucket;
  bob.limit_id = 2;
  Decide(leases, bob);
  tick_until(kSecond + 200000);
  EXPECT_EQ(leases.GetStats().units_lost, 3u);
  tick_until(10 * kSecond - 100000);
  EXPECT_LE(leases.GetStats().sweeps, scans + 3);  // (every 100 ms it would be 100)
  EXPECT_EQ(shared_.refunded, 0u);
  tick_until(10 * kSecond + 100000);
  EXPECT_EQ(shared_.refunded, 3u);  // alice's, within a tick of her lease's end
}

// Two items of one state in a request need their sum: a lease holding enough for each alone
// but not for both sends the request to the backend (it once went unanswered).
TEST_F(LeasesTest, TwoItemsOfOneStateNeedTheirSum) {
  const Item item = MakeItem("frank");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Decide(leases_, item).allowed);  // 1 of 4 left
  const Item both[] = {item, item};
  Decision d[2];
  std::optional<Outcome> got;
  leases_.Decide(both, clock_.NowMicros(), d, [&](const Outcome& o) { got = o; });
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->allowed);  // by the backend: 96 left there
  EXPECT_EQ(shared_.decides, 1);
}

// A lease that answers later: requests of its state that come meanwhile wait for it, and are
// decided from it when it comes, with no call of their own.
class LaterSource final : public LeaseSource {
 public:
  explicit LaterSource(LeaseSource* source) : source_(source) {}
  void Lease(const Item& item, uint64_t want, int64_t life_us, GrantDone done) override {
    pending_.push_back(
        [this, item, want, life_us, done] { source_->Lease(item, want, life_us, done); });
  }
  void Answer() {
    for (auto& answer : pending_) answer();
    pending_.clear();
  }
  size_t pending() const { return pending_.size(); }

 private:
  LeaseSource* source_;
  std::vector<std::function<void()>> pending_;
};

TEST_F(LeasesTest, RequestsWaitForTheirStatesLeaseInFlight) {
  LaterSource later(&shared_);
  Leases leases(&shared_, &later, &clock_, {});
  const Item item = MakeItem("grace", 1);
  std::vector<Decision> out(3);
  int allowed = 0, answered = 0;
  for (int i = 0; i < 3; ++i) {
    leases.Decide({&item, 1}, clock_.NowMicros(), {&out[i], 1}, [&](const Outcome& o) {
      ++answered;
      allowed += o.allowed ? 1 : 0;
    });
  }
  EXPECT_EQ(answered, 0);
  EXPECT_EQ(later.pending(), 1u);  // one lease call for the three
  EXPECT_EQ(shared_.decides, 0);
  later.Answer();  // 4 units
  EXPECT_EQ(answered, 3);
  EXPECT_EQ(allowed, 3);
  EXPECT_EQ(shared_.decides, 0);
  EXPECT_EQ(leases.GetStats().local, 3u);
}

// A reset elsewhere (the epoch moves) may bring the quota back: a lease call that was in flight
// then and comes back empty starts a dry spell of ten intervals, not one as long as the state had
// been dry before.
TEST_F(LeasesTest, AResetElsewhereEndsTheDrySpellOfALeaseInFlight) {
  constexpr int64_t kInterval = 100000;
  const int64_t window_start = kT0 - kT0 % (60 * kSecond) + 60 * kSecond;
  clock_.Set(window_start + kSecond);
  LaterSource later(&shared_);
  Leases leases(&shared_, &later, &clock_, {.life_us = kInterval, .window_life_us = 60 * kSecond});
  Item all = MakeItem("erin", 100);
  all.sharing.consistency = Consistency::kExact;
  ASSERT_TRUE(Decide(leases, all).allowed);
  // Decides `item`, its lease call (if it makes one) answered unless `hold` (`item` must then
  // outlive the answer, as the decisions do).
  std::deque<Decision> out;
  const auto decide = [&](const Item& item, bool hold = false) {
    out.emplace_back();
    leases.Decide({&item, 1}, clock_.NowMicros(), {&out.back(), 1}, [](const Outcome&) {});
    if (!hold) later.Answer();
  };
  const Item item = MakeItem("erin", 1);
  for (int step = 0; step < 230; ++step) {  // 23 s dry: leases asked at 0, 1, 2, 4, 8, 15.5 s
    decide(item);
    clock_.Advance(kInterval);
  }
  decide(item, /*hold=*/true);  // the lease asked at 23 s is out when the key is reset elsewhere
  ASSERT_EQ(later.pending(), 1u);
  ++shared_.epoch;
  clock_.Advance(ResetEpochWatch::kReadUs);
  decide(MakeItem("frank", 1));  // reads the epoch; then both leases are answered, erin's empty
  const int asked = shared_.leases;
  for (int step = 0; step < 10; ++step) {
    clock_.Advance(kInterval);
    decide(item);
  }
  EXPECT_EQ(shared_.leases, asked + 1) << "the state stayed in the spell it had before the reset";
}

// A reset that completes later (Redis slow or stopped): the request's items are long gone by
// then, and the leases of their states are still dropped.
TEST_F(LeasesTest, AResetCompletingLaterNeedsNoItems) {
  class LaterReset final : public Backend {
   public:
    explicit LaterReset(Backend* inner) : inner_(inner) {}
    void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                Done done) override {
      inner_->Decide(items, now_us, out, std::move(done));
    }
    void Refund(std::span<const Item> items, int64_t at, int64_t now_us, RefundDone done) override {
      inner_->Refund(items, at, now_us, std::move(done));
    }
    void Reset(std::span<const Item> items, ResetDone done) override {
      pending = [n = items.size(), done = std::move(done)] { done(n); };
    }
    std::function<void()> pending;

   private:
    Backend* inner_;
  } later(&shared_);
  Leases leases(&later, &shared_, &clock_, {});
  {
    const std::string key = "heidi";
    const Item item = MakeItem(key);
    ASSERT_TRUE(Decide(leases, item).allowed);  // a lease of 4: 3 unspent
    leases.Reset({&item, 1}, [](absl::StatusOr<size_t>) {});
  }
  ASSERT_TRUE(later.pending);
  later.pending();
  EXPECT_EQ(leases.GetStats().units_lost, 3u);
}

TEST_F(LeasesTest, ResetsHereAndElsewhereDropLeases) {
  const Item item = MakeItem("erin");
  Decide(leases_, item);  // a lease of 4
  std::optional<absl::StatusOr<size_t>> reset;
  leases_.Reset({&item, 1}, [&](absl::StatusOr<size_t> n) { reset = n; });
  ASSERT_TRUE(reset.has_value());
  int leases = shared_.leases;
  Decide(leases_, item);  // the lease's units are gone: a new one
  EXPECT_EQ(shared_.leases, leases + 1);
  // A reset elsewhere: the epoch moves, read within a quarter second.
  ++shared_.epoch;
  clock_.Advance(ResetEpochWatch::kReadUs);
  leases = shared_.leases;
  Decide(leases_, item);
  EXPECT_EQ(shared_.leases, leases + 1);
  EXPECT_GE(leases_.GetStats().units_lost, 3u);
}

// hot_keys: lease: exact items with a hot_key_rate are decided from leases while hot.
class HotKeyLeasesTest : public LeasesTest {
 protected:
  Item MakeHot(std::string_view key, uint32_t hot_key_rate) const {
    Item item = MakeItem(key);
    item.sharing.consistency = Consistency::kExact;
    item.sharing.hot_key_rate = hot_key_rate;
    return item;
  }
  // `per_second` requests of `item` a second for `seconds`, and as many of `also` (if any) at
  // `also_per_second`, each checked by `each` (item, whether the backend decided it, outcome).
  void Run(const Item& item, int per_second, int seconds,
           const std::function<void(bool by_backend, const Outcome&)>& each) {
    for (int i = 0; i < per_second * seconds; ++i) {
      clock_.Advance(kSecond / per_second);
      const int decides = shared_.decides;
      const Outcome o = Decide(leases_, item);
      if (each) each(shared_.decides > decides, o);
    }
  }
};

TEST_F(HotKeyLeasesTest, AnExactKeyUnderItsHotKeyRateGoesToTheBackendEveryTime) {
  limit_.requests = 100000;
  int requests = 0;
  Run(MakeHot("ivan", 200), 150, 3, [&](bool by_backend, const Outcome& o) {
    ++requests;
    EXPECT_TRUE(by_backend);
    EXPECT_TRUE(o.allowed);
  });
  EXPECT_EQ(shared_.decides, requests);
  EXPECT_EQ(shared_.leases, 0);
  EXPECT_EQ(leases_.GetHotKeyStats().promotions, 0u);
  EXPECT_TRUE(leases_.TopHotKeys(10).empty());
}

TEST_F(HotKeyLeasesTest, AnExactKeyOverItsHotKeyRateIsDecidedFromLeasesAndAColdOneIsNot) {
  limit_.requests = 100000;
  const Item hot = MakeHot("judy", 200);
  const Item cold = MakeHot("ken", 200);
  int by_backend = 0;
  for (int i = 0; i < 3000; ++i) {  // 1000/s of judy, 50/s of ken
    clock_.Advance(kSecond / 1000);
    int decides = shared_.decides;
    ASSERT_TRUE(Decide(leases_, hot).allowed);
    by_backend += shared_.decides - decides;
    if (i % 20 == 0) {
      decides = shared_.decides;
      ASSERT_TRUE(Decide(leases_, cold).allowed);
      EXPECT_EQ(shared_.decides, decides + 1) << "the cold key, request " << i;
    }
  }
  EXPECT_LT(by_backend, 300);  // until its rate passed 200/s
  EXPECT_GT(leases_.GetStats().local, 2600u);
  EXPECT_LT(shared_.leases, 30);
  const std::vector<HotKeys::Hot> top = leases_.TopHotKeys(10);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].key, "judy");
  EXPECT_NEAR(top[0].rate, 1000, 5);
}

TEST_F(HotKeyLeasesTest, HotExactKeysOnFourInstancesNeverAdmitMoreThanTheLimit) {
  std::vector<std::unique_ptr<Leases>> instances;
  for (int i = 0; i < 4; ++i) {
    instances.push_back(std::make_unique<Leases>(&shared_, &shared_, &clock_, Leases::Options{}));
  }
  std::mt19937_64 random(5);
  limit_.window_us = kSecond;       // 100 per second
  std::map<int64_t, int> admitted;  // per window
  for (int step = 0; step < 20000; ++step) {
    clock_.Advance(static_cast<int64_t>(random() % 2000));  // ~250 requests a second each
    Item item = MakeHot("hot", 100);
    item.cost = 1 + random() % 2;
    item.sharing.instances = 4;
    if (Decide(*instances[random() % 4], item).allowed) {
      admitted[clock_.NowMicros() / limit_.window_us] += static_cast<int>(item.cost);
    }
  }
  ASSERT_GT(admitted.size(), 10u);
  int total = 0, full = 0;
  for (const auto& [window, count] : admitted) {
    EXPECT_LE(count, 100) << "window " << window;
    total += count;
    if (count >= 95) ++full;
  }
  EXPECT_GT(full, static_cast<int>(admitted.size()) - 2);
  uint64_t local = 0;
  for (const auto& instance : instances) {
    EXPECT_EQ(instance->GetHotKeyStats().promotions, 1u);
    local += instance->GetStats().local;
  }
  // Leased, though its domain is exact: most admissions (a request of cost 2 counts once).
  EXPECT_GT(local, static_cast<uint64_t>(total) / 3) << "admitted " << total;
}

TEST_F(HotKeyLeasesTest, ADemotedKeyGoesBackToTheBackendAndItsLeaseGivesBackWhatItHas) {
  limit_.requests = 100000;
  const Item item = MakeHot("leo", 200);
  Run(item, 1000, 2, nullptr);
  ASSERT_EQ(leases_.GetHotKeyStats().promoted, 1u);
  const uint64_t local = leases_.GetStats().local;
  // 20/s: demoted after kDemoteAfterSeconds quiet seconds (one more while the first counts).
  Run(item, 20, HotKeys::kDemoteAfterSeconds + 1, nullptr);
  EXPECT_EQ(leases_.GetHotKeyStats().promoted, 0u);
  EXPECT_EQ(leases_.GetHotKeyStats().demotions, 1u);
  EXPECT_GT(leases_.GetStats().local, local);  // (while it was still promoted)
  Run(item, 20, 2, [](bool by_backend, const Outcome&) { EXPECT_TRUE(by_backend); });
  // The lease's unspent units went back to the backend when it ended.
  EXPECT_GT(leases_.GetStats().units_returned, 0u);
  EXPECT_EQ(shared_.refunded, leases_.GetStats().units_returned);
  Decision look;
  Item peek = item;
  peek.cost = 0;
  shared_.store.DecideAll({&peek, 1}, clock_.NowMicros(), {&look, 1});
  EXPECT_EQ(look.remaining, 100000 - (2000 + 20 * (HotKeys::kDemoteAfterSeconds + 1) + 40));
}

}  // namespace
}  // namespace sluice::backend
