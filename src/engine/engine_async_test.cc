// Engine::CheckAllAsync over a backend that answers from another thread, behind
// backend::Failover: when it fails each domain's failure_mode answers (open admits, closed
// refuses, local decides in memory at limit / instances).

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "backend/failover.h"
#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/loader.h"
#include "sluice/clock.h"
#include "tests/support/temp_dir.h"
#include "tests/support/units.h"

namespace sluice::engine {
namespace {

using sluice::testing::kT0;

// Decides on its own MemoryStore from a thread of its own, or fails every call while `down`.
class FakeRemote final : public backend::Backend {
 public:
  explicit FakeRemote(const Clock* clock)
      : store_({.max_entries = 1024, .shards = 4}, clock), clock_(clock) {}

  void Decide(std::span<const backend::Item> items, int64_t, std::span<Decision> out,
              Done done) override {
    ++calls;
    hot_key_rates.clear();
    for (const backend::Item& item : items) hot_key_rates.push_back(item.sharing.hot_key_rate);
    backend::Outcome outcome;
    if (down) {
      outcome.status = absl::UnavailableError("down");
    } else {
      outcome.decided_at_us = clock_->NowMicros();
      outcome.allowed = store_.DecideAll(items, outcome.decided_at_us, out);
    }
    std::thread([done, outcome] { done(outcome); }).join();
  }
  void Reset(std::span<const backend::Item> items, ResetDone done) override {
    size_t n = 0;
    for (const auto& item : items) n += store_.Reset(item.limit_id, item.key) ? 1 : 0;
    done(n);
  }
  void Refund(std::span<const backend::Item> items, int64_t decided_at_us, int64_t,
              RefundDone done) override {
    store_.Refund(items, decided_at_us, clock_->NowMicros());
    done(absl::OkStatus());
  }

  bool down = false;
  int calls = 0;
  std::vector<uint32_t> hot_key_rates;  // the last call's items'

 private:
  store::MemoryStore store_;
  const Clock* clock_;
};

class EngineAsyncTest : public ::testing::Test {
 protected:
  EngineAsyncTest() {
    dir_.Write("sluice.yaml", "redis:\n  instances: 4\n");
    for (const char* mode : {"open", "closed", "local"}) {
      dir_.Write(std::string(mode) + ".yaml", "domain: " + std::string(mode) +
                                                  "\nfailure_mode: " + mode +
                                                  "\ndescriptors:\n  - key: user\n    rate_limit: "
                                                  "{unit: minute, requests_per_unit: 8}\n");
    }
    dir_.Write("hot.yaml",
               "domain: hot\nhot_keys: lease\nhot_key_rate: 300\ndescriptors:\n  - key: user\n"
               "    limits: [{requests: 8, window: 1m}, {requests: 9, window: 1m, "
               "consistency: leased}]\n");
    dir_.Write("cold.yaml",
               "domain: cold\nconsistency: eventual\ncold_keys: lease\nhot_key_rate: 400\n"
               "descriptors:\n  - key: user\n"
               "    limits: [{requests: 8, window: 1m}, {requests: 9, window: 1m, "
               "consistency: exact}]\n");
    rules::LoadResult loaded = rules::LoadConfig({dir_.path().string()});
    for (const auto& e : loaded.errors) ADD_FAILURE() << e.ToString();
    config_ = loaded.config;
  }
  // One request of one descriptor user=`user` in `domain`; waits for the answer.
  Response Decide(const std::string& domain, const std::string& user = "alice") {
    Request request;
    request.domain = domain;
    request.descriptors.push_back(
        {.entries = {{"user", user}}, .limit = std::nullopt, .hits_addend = std::nullopt});
    std::vector<Request> requests;
    requests.push_back(std::move(request));
    std::promise<std::vector<Response>> answer;
    engine_.CheckAllAsync(config_, std::move(requests), clock_.NowMicros(),
                          [&answer](std::vector<Response> r) { answer.set_value(std::move(r)); });
    return answer.get_future().get().front();
  }

