// Conformance: decide.lua on a real redis-server against the C++ semantics (MemoryStore::DecideAll
// over src/algo) on the same requests, at the same instants — the script reports the TIME it
// used, and the C++ side decides at that time. Every field of every decision must match.
// Also: the exact-range check, TTLs that end when the state is back to initial, and limits near
// the edge of the exact range. Every test runs on both layouts: a string key per state, and the
// states packed as fields of shared hashes (RedisStore::Options::buckets).

#include "backend/redis/scripts.h"

#include <boost/asio.hpp>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "backend/memory/memory_store.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "redis/connection.h"
#include "sluice/clock.h"
#include "tests/support/limits.h"
#include "tests/support/redis_server.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

using testing::MakeLimit;

// One limit of each algorithm, small enough to run out and refill while a test runs.
std::vector<Limit> MixedLimits() {
  return {
      MakeLimit(Algorithm::kTokenBucket, 4, 20000),
      MakeLimit(Algorithm::kFixedWindow, 5, 25000),
      MakeLimit(Algorithm::kSlidingLog, 3, 15000),
      MakeLimit(Algorithm::kSlidingWindow, 6, 20000),
      MakeLimit(Algorithm::kLeakyBucket, 5, 20000, 2),
  };
}

struct ScriptItem {
  const Limit* limit;
  uint64_t limit_id;
  std::string key;
  uint64_t cost;
  bool count_denied;
  bool shadow;
};

std::string Describe(const Decision& d) {
  return fmt::format("allowed={} remaining={} retry={} reset={} delay={}", d.allowed, d.remaining,
                     d.retry_after_us, d.reset_after_us, d.delay_us);
}

// Every algorithm with windows of a few milliseconds, so that refills and window changes happen
// while a test runs.
std::vector<Limit> ShortWindowLimits() {
  return {MakeLimit(Algorithm::kTokenBucket, 5, 20000),
          MakeLimit(Algorithm::kTokenBucket, 7, 30000, 12),
          MakeLimit(Algorithm::kLeakyBucket, 4, 20000, 3),
          MakeLimit(Algorithm::kFixedWindow, 6, 15000),
          MakeLimit(Algorithm::kSlidingLog, 5, 20000),
          MakeLimit(Algorithm::kSlidingWindow, 6, 15000)};
}

class ScriptsFixture : public ::testing::Test {
 protected:
  explicit ScriptsFixture(bool packed)
      : packed_(packed), guard_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {
    Connection::Options o;
    o.endpoint = *ParseUrl(server_.url());
    o.timeout = 5s;
    connection_ = Connection::Create(io_, o);
    for (int i = 0; i < 500 && connection_->state() != Connection::State::kReady; ++i) {
      std::this_thread::sleep_for(10ms);
    }
    auto loaded = Call({"SCRIPT", "LOAD", DecideScript()});
    if (loaded.ok() && loaded->type == Reply::Type::kString) sha_ = loaded->str;
  }
  ~ScriptsFixture() override {
    connection_->Close();
    guard_.reset();
    io_.stop();
    thread_.join();
  }

