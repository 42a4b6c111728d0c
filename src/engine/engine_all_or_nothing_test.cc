// The engine (engine.h) on several limits at once: "10 r/s AND 1000/day" on one descriptor, and
// all-or-nothing consumption: a denied request consumes nothing, in any limit of any descriptor, of
// one domain or of several (CheckAll), also under 8 threads. Time is a ManualClock; t0 =
// 1700000000 s, 20 s into a minute.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/temp_dir.h"

namespace sluice::engine {
namespace {

using ::testing::SizeIs;
using Code = DescriptorResult::Code;
using test::Desc;
using test::EngineTest;
using test::kSecondUs;
using test::Peek;
using test::Req;
using test::UserName;
using testing::TempDir;

// ---------------------------------------------------------------------------------------------
// Several limits on one descriptor: "10 r/s AND 1000/day".

constexpr std::string_view kMulti = R"yaml(domain: multi
descriptors:
  - key: api_key
    limits:
      - {requests: 10, window: 1s, algorithm: token_bucket, burst: 20}
      - {requests: 1000, window: 1d, name: daily}
)yaml";

TEST_F(EngineTest, TenPerSecondAndThousandPerDay) {
  Load(kMulti);
  for (int i = 0; i < 20; ++i) {  // the burst
    const Response r = Check1("multi", {{"api_key", "a"}});
    ASSERT_TRUE(r.allowed) << i;
    EXPECT_EQ(Remaining(r, 0, 0), 19 - i);
    EXPECT_EQ(Remaining(r, 0, 1), 999 - i);
    EXPECT_EQ(r.headline_limit, 0);  // the bucket has the lower remaining
  }
  Response r = Check1("multi", {{"api_key", "a"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_FALSE(r.descriptors[0].limits[0].decision.allowed);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.retry_after_us, 100000);  // 1 token per 100 ms
  EXPECT_TRUE(r.descriptors[0].limits[1].decision.allowed);
  EXPECT_EQ(Remaining(r, 0, 1), 980);  // the day consumed nothing
  EXPECT_EQ(r.headline_limit, 0);

  // 10 per second for 98 more seconds: 20 + 980 = 1000 for the day.
  for (int s = 1; s <= 98; ++s) {
    clock_.Advance(kSecondUs);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(Check1("multi", {{"api_key", "a"}}).allowed) << s;
    ASSERT_FALSE(Check1("multi", {{"api_key", "a"}}).allowed) << s;  // the bucket is empty again
  }
  clock_.Advance(kSecondUs);  // t0 + 99 s: the bucket has 10 tokens, the day none
  r = Check1("multi", {{"api_key", "a"}});
  EXPECT_FALSE(r.allowed);
  EXPECT_TRUE(r.descriptors[0].limits[0].decision.allowed);
  EXPECT_EQ(Remaining(r, 0, 0), 10);  // the bucket consumed nothing
  EXPECT_FALSE(r.descriptors[0].limits[1].decision.allowed);
  EXPECT_EQ(r.headline_limit, 1);
  EXPECT_EQ(r.Headline()->name, "daily");
  EXPECT_EQ(r.Headline()->decision.retry_after_us, (6400 - 99) * kSecondUs);
  // Another key is unaffected.
  EXPECT_TRUE(Check1("multi", {{"api_key", "b"}}).allowed);
}

// ---------------------------------------------------------------------------------------------
// All-or-nothing: a denied request consumes nothing, in any limit of any descriptor.

TEST_F(EngineTest, CostTwoAgainstOneRemainingReportsOne) {
  Load(
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: "
      "3}\n");
  EXPECT_EQ(Remaining(Check1("d", {{"k", "v"}}, 2)), 1);
  const Response r = Check1("d", {{"k", "v"}}, 2);
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(Remaining(r), 1);
  EXPECT_EQ(r.Headline()->decision.remaining, 1);
  EXPECT_EQ(r.Headline()->decision.retry_after_us, 40 * kSecondUs);
  const Response last = Check1("d", {{"k", "v"}});
  EXPECT_TRUE(last.allowed);
  EXPECT_EQ(Remaining(last), 0);
}

TEST_F(EngineTest, DeniedRequestConsumesNothingInItsOtherLimits) {
  Load(R"yaml(domain: d
descriptors:
  - key: k
    limits:
      - {requests: 2, window: 1m}
      - {requests: 10, window: 1m}
)yaml");
  EXPECT_TRUE(Check1("d", {{"k", "v"}}).allowed);
  EXPECT_TRUE(Check1("d", {{"k", "v"}}).allowed);
  for (int i = 0; i < 5; ++i) {
    const Response r = Check1("d", {{"k", "v"}});
    EXPECT_FALSE(r.allowed);
    EXPECT_TRUE(r.descriptors[0].limits[1].decision.allowed);
    EXPECT_EQ(Remaining(r, 0, 1), 8);
  }
  EXPECT_EQ(Remaining(Check(Req("d", {Peek({{"k", "v"}})})), 0, 1), 8);
}

TEST_F(EngineTest, DeniedRequestConsumesNothingAcrossDescriptorsOfAnyAlgorithm) {
  Load(R"yaml(domain: d
descriptors:
  - key: gate
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tb
    rate_limit: {algorithm: token_bucket, requests: 5, window: 1m}
  - key: lb
    rate_limit: {algorithm: leaky_bucket, requests: 5, window: 1m, burst: 4}
  - key: fw
    rate_limit: {algorithm: fixed_window, requests: 5, window: 1m}
  - key: sl
    rate_limit: {algorithm: sliding_log, requests: 5, window: 1m}
  - key: sw
    rate_limit: {algorithm: sliding_window, requests: 5, window: 1m}
)yaml");
  const std::vector<Descriptor> others = {Desc({{"tb", "x"}}), Desc({{"lb", "x"}}),
                                          Desc({{"fw", "x"}}), Desc({{"sl", "x"}}),
                                          Desc({{"sw", "x"}})};
  engine::Descriptors all = {Desc({{"gate", "x"}})};
  all.insert(all.end(), others.begin(), others.end());
  const Response first = Check(Req("d", all));
  ASSERT_TRUE(first.allowed);
  for (int i = 0; i < 3; ++i) {
    const Response denied = Check(Req("d", all));
    ASSERT_FALSE(denied.allowed);
    EXPECT_EQ(denied.descriptors[0].code, Code::kOverLimit);
    for (size_t d = 1; d < all.size(); ++d) {
      EXPECT_EQ(denied.descriptors[d].code, Code::kOk) << d;
      EXPECT_EQ(Remaining(denied, d), Remaining(first, d)) << d;
      EXPECT_EQ(denied.descriptors[d].limits[0].decision.delay_us, 0) << d;
    }
  }
  // Each of the others has exactly its first request's worth consumed: 4 more of cost 1 fit, and
  // the 5th does not (leaky_bucket: capacity burst + 1 = 5 at one instant).
  for (size_t d = 0; d < others.size(); ++d) {
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(Check(Req("d", {others[d]})).allowed) << d << " " << i;
    EXPECT_FALSE(Check(Req("d", {others[d]})).allowed) << d;
  }
}

TEST_F(EngineTest, CheckAllIsAllOrNothingAcrossDomains) {
  TempDir dir;
  dir.Write("a.yaml",
            "domain: a\ndescriptors:\n  - key: ip\n"
            "    rate_limit: {unit: minute, requests_per_unit: 5}\n");
  dir.Write("b.yaml",
            "domain: b\ndescriptors:\n  - key: user\n"
            "    rate_limit: {unit: minute, requests_per_unit: 2}\n");
  LoadPaths({dir.path().string()});
  ASSERT_NE(config_, nullptr);
  const std::vector<Request> both = {Req("a", {Desc({{"ip", "1"}})}),
                                     Req("b", {Desc({{"user", "x"}})})};
  for (int i = 0; i < 2; ++i) {
    const std::vector<Response> r = engine_.CheckAll(*config_, both, clock_.NowMicros());
    ASSERT_THAT(r, SizeIs(2));
    EXPECT_TRUE(r[0].allowed && r[1].allowed);
  }
  // b is out: the batch is denied and a consumes nothing.
  std::vector<Response> r = engine_.CheckAll(*config_, both, clock_.NowMicros());
  EXPECT_FALSE(r[0].allowed);
  EXPECT_FALSE(r[1].allowed);
  EXPECT_EQ(r[0].descriptors[0].code, Code::kOk);
  EXPECT_EQ(r[1].descriptors[0].code, Code::kOverLimit);
  EXPECT_EQ(Remaining(Check(Req("a", {Peek({{"ip", "1"}})}))), 3);

  // Combine: descriptors in order, the headline is b's denying limit.
  const Response combined = Combine(std::span(r));
  EXPECT_FALSE(combined.allowed);
  ASSERT_THAT(combined.descriptors, SizeIs(2));
  EXPECT_EQ(combined.headline_descriptor, 1);
  EXPECT_EQ(combined.remaining, 0);
}

// ---------------------------------------------------------------------------------------------
// All-or-nothing under concurrency.

TEST_F(EngineTest, MultiLimitAllOrNothingUnderEightThreads) {
  Load(R"yaml(domain: c
descriptors:
  - key: key
    limits:
      - {requests: 50, window: 1h}
      - {requests: 1000, window: 1h}
      - {requests: 1000, window: 1h, algorithm: sliding_log}
      - {requests: 1000, window: 1h, algorithm: token_bucket}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 60}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 20}
)yaml");
  constexpr int kThreads = 8;
  const int64_t now = clock_.NowMicros();
  const auto run = [&](int per_thread, const std::function<Request(int)>& request_of,
                       std::vector<int>* admitted) {
    admitted->assign(kThreads, 0);
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const Request request = request_of(t);
        while (!go.load(std::memory_order_acquire)) {
        }
        for (int i = 0; i < per_thread; ++i) {
          if (engine_.Check(*config_, request, now).allowed) ++(*admitted)[static_cast<size_t>(t)];
        }
      });
    }
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
  };

  // One descriptor with four limits: exactly 50 admitted; the looser limits took exactly 50.
  std::vector<int> admitted;
  run(
      500,
      [](int) {
        return Req("c", {Desc({{"key", "k"}})});
      },
      &admitted);
  int total = 0;
  for (int a : admitted) total += a;
  EXPECT_EQ(total, 50);
  const Response peek = Check(Req("c", {Peek({{"key", "k"}})}));
  EXPECT_EQ(Remaining(peek, 0, 0), 0);
  EXPECT_EQ(Remaining(peek, 0, 1), 950);
  EXPECT_EQ(Remaining(peek, 0, 2), 950);
  EXPECT_EQ(Remaining(peek, 0, 3), 950);

  // Two descriptors: a tenant (60) shared by 4 users (20 each, 2 threads per user).
  run(
      200,
      [](int t) {
        return Req("c", {Desc({{"tenant", "t"}}), Desc({{"user", UserName(t % 4)}})});
      },
      &admitted);
  total = 0;
  for (int a : admitted) total += a;
  EXPECT_EQ(total, 60);
  EXPECT_EQ(Remaining(Check(Req("c", {Peek({{"tenant", "t"}})}))), 0);
  for (int u = 0; u < 4; ++u) {
    const int by_user = admitted[static_cast<size_t>(u)] + admitted[static_cast<size_t>(u) + 4];
    EXPECT_LE(by_user, 20) << u;
    // The user's counter holds exactly what was admitted for it: denied requests took nothing.
    EXPECT_EQ(Remaining(Check(Req("c", {Peek({{"user", UserName(u)}})}))), 20 - by_user) << u;
  }
}

}  // namespace
}  // namespace sluice::engine