  testing::TempDir dir_;
  std::shared_ptr<const rules::Config> config_;
  ManualClock clock_{kT0};
  store::MemoryStore local_{{.max_entries = 1024, .shards = 4}, &clock_};
  FakeRemote remote_{&clock_};
  backend::Failover failover_{&remote_, &local_};
  Engine engine_{&failover_};
};

TEST_F(EngineAsyncTest, RemoteDecidesAndTheLimitHolds) {
  for (int i = 0; i < 8; ++i) {
    const Response r = Decide("open");
    ASSERT_TRUE(r.allowed) << i;
    EXPECT_EQ(r.backend, BackendState::kOk);
    EXPECT_EQ(r.remaining, 7 - i);
  }
  const Response ninth = Decide("open");
  EXPECT_FALSE(ninth.allowed);
  EXPECT_EQ(ninth.descriptors[0].code, DescriptorResult::Code::kOverLimit);
  EXPECT_EQ(remote_.calls, 9);
  EXPECT_EQ(local_.GetStats().entries, 0u);  // the local store is not used while the remote works
}

// hot_keys: lease gives the domain's hot_key_rate to its exact limits' items only.
TEST_F(EngineAsyncTest, HotKeyRateGoesToTheExactItemsOfAHotKeysLeaseDomain) {
  Decide("hot");
  EXPECT_THAT(remote_.hot_key_rates, ::testing::ElementsAre(300u, 0u));  // exact, leased
  Decide("open");
  EXPECT_THAT(remote_.hot_key_rates, ::testing::ElementsAre(0u));  // hot_keys: exact
}

// cold_keys: lease gives the domain's hot_key_rate to its eventual limits' items only.
TEST_F(EngineAsyncTest, HotKeyRateGoesToTheEventualItemsOfAColdKeysLeaseDomain) {
  Decide("cold");
  EXPECT_THAT(remote_.hot_key_rates, ::testing::ElementsAre(400u, 0u));  // eventual, exact
}

TEST_F(EngineAsyncTest, FailureModeOpenAdmitsAndSaysSo) {
  remote_.down = true;
  for (int i = 0; i < 20; ++i) {
    const Response r = Decide("open");
    ASSERT_TRUE(r.allowed) << i;
    EXPECT_EQ(r.backend, BackendState::kFailedOpen);
  }
  EXPECT_EQ(failover_.fallbacks(backend::FailureMode::kOpen), 20u);
  EXPECT_EQ(failover_.fallbacks(backend::FailureMode::kClosed), 0u);
}

TEST_F(EngineAsyncTest, FailureModeClosedRefuses) {
  remote_.down = true;
  const Response r = Decide("closed");
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.backend, BackendState::kFailedClosed);
  remote_.down = false;
  EXPECT_TRUE(Decide("closed").allowed);  // back as soon as the store answers
}

TEST_F(EngineAsyncTest, FailureModeLocalDecidesInMemoryAtTheLimitDividedByInstances) {
  remote_.down = true;
  int allowed = 0;
  for (int i = 0; i < 10; ++i) {
    const Response r = Decide("local");
    EXPECT_EQ(r.backend, BackendState::kLocal);
    allowed += r.allowed ? 1 : 0;
  }
  EXPECT_EQ(allowed, 2);  // 8 per minute over 4 instances
  EXPECT_GT(local_.GetStats().entries, 0u);
  // Other keys have their own local share.
  EXPECT_TRUE(Decide("local", "bob").allowed);
}

TEST_F(EngineAsyncTest, ResetGoesToTheRemote) {
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Decide("open").allowed);
  ASSERT_FALSE(Decide("open").allowed);
  Request request;
  request.domain = "open";
  request.descriptors.push_back(
      {.entries = {{"user", "alice"}}, .limit = std::nullopt, .hits_addend = std::nullopt});
  std::promise<size_t> forgotten;
  engine_.ResetAsync(config_, request, [&](absl::StatusOr<size_t> n) { forgotten.set_value(*n); });
  EXPECT_EQ(forgotten.get_future().get(), 1u);
  EXPECT_TRUE(Decide("open").allowed);
}

TEST_F(EngineAsyncTest, WhatTheRemoteConsumedIsRefundedThere) {
  Request request;
  request.domain = "open";
  request.descriptors.push_back(
      {.entries = {{"user", "zoe"}}, .limit = std::nullopt, .hits_addend = std::nullopt});
  for (int i = 0; i < 8; ++i) {
    Refundable consumed;
    std::promise<bool> allowed;
    engine_.CheckAllAsync(
        config_, {request}, clock_.NowMicros(),
        [&](std::vector<Response> r) { allowed.set_value(r.front().allowed); }, &consumed);
    ASSERT_TRUE(allowed.get_future().get());
    ASSERT_EQ(consumed.items.size(), 1u);
    engine_.Refund(consumed, clock_.NowMicros());  // every one given back
  }
  const Response after = Decide("open", "zoe");
  EXPECT_TRUE(after.allowed);
  EXPECT_EQ(after.remaining, 7);  // as if the eight had never been
}

TEST_F(EngineAsyncTest, ABackendThatFailsWithNoPolicyRefuses) {
  remote_.down = true;
  Engine bare(&remote_);  // no Failover: nothing may admit for it
  Request request;
  request.domain = "open";
  request.descriptors.push_back(
      {.entries = {{"user", "alice"}}, .limit = std::nullopt, .hits_addend = std::nullopt});
  std::promise<Response> answer;
  bare.CheckAllAsync(config_, {request}, clock_.NowMicros(),
                     [&](std::vector<Response> r) { answer.set_value(r.front()); });
  const Response r = answer.get_future().get();
  EXPECT_FALSE(r.allowed);
  EXPECT_EQ(r.backend, BackendState::kFailedClosed);
  EXPECT_EQ(r.descriptors[0].limits[0].decision.retry_after_us, backend::kUnavailableRetryAfterUs);
}

TEST_F(EngineAsyncTest, PeekLooksWithoutConsuming) {
  const Limit limit{.algorithm = Algorithm::kFixedWindow,
                    .requests = 3,
                    .window_us = 60000000,
                    .burst = std::nullopt};
  const backend::Item item{.limit = &limit, .limit_id = 7, .key = "k", .cost = 1};
  Decision out[1];
  backend::Backend& memory = local_;
  for (int i = 0; i < 5; ++i) {
    memory.Peek(std::span(&item, 1), kT0, out,
                [](const backend::Outcome& o) { EXPECT_TRUE(o.allowed); });
    EXPECT_EQ(out[0].remaining, 3);
  }
  memory.Decide(std::span(&item, 1), kT0, out, [](const backend::Outcome&) {});
  EXPECT_EQ(out[0].remaining, 2);
  memory.Peek(std::span(&item, 1), kT0, out, [](const backend::Outcome&) {});
  EXPECT_EQ(out[0].remaining, 2);
}

TEST_F(EngineAsyncTest, CombineKeepsTheWorstBackendState) {
  Response ok, open, closed;
  open.backend = BackendState::kFailedOpen;
  closed.backend = BackendState::kFailedClosed;
  closed.allowed = false;
  std::vector<Response> parts;
  parts.push_back(ok);
  parts.push_back(closed);
  parts.push_back(open);
  const Response combined = Combine(std::span(parts));
  EXPECT_EQ(combined.backend, BackendState::kFailedClosed);
  EXPECT_FALSE(combined.allowed);
}

}  // namespace
}  // namespace sluice::engine