  absl::StatusOr<Reply> Send(std::vector<std::string> args) {
    std::vector<std::string_view> views(args.begin(), args.end());
    std::string command;
    AppendCommand(&command, views);
    return SendRaw(std::move(command));
  }
  absl::StatusOr<Reply> SendRaw(std::string command) {
    std::promise<absl::StatusOr<Reply>> promise;
    auto future = promise.get_future();
    connection_->Send(std::move(command),
                      [&promise](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); });
    if (future.wait_for(10s) != std::future_status::ready) return absl::InternalError("no reply");
    return future.get();
  }
  absl::StatusOr<Reply> Call(std::initializer_list<std::string_view> args) {
    return Send(std::vector<std::string>(args.begin(), args.end()));
  }

  // Where the script keeps `item`'s state: its own key, or packed, a field of one of two hashes
  // (sliding_log states are never packed).
  DecideItem ToDecide(const ScriptItem& item) const {
    if (!packed_ || item.limit->algorithm == Algorithm::kSlidingLog) {
      return {item.limit,       fmt::format("t:{}:{}", item.limit_id, item.key),
              item.cost,        item.count_denied,
              item.shadow,      {},
              calendar_near_us_};
    }
    return {item.limit,       fmt::format("t:h{}", item.limit_id % 2),
            item.cost,        item.count_denied,
            item.shadow,      fmt::format("{}:{}", item.limit_id, item.key),
            calendar_near_us_};
  }
  // Whether `item`'s state is stored.
  bool Stored(const ScriptItem& item) {
    const DecideItem d = ToDecide(item);
    auto r = d.field.empty() ? Call({"EXISTS", d.key}) : Call({"HEXISTS", d.key, d.field});
    EXPECT_TRUE(r.ok());
    return r.ok() && r->integer == 1;
  }

  // The request through the script.
  DecideResult OnRedis(const std::vector<ScriptItem>& items) {
    std::vector<DecideItem> decide;
    for (const ScriptItem& it : items) decide.push_back(ToDecide(it));
    auto reply = SendRaw(EncodeDecide(sha_, decide, /*commit=*/true));
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (!reply.ok()) return {};
    auto result = ParseDecideReply(*reply, decide);
    EXPECT_TRUE(result.ok()) << result.status() << " " << reply->str;
    return result.ok() ? *result : DecideResult{};
  }

  // The same request in C++, at the instant Redis decided.
  DecideResult InCpp(const std::vector<ScriptItem>& items, int64_t now_us) {
    std::vector<backend::Item> store_items;
    for (const ScriptItem& it : items) {
      store_items.push_back({.limit = it.limit,
                             .limit_id = it.limit_id,
                             .key = it.key,
                             .cost = it.cost,
                             .count_denied = it.count_denied,
                             .shadow = it.shadow});
    }
    DecideResult out;
    out.now_us = now_us;
    out.decisions.resize(items.size());
    out.allowed = store_.DecideAll(store_items, now_us, std::span(out.decisions));
    return out;
  }

  // Gives back what `item` consumed when Redis admitted it at `decided_at_us`: on Redis (the
  // script's refund mode) and in C++, at the time the refund call reports.
  void RefundBoth(const ScriptItem& item, int64_t decided_at_us) {
    const DecideItem refund = ToDecide(item);
    auto reply = SendRaw(EncodeRefund(sha_, std::span(&refund, 1), decided_at_us));
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->type, Reply::Type::kArray) << reply->str;
    ASSERT_EQ(reply->elements.size(), 1u);
    const backend::Item store_item{.limit = item.limit,
                                   .limit_id = item.limit_id,
                                   .key = item.key,
                                   .cost = item.cost,
                                   .count_denied = false,
                                   .shadow = false};
    store_.Refund(std::span(&store_item, 1), decided_at_us, reply->elements[0].integer);
  }

  // Runs `items` both ways; true when they agree (failures say where). `redis_out`, when given,
  // receives Redis's answer.
  bool Agree(const std::vector<ScriptItem>& items, const std::string& context,
             DecideResult* redis_out = nullptr) {
    const DecideResult redis = OnRedis(items);
    if (redis_out != nullptr) *redis_out = redis;
    const DecideResult cpp = InCpp(items, redis.now_us);
    bool same = redis.allowed == cpp.allowed && redis.decisions.size() == cpp.decisions.size();
    EXPECT_EQ(redis.allowed, cpp.allowed) << context;
    for (size_t i = 0; i < items.size() && i < redis.decisions.size(); ++i) {
      if (!(redis.decisions[i] == cpp.decisions[i])) {
        same = false;
        ADD_FAILURE() << context << " item " << i << " (" << DescribeLimit(*items[i].limit)
                      << " cost " << items[i].cost << ")\n  redis: " << Describe(redis.decisions[i])
                      << "\n  c++:   " << Describe(cpp.decisions[i]);
      }
    }
    return same;
  }

  const bool packed_;
  int64_t calendar_near_us_ = 0;  // DecideItem::near_us of the calls sent
  testing::RedisServer server_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::shared_ptr<Connection> connection_;
  std::string sha_;
  store::MemoryStore store_{{.max_entries = 1 << 16, .shards = 4}, SystemClock::Get()};
};

class ScriptsTest : public ScriptsFixture, public ::testing::WithParamInterface<bool> {
 protected:
  ScriptsTest() : ScriptsFixture(GetParam()) {}
};

INSTANTIATE_TEST_SUITE_P(Layouts, ScriptsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Packed" : "KeyPerState";
                         });

TEST_P(ScriptsTest, ScriptLoads) { ASSERT_EQ(sha_.size(), 40u); }

// Each algorithm alone, over time: short windows so that refills and window changes happen
// while the test runs; costs from 0 (peek) to above the capacity.
TEST_P(ScriptsTest, EveryAlgorithmAgreesOverTime) {
  ASSERT_FALSE(sha_.empty());
  std::vector<Limit> limits = ShortWindowLimits();
  limits.push_back(MakeLimit(Algorithm::kLeakyBucket, 3, 7000));
  limits.push_back(MakeLimit(Algorithm::kSlidingWindow, 1000, 9000));
  limits.push_back(MakeLimit(Algorithm::kTokenBucket, 0, 1000));
  std::mt19937_64 rng(20261202);
  int agreed = 0, total = 0;
  for (size_t l = 0; l < limits.size(); ++l) {
    const Limit& limit = limits[l];
    std::uniform_int_distribution<uint64_t> cost(0, limit.Capacity() + 1);
    for (int i = 0; i < 60; ++i) {
      ScriptItem item{&limit, l + 1, "k", rng() % 4 == 0 ? cost(rng) : 1, false, false};
      agreed += Agree({item}, fmt::format("{} call {}", DescribeLimit(limit), i)) ? 1 : 0;
      ++total;
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2500));
    }
  }
  EXPECT_EQ(agreed, total);
}

// count_denied on every algorithm, alone, over time: an AI-Gateway-shaped exchange (a look of
// cost 0, then a report of up to 8 times the capacity, recorded even past the limit) and plain
// requests; the overdrafts, their waits and the looks that deny during them agree with C++.
TEST_P(ScriptsTest, CountDeniedOverdraftsAgreeOverTime) {
  ASSERT_FALSE(sha_.empty());
  std::vector<Limit> limits = ShortWindowLimits();
  limits.push_back(MakeLimit(Algorithm::kTokenBucket, 0, 1000));
  limits.push_back(MakeLimit(Algorithm::kSlidingWindow, 2, 3000));
  std::mt19937_64 rng(20260036);
  int agreed = 0, total = 0, denied = 0;
  for (size_t l = 0; l < limits.size(); ++l) {
    const Limit& limit = limits[l];
    for (int i = 0; i < 60; ++i) {
      const uint64_t cost = i % 2 == 0       ? 0
                            : rng() % 3 == 0 ? rng() % (8 * limit.Capacity() + 2)
                                             : 1 + rng() % 2;
      const ScriptItem item{&limit, l + 200, "cd", cost, true, false};
      DecideResult redis;
      agreed +=
          Agree({item}, fmt::format("{} call {} cost {}", DescribeLimit(limit), i, cost), &redis)
              ? 1
              : 0;
      denied += redis.allowed ? 0 : 1;
      ++total;
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    }
  }
  EXPECT_EQ(agreed, total);
  EXPECT_GT(denied, total / 4);
  // Reports far past every cap (a day's limits, costs of 10^12): the caps agree too.
  const int64_t day = int64_t{86400} * 1000000;
  for (const Algorithm a :
       {Algorithm::kTokenBucket, Algorithm::kLeakyBucket, Algorithm::kFixedWindow,
        Algorithm::kSlidingLog, Algorithm::kSlidingWindow}) {
    const Limit limit = MakeLimit(a, 1000, day, a == Algorithm::kLeakyBucket ? 999 : 1000);
    for (const uint64_t cost : {uint64_t{1000000000000}, uint64_t{1000000000000}, uint64_t{0},
                                uint64_t{1}, uint64_t{0}}) {
      const ScriptItem item{&limit, 300 + static_cast<uint64_t>(a), "huge", cost, true, false};
      EXPECT_TRUE(Agree({item}, fmt::format("{} cost {}", DescribeLimit(limit), cost)));
    }
  }
}

// Refunds: an admitted request's consumption given back on Redis (EncodeRefund) and in C++
// (MemoryStore::Refund) at the same instants, for every algorithm; the decisions that follow
// must still agree.
TEST_P(ScriptsTest, RefundsAgree) {
  ASSERT_FALSE(sha_.empty());
  const std::vector<Limit> limits = ShortWindowLimits();
  std::mt19937_64 rng(20261203);
  int agreed = 0, total = 0, refunds = 0;
  for (size_t l = 0; l < limits.size(); ++l) {
    const Limit& limit = limits[l];
    for (int i = 0; i < 60; ++i) {
      const ScriptItem item{&limit, l + 100, "r", 1 + rng() % 2, false, false};
      const DecideResult redis = OnRedis({item});
      const DecideResult cpp = InCpp({item}, redis.now_us);
      ++total;
      if (redis.allowed == cpp.allowed && redis.decisions == cpp.decisions)
        ++agreed;
      else
        ADD_FAILURE() << DescribeLimit(limit) << " call " << i;
      if (redis.allowed && rng() % 2 == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        RefundBoth(item, redis.now_us);
        ++refunds;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2500));
    }
  }
  EXPECT_EQ(agreed, total);
  EXPECT_GT(refunds, 30);
}

// Calendar windows: the script picks the window holding Redis's time from the two boundaries
// the caller sends (found near the caller's clock), and so decides as the C++ side does with
// the zone's rules at Redis's time, whether the caller's clock is on Redis's side of a boundary
// or not; a caller whose clock is days behind gets an error, and nothing is written.
TEST_P(ScriptsTest, CalendarWindowsAgreeOnEitherSideOfABoundary) {
  ASSERT_FALSE(sha_.empty());
  const std::vector<Limit> limits = {
      CalendarLimit(5, *Calendar::Make("calendar_day", "Pacific/Chatham")),
      CalendarLimit(7, *Calendar::Make("calendar_month", "Europe/Berlin")),
      CalendarLimit(3, *Calendar::Make("calendar_week", "America/New_York"))};
  for (size_t l = 0; l < limits.size(); ++l) {
    const Limit& limit = limits[l];
    const int64_t wall = SystemClock::Get()->NowMicros();
    const Calendar::Window window = limit.calendar->WindowAt(wall);
    // The caller's clock: Redis's; just past the window's end (ahead of Redis); just before its
    // start (behind).
    for (const int64_t near : {wall, window.end_us + 1, window.start_us - 1}) {
      calendar_near_us_ = near;
      for (int i = 0; i < 5; ++i) {
        const ScriptItem item{&limit, l + 300, "cal", 1 + static_cast<uint64_t>(i % 2),
                              i == 4, false};
        DecideResult redis;
        ASSERT_TRUE(Agree({item}, DescribeLimit(limit), &redis));
        ASSERT_GT(redis.decisions[0].reset_after_us, 0);
        if (redis.allowed) RefundBoth(item, redis.now_us);
      }
    }
    calendar_near_us_ = window.start_us - 3 * limit.window_us;
    const DecideItem stale = ToDecide({&limit, l + 300, "stale", 1, false, false});
    auto reply = SendRaw(EncodeDecide(sha_, std::span(&stale, 1), /*commit=*/true));
    ASSERT_TRUE(reply.ok());
    EXPECT_TRUE(reply->IsError());
    EXPECT_THAT(reply->str, ::testing::HasSubstr("clocks of Redis and sluice differ"));
    EXPECT_FALSE(Stored({&limit, l + 300, "stale", 1, false, false}));
  }
}

// Penalties: the script blocks and records as the memory store does (MemoryStore's
// DecidePenalized) at the same instants, offence after offence, blocks growing to their max,
// with the limit's window rolling meanwhile; a reset's DEL of the penalty key lifts a block.
TEST_P(ScriptsTest, PenaltiesAgreeOverTime) {
  ASSERT_FALSE(sha_.empty());
  Limit limit = MakeLimit(Algorithm::kFixedWindow, 3, 40000);
  limit.penalty = Penalty{.after = 2,
                          .within_us = 200000,
                          .block_us = 15000,
                          .growth = 2.0,
                          .max_us = 50000,
                          .forget_us = 400000};
  const Limit other = MakeLimit(Algorithm::kTokenBucket, 100, 1000000);
  std::mt19937_64 rng(20261207);
  int penalties = 0, blocks_seen = 0;
  for (int i = 0; i < 250; ++i) {
    const ScriptItem item{&limit, 900, "p", 1 + rng() % 2, false, false};
    const ScriptItem plain{&other, 901, "p", 1, false, false};
    DecideResult redis;
    // Alone, or with an unpenalized limit of the same key in the request.
    const std::vector<ScriptItem> request =
        i % 3 == 0 ? std::vector<ScriptItem>{plain, item} : std::vector<ScriptItem>{item};
    ASSERT_TRUE(Agree(request, fmt::format("call {}", i), &redis));
    const Decision& d = redis.decisions.back();
    if (d.penalty) {
      ++penalties;
      blocks_seen = std::max<int>(blocks_seen, static_cast<int>(d.retry_after_us / 1000));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2500));
  }
  EXPECT_GT(penalties, 20);
  EXPECT_GE(blocks_seen, 30);  // a block grown past the first one's 15 ms
  // The penalty state has a key of its own, next to the state's, expiring.
  const DecideItem placed = ToDecide({&limit, 900, "p", 1, false, false});
  const std::string penalty_key =
      placed.field.empty() ? placed.key + ":p" : placed.key + ":p:" + placed.field;
  auto ttl = Call({"PTTL", penalty_key});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl->integer, 0);
}

// Refunding everything a key consumed leaves it as a new key: gone from Redis.
TEST_P(ScriptsTest, AFullRefundDeletesTheKey) {
  ASSERT_FALSE(sha_.empty());
  const Limit limit = MakeLimit(Algorithm::kFixedWindow, 5, 60000000);
  const ScriptItem item{&limit, 777, "gone", 3, false, false};
  const DecideResult decided = OnRedis({item});
  ASSERT_TRUE(decided.allowed);
  ASSERT_TRUE(Stored(item));
  const DecideItem refund = ToDecide(item);
  ASSERT_TRUE(SendRaw(EncodeRefund("", std::span(&refund, 1), decided.now_us)).ok());
  EXPECT_FALSE(Stored(item));
  EXPECT_EQ(Call({"EXISTS", refund.key})->integer, 0);  // packed: the hash went with its last field
}

// Several limits per request: all-or-nothing, shadow items, count_denied (on every algorithm),
// the same key twice in one request (with and without count_denied).
TEST_P(ScriptsTest, MultiLimitRequestsAgree) {
  ASSERT_FALSE(sha_.empty());
  const std::vector<Limit> limits = MixedLimits();
  std::mt19937_64 rng(7);
  int agreed = 0, total = 0;
  for (int i = 0; i < 300; ++i) {
    std::vector<ScriptItem> items;
    const size_t count = 1 + rng() % 3;
    for (size_t j = 0; j < count; ++j) {
      const size_t l = rng() % limits.size();
      items.push_back({&limits[l], l + 1, rng() % 3 == 0 ? "b" : "a", rng() % 5 == 0 ? 2u : 1u,
                       rng() % 4 == 0, rng() % 6 == 0});
    }
    if (rng() % 8 == 0) items.push_back(items.front());  // the same key twice
    agreed += Agree(items, fmt::format("request {}", i)) ? 1 : 0;
    ++total;
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  EXPECT_EQ(agreed, total);
}

// Limits near the top of the exact range: a day-long bucket of 100,000 (capacity x W = 8.64e15).
TEST_P(ScriptsTest, LargeMagnitudesStayExact) {
  ASSERT_FALSE(sha_.empty());
  const int64_t day = int64_t{86400} * 1000000;
  const std::vector<Limit> limits = {
      MakeLimit(Algorithm::kTokenBucket, 100000, day),
      MakeLimit(Algorithm::kLeakyBucket, 99999, day, 3),
      MakeLimit(Algorithm::kSlidingWindow, 50000, day),
      MakeLimit(Algorithm::kFixedWindow, 4294967295u, day),
      MakeLimit(Algorithm::kTokenBucket, 7, 60000000),  // 7 per minute: W / N is not whole
  };
  for (const Limit& l : limits) ASSERT_TRUE(CheckExactRange(l).ok()) << DescribeLimit(l);
  for (size_t l = 0; l < limits.size(); ++l) {
    for (uint64_t cost : {1u, 3u, 7u, 9973u, 1u, 0u}) {
      Agree({{&limits[l], l + 100, "big", cost, false, false}}, DescribeLimit(limits[l]));
    }
  }
}

TEST_P(ScriptsTest, KeysExpireWhenTheStateIsBackToInitial) {
  ASSERT_FALSE(sha_.empty());
  const Limit bucket = MakeLimit(Algorithm::kTokenBucket, 10, 1000000);  // refills in 1 s
  const Limit window = MakeLimit(Algorithm::kFixedWindow, 10, 60000000);
  const ScriptItem a{&bucket, 1, "ttl", 3, false, false};
  const ScriptItem b{&window, 2, "ttl", 1, false, false};
  const DecideResult r = OnRedis({a, b});
  ASSERT_TRUE(r.allowed);
  auto pttl_a = Call({"PTTL", ToDecide(a).key});  // packed: a and b are in different hashes
  auto pttl_b = Call({"PTTL", ToDecide(b).key});
  ASSERT_TRUE(pttl_a.ok() && pttl_b.ok());
  // 3 tokens of 10 per second come back in 300 ms (the bucket's key gets 1/8 of that on top, see
  // decide.lua); the window ends with the minute.
  EXPECT_GT(pttl_a->integer, 250);
  EXPECT_LE(pttl_a->integer, packed_ ? 1339 : 339);  // a hash's expiry moves in steps of 1 s
  const int64_t window_left_ms = (60000000 - r.now_us % 60000000 + 999) / 1000;
  // Packed, the hash gets a margin: a second, or 1/8 of what is left if more.
  const int64_t expect_b =
      packed_ ? window_left_ms + std::max<int64_t>(1000, window_left_ms / 8) : window_left_ms;
  EXPECT_NEAR(static_cast<double>(pttl_b->integer), static_cast<double>(expect_b), 50);
  // A denied request writes nothing; a peek writes nothing.
  const ScriptItem peek{&bucket, 1, "fresh", 0, false, false};
  OnRedis({peek});
  EXPECT_FALSE(Stored(peek));
}

// An existing key's expiry may be kept (SET KEEPTTL) or set later than needed, never earlier
// than the instant its state is back to initial (now + reset_after), whatever the algorithm.
TEST_P(ScriptsTest, ExpiryNeverPrecedesTheReturnToInitial) {
  ASSERT_FALSE(sha_.empty());
  const std::vector<Limit> limits = {MakeLimit(Algorithm::kTokenBucket, 50, 2000000),
                                     MakeLimit(Algorithm::kLeakyBucket, 50, 2000000),
                                     MakeLimit(Algorithm::kFixedWindow, 50, 2000000),
                                     MakeLimit(Algorithm::kSlidingWindow, 50, 2000000),
                                     MakeLimit(Algorithm::kSlidingLog, 50, 2000000)};
  for (size_t l = 0; l < limits.size(); ++l) {
    const ScriptItem item{&limits[l], l + 200, "expiry", 1, false, false};
    for (int i = 0; i < 60; ++i) {
      // The consuming call's own answer says when its state is back to initial: a separate peek
      // could fall in the next window, whose reset the key rightly does not wait for.
      DecideResult r;
      ASSERT_TRUE(Agree({item}, DescribeLimit(limits[l]), &r));
      auto expire_ms = Call({"PEXPIRETIME", ToDecide(item).key});
      ASSERT_TRUE(expire_ms.ok());
      ASSERT_GE(expire_ms->integer * 1000, r.now_us + r.decisions[0].reset_after_us)
          << DescribeLimit(limits[l]) << " after " << i + 1 << " calls";
      if (i % 20 == 19) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  }
}

class PackedStatesTest : public ScriptsFixture {
 protected:
  PackedStatesTest() : ScriptsFixture(/*packed=*/true) {}

  // How many fields of hash `key` have names starting with `prefix`.
  int64_t FieldsStartingWith(const std::string& key, const std::string& prefix) {
    auto names = Call({"HKEYS", key});
    EXPECT_TRUE(names.ok());
    int64_t n = 0;
    for (const Reply& r : names->elements) n += r.str.rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
  }
};

// Redis 7.0 has no expiry per field: fields whose states are back to initial stay in a hash that
// other states keep alive, until new fields' sweeps find them (3 random fields per new field).
TEST_F(PackedStatesTest, NewFieldsSweepDeadOnes) {
  ASSERT_FALSE(sha_.empty());
  const Limit brief = MakeLimit(Algorithm::kTokenBucket, 10, 10000);  // 1 ms per token
  const Limit day = MakeLimit(Algorithm::kFixedWindow, 10, int64_t{86400} * 1000000);
  // 60 brief states in hash t:h0, written in one call (so none is dead yet when it sweeps), with
  // one that keeps the hash alive for the day.
  std::vector<std::vector<DecideItem>> requests = {
      {ToDecide({&day, 4, "anchor", 1, false, false})}};
  for (int i = 0; i < 60; ++i)
    requests.push_back({ToDecide({&brief, 2, fmt::format("d{}", i), 1, false, false})});
  std::vector<std::span<const DecideItem>> spans(requests.begin(), requests.end());
  ASSERT_TRUE(SendRaw(EncodeDecide(sha_, spans, true)).ok());
  ASSERT_EQ(Call({"HLEN", "t:h0"})->integer, 61);
  std::this_thread::sleep_for(20ms);  // every one of them is back to initial
  for (int i = 0; i < 200; ++i) {
    const DecideResult r = OnRedis({{&day, 4, fmt::format("live{}", i), 1, false, false}});
    ASSERT_TRUE(r.allowed);
  }
  EXPECT_EQ(FieldsStartingWith("t:h0", "4:"), 201);  // every live state kept
  // 600 random looks at a hash of 60-260 fields leave about 2 of the 60 dead ones (no sweep: 60).
  EXPECT_LE(FieldsStartingWith("t:h0", "2:"), 12);
  // The hash lives as long as its longest-lived state: the day's window.
  const int64_t now_ms =
      Call({"TIME"}).ok() ? std::atoll(Call({"TIME"})->elements[0].str.c_str()) * 1000 : 0;
  EXPECT_GT(Call({"PEXPIRETIME", "t:h0"})->integer, now_ms);
  EXPECT_GE(Call({"PEXPIRETIME", "t:h0"})->integer * 1000,
            (now_ms * 1000 / day.window_us + 1) * day.window_us - 1000000);
}

// A flood of unique keys into the victim's hash (issue 18): the sweeps delete only fields past
// their idle time, so the victim's live state is never lost and it stays at its limit. The flood
// mixes states that are dead by the next batch (sweepable) with live ones.
TEST_F(PackedStatesTest, AFloodOfNewFieldsNeverDropsALiveState) {
  ASSERT_FALSE(sha_.empty());
  const Limit hourly = MakeLimit(Algorithm::kTokenBucket, 5, int64_t{3600} * 1000000);
  const Limit brief = MakeLimit(Algorithm::kTokenBucket, 10, 10000);  // 1 ms per token
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(OnRedis({{&hourly, 2, "victim", 1, false, false}}).allowed);
  }
  for (int i = 0; i < 2000; ++i) {
    const bool live = i % 2 == 1;
    const DecideResult r = OnRedis({{live ? &hourly : &brief, 2,
                                     fmt::format("{}{}", live ? "fh" : "fb", i), 1, false, false}});
    ASSERT_TRUE(r.allowed);
    if (i % 100 == 99) std::this_thread::sleep_for(2ms);  // the brief ones go back to initial
  }
  EXPECT_EQ(FieldsStartingWith("t:h0", "2:fh"), 1000) << "every live flood state kept";
  EXPECT_LT(FieldsStartingWith("t:h0", "2:fb"), 500) << "the sweeps took dead ones";
  EXPECT_TRUE(OnRedis({{&hourly, 2, "victim", 1, false, false}}).allowed);
  EXPECT_TRUE(OnRedis({{&hourly, 2, "victim", 1, false, false}}).allowed);
  EXPECT_FALSE(OnRedis({{&hourly, 2, "victim", 1, false, false}}).allowed)
      << "the victim's state survived the flood: 5 in all";
}

// A hash whose states are all back to initial goes by itself: its expiry follows its states.
TEST_F(PackedStatesTest, AHashOfIdleStatesExpires) {
  ASSERT_FALSE(sha_.empty());
  const Limit brief = MakeLimit(Algorithm::kTokenBucket, 10, 100000);  // 10 ms per token
  // Five states made within one token's 10 ms (a state back to initial by the next call is swept
  // by it): on a loaded machine that took longer, the hash is emptied and they are made again.
  for (int attempt = 0; attempt < 50; ++attempt) {
    ASSERT_TRUE(Call({"DEL", "t:h0"}).ok());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i)
      ASSERT_TRUE(OnRedis({{&brief, 2, fmt::format("k{}", i), 1, false, false}}).allowed);
    if (std::chrono::steady_clock::now() - start < 8ms) break;
  }
  ASSERT_EQ(Call({"HLEN", "t:h0"})->integer, 5);
  const int64_t pttl = Call({"PTTL", "t:h0"})->integer;
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 1020);  // 10 ms, and a hash's expiry moves in steps of at least a second
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    std::this_thread::sleep_for(5ms);
    gone = Call({"EXISTS", "t:h0"})->integer == 0;
  }
  EXPECT_TRUE(gone);
}

TEST(ExactRangeTest, RejectsWhatDoublesCannotCarry) {
  const int64_t day = int64_t{86400} * 1000000;
  EXPECT_TRUE(CheckExactRange(MakeLimit(Algorithm::kTokenBucket, 100000, day)).ok());
  const absl::Status big = CheckExactRange(MakeLimit(Algorithm::kTokenBucket, 1000000, day));
  EXPECT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.message()), ::testing::HasSubstr("too large to decide exactly"));
  EXPECT_FALSE(CheckExactRange(MakeLimit(Algorithm::kSlidingWindow, 60000, day)).ok());
  // Counting algorithms have no products: any size.
  EXPECT_TRUE(CheckExactRange(MakeLimit(Algorithm::kFixedWindow, 4294967295u, 10 * day)).ok());
  EXPECT_TRUE(CheckExactRange(MakeLimit(Algorithm::kSlidingLog, 1000000, day)).ok());
}

// Several requests in one call are decided in turn, each all-or-nothing: as many DecideAll calls
// at the same instant.
TEST_P(ScriptsTest, BatchedRequestsAgreeWithDecidingThemInTurn) {
  ASSERT_FALSE(sha_.empty());
  const std::vector<Limit> limits = MixedLimits();
  std::mt19937_64 rng(99);
  int mismatches = 0;
  for (int round = 0; round < 150; ++round) {
    std::vector<std::vector<DecideItem>> requests(1 + rng() % 8);
    std::vector<std::vector<backend::Item>> cpp(requests.size());
    static const std::string kKeys[] = {"a", "b"};  // the C++ items only view their keys
    for (size_t r = 0; r < requests.size(); ++r) {
      const size_t count = 1 + rng() % 3;
      for (size_t j = 0; j < count; ++j) {
        const size_t l = rng() % limits.size();
        const std::string& key = kKeys[rng() % 2];
        const uint64_t cost = rng() % 5 == 0 ? 2 : 1;
        const bool count_denied = rng() % 4 == 0, shadow = rng() % 6 == 0;
        DecideItem item{&limits[l], fmt::format("batch:{}:{}", l, key), cost, count_denied, shadow};
        if (packed_ && limits[l].algorithm != Algorithm::kSlidingLog) {
          item.field = item.key;
          item.key = "batch";
        }
        requests[r].push_back(std::move(item));
        cpp[r].push_back({.limit = &limits[l],
                          .limit_id = 1000 + l,
                          .key = key,
                          .cost = cost,
                          .count_denied = count_denied,
                          .shadow = shadow});
      }
    }
    std::vector<std::span<const DecideItem>> spans(requests.begin(), requests.end());
    // Every other round with the keys as arguments (a cluster node's batch).
    auto reply = SendRaw(EncodeDecide(sha_, spans, true, /*keys_in_argv=*/round % 2 == 1));
    ASSERT_TRUE(reply.ok());
    auto results = ParseDecideReply(*reply, spans);
    ASSERT_TRUE(results.ok()) << results.status();
    for (size_t r = 0; r < requests.size(); ++r) {
      std::vector<Decision> expected(cpp[r].size());
      const bool allowed = store_.DecideAll(cpp[r], (*results)[r].now_us, std::span(expected));
      bool same = allowed == (*results)[r].allowed;
      for (size_t i = 0; i < expected.size(); ++i)
        same = same && expected[i] == (*results)[r].decisions[i];
      if (!same) {
        ++mismatches;
        std::string detail;
        for (size_t i = 0; i < expected.size(); ++i) {
          detail += fmt::format("\n  item {} {} cost {}: redis {} | c++ {}", i,
                                DescribeLimit(*requests[r][i].limit), requests[r][i].cost,
                                Describe((*results)[r].decisions[i]), Describe(expected[i]));
        }
        ADD_FAILURE() << "round " << round << " request " << r << " allowed redis "
                      << (*results)[r].allowed << " c++ " << allowed << detail;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  EXPECT_EQ(mismatches, 0);
}

// The plan's counts are one byte up to 254, four bytes past it: a call with a request of 300
// items, 600 more of one item, 300 kinds and 900 states reads each item's own limit, cost and
// key.
TEST_P(ScriptsTest, ACallPast255RequestsItemsKindsAndStatesIsReadRight) {
  ASSERT_FALSE(sha_.empty());
  const Limit window = MakeLimit(Algorithm::kFixedWindow, 1000, int64_t{3600} * 1000000);
  std::vector<std::vector<DecideItem>> requests(1);
  const auto item = [&](size_t i) {
    DecideItem it{&window, fmt::format("wide:{}", i), 1 + i % 300, false, false};
    if (packed_) {
      it.field = it.key;
      it.key = fmt::format("wide-hash:{}", i % 7);
    }
    return it;
  };
  for (size_t i = 0; i < 300; ++i) requests[0].push_back(item(i));
  for (size_t i = 300; i < 900; ++i) requests.push_back({item(i)});
  // Every key once more in a last request of its own: its state is the first's (state numbers
  // past 255 found again), so what remains has both costs taken off.
  for (size_t i = 0; i < 900; i += 97) requests.push_back({item(i)});
  std::vector<std::span<const DecideItem>> spans(requests.begin(), requests.end());
  auto reply = SendRaw(EncodeDecide(sha_, spans, /*commit=*/true));
  ASSERT_TRUE(reply.ok()) << reply.status();
  auto results = ParseDecideReply(*reply, spans);
  ASSERT_TRUE(results.ok()) << results.status() << " " << reply->str;
  ASSERT_EQ(results->size(), requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    ASSERT_TRUE((*results)[r].allowed) << "request " << r;
    for (size_t i = 0; i < requests[r].size(); ++i) {
      const uint64_t cost = requests[r][i].cost;
      const uint64_t taken = r <= 600 ? cost : 2 * cost;  // the repeats come after request 600
      EXPECT_EQ((*results)[r].decisions[i].remaining, static_cast<int64_t>(1000 - taken))
          << "request " << r << " item " << i;
    }
  }
  // What was written, read back by a second call (new states of one kind are decided and
  // encoded once a call, then copied): each key once more.
  std::vector<std::vector<DecideItem>> again;
  for (size_t i = 0; i < 900; ++i) again.push_back({item(i)});
  std::vector<std::span<const DecideItem>> again_spans(again.begin(), again.end());
  auto second = ParseDecideReply(*SendRaw(EncodeDecide(sha_, again_spans, true)), again_spans);
  ASSERT_TRUE(second.ok()) << second.status();
  for (size_t i = 0; i < 900; ++i) {
    const uint64_t cost = again[i][0].cost;
    const uint64_t uses = i % 97 == 0 ? 3 : 2;
    EXPECT_EQ((*second)[i].decisions[0].remaining, static_cast<int64_t>(1000 - uses * cost))
        << "key " << i;
  }
  if (!packed_) {
    EXPECT_GT(Call({"PTTL", "wide:5"})->integer, 0);
  }
}

// Values written before buckets and sliding_log kept their key's expiry in them (8 bytes
// shorter) are read as they are, and the next write gives them an expiry and the longer layout.
// (A key of its own per state only: hash fields never carried an expiry.)
class KeyPerStateTest : public ScriptsFixture {
 protected:
  KeyPerStateTest() : ScriptsFixture(/*packed=*/false) {}
};

TEST_F(KeyPerStateTest, ValuesWithoutTheirExpiryAreReadAndRewritten) {
  const Limit bucket = MakeLimit(Algorithm::kTokenBucket, 4, int64_t{20} * 1000000);
  const Limit log = MakeLimit(Algorithm::kSlidingLog, 3, int64_t{15} * 1000000);
  auto time = Call({"TIME"});
  ASSERT_TRUE(time.ok());
  const double now = std::stod(time->elements[0].str) * 1e6 + std::stod(time->elements[1].str);
  const auto doubles = [](std::initializer_list<double> values) {
    std::string out;
    for (double v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
    return out;
  };
  // The bucket has two of its four tokens taken (TAT 10 s ahead); the log one entry a second old.
  const double log_at = now - 1e6;
  ASSERT_TRUE(Call({"SET", "old:bucket", doubles({now + 10e6, 0}), "PX", "60000"}).ok());
  ASSERT_TRUE(Call({"SET", "old:log", doubles({log_at + 15e6, log_at, 1}), "PX", "60000"}).ok());
  const std::vector<DecideItem> items = {{&bucket, "old:bucket", 1, false, false},
                                         {&log, "old:log", 1, false, false}};
  auto result = ParseDecideReply(*SendRaw(EncodeDecide(sha_, items, true)), items);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->allowed);
  EXPECT_EQ(result->decisions[0].remaining, 1);  // 4 - 2 - 1: the old state counted
  EXPECT_EQ(result->decisions[1].remaining, 1);  // 3 - 1 - 1
  auto bucket_value = Call({"GET", "old:bucket"});
  auto log_value = Call({"GET", "old:log"});
  ASSERT_EQ(bucket_value->str.size(), 24u);        // idle_at, frac, expiry
  ASSERT_EQ(log_value->str.size(), 16u + 2 * 16);  // idle_at, expiry, two entries
  double bucket_expiry = 0, bucket_idle = 0, log_expiry = 0, log_idle = 0;
  std::memcpy(&bucket_idle, bucket_value->str.data(), 8);
  std::memcpy(&bucket_expiry, bucket_value->str.data() + 16, 8);
  std::memcpy(&log_idle, log_value->str.data(), 8);
  std::memcpy(&log_expiry, log_value->str.data() + 8, 8);
  EXPECT_GE(bucket_expiry * 1000, bucket_idle);
  EXPECT_GE(log_expiry * 1000, log_idle);
  // The expiry in the value is the key's (never later than Redis's own).
  EXPECT_GE(Call({"PEXPIRETIME", "old:bucket"})->integer, static_cast<int64_t>(bucket_expiry));
  EXPECT_GE(Call({"PEXPIRETIME", "old:log"})->integer, static_cast<int64_t>(log_expiry));
}

TEST_P(ScriptsTest, EvaluateOnlyWritesNothing) {
  ASSERT_FALSE(sha_.empty());
  const Limit window = MakeLimit(Algorithm::kFixedWindow, 3, int64_t{3600} * 1000000);
  std::vector<DecideItem> items = {{&window, "dry", 2, true, false}};
  if (packed_) items[0].field = "in-a-hash";
  for (int i = 0; i < 2; ++i) {
    auto dry = SendRaw(EncodeDecide(sha_, items, /*commit=*/false));
    ASSERT_TRUE(dry.ok());
    auto r = ParseDecideReply(*dry, items);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->allowed);
    EXPECT_EQ(r->decisions[0].remaining, 1);  // what it would leave
    EXPECT_EQ(Call({"EXISTS", "dry"})->integer, 0);
  }
  auto wet = ParseDecideReply(*SendRaw(EncodeDecide(sha_, items, true)), items);
  EXPECT_EQ(wet->decisions[0].remaining, 1);
  // Without the SHA the script's text goes along (EVAL), which also loads it.
  auto text = ParseDecideReply(*SendRaw(EncodeDecide("", items, true)), items);
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->allowed);  // 2 more of 3 with 2 used
}

// A call that Redis runs past its deadline (Redis's time, ARGV[2]) changes nothing and says so:
// its client gave up on it, so it must not consume. Before the deadline it decides as usual;
// with none (zeros) it always does. Both layouts, one request and a batch with keys in ARGV.
TEST_P(ScriptsTest, ACallPastItsDeadlineChangesNothing) {
  ASSERT_FALSE(sha_.empty());
  const Limit window = MakeLimit(Algorithm::kFixedWindow, 5, int64_t{3600} * 1000000);
  std::vector<DecideItem> items = {{&window, "late", 1, false, false}};
  if (packed_) items[0].field = "late-field";
  const std::span<const DecideItem> batch[] = {items, items};
  auto time = Call({"TIME"});
  ASSERT_TRUE(time.ok());
  const int64_t now_us =
      std::stoll(time->elements[0].str) * 1000000 + std::stoll(time->elements[1].str);
  const auto with_deadline = [&](int64_t deadline_us, bool as_batch) {
    size_t at = 0;
    std::string command = as_batch ? EncodeDecide(sha_, batch, true, /*keys_in_argv=*/true, &at)
                                   : EncodeDecide(sha_, items, true, &at);
    EXPECT_EQ(command.substr(at, kRedisTimeDigits), std::string(kRedisTimeDigits, '0'));
    command.replace(at, kRedisTimeDigits, fmt::format("{:016d}", deadline_us));
    return SendRaw(std::move(command));
  };
  for (bool as_batch : {false, true}) {
    auto late = with_deadline(now_us - 1, as_batch);
    ASSERT_TRUE(late.ok()) << late.status();
    EXPECT_EQ(ParseDecideReply(*late, items).status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(ParseDecideReply(*late, batch).status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_EQ(Call({"EXISTS", "late"})->integer, 0) << as_batch;
  }
  auto in_time = with_deadline(now_us + 60'000'000, false);
  ASSERT_TRUE(in_time.ok());
  auto decided = ParseDecideReply(*in_time, items);
  ASSERT_TRUE(decided.ok()) << decided.status();
  EXPECT_EQ(decided->decisions[0].remaining, 4);
  auto none = ParseDecideReply(*SendRaw(EncodeDecide(sha_, items, true)), items);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->decisions[0].remaining, 3);
}

}  // namespace
}  // namespace sluice::redis
