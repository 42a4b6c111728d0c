// RedisStore::GetHealth on a manual clock, against a scripted client (no Redis): a failed call
// holds health down for exactly kFailureHold of the client's clock, and an idle store probes
// once no call has succeeded for kIdleProbe. Time only moves when the test says.

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "backend/redis/redis_store.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/units.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// A connected client whose every command is answered at once: +PONG, or a timeout while the
// test says Redis hangs.
class ScriptedClient final : public Client {
 public:
  explicit ScriptedClient(const Clock* clock) : clock_(clock) {}

  void Send(std::string_view, std::string, Callback done, Deadline) override {
    ++sent_;
    if (hung_) return done(absl::DeadlineExceededError("redis: no reply in time"));
    Reply pong;
    pong.type = Reply::Type::kStatus;
    pong.str = "PONG";
    done(std::move(pong));
  }
  std::chrono::microseconds timeout() const override { return 100ms; }
  const Clock& clock() const override { return *clock_; }
  bool Ready() const override { return true; }
  std::string last_error() const override { return ""; }
  std::string NodeFor(std::string_view) const override { return ""; }
  bool cluster() const override { return false; }
  uint64_t redirects() const override { return 0; }
  uint64_t map_refreshes() const override { return 0; }

  void set_hung(bool hung) { hung_ = hung; }
  int sent() const { return sent_; }

 private:
  const Clock* const clock_;
  bool hung_ = false;
  int sent_ = 0;
};

using sluice::testing::kT0;
constexpr int64_t kHoldUs = std::chrono::microseconds(RedisStore::kFailureHold).count();
constexpr int64_t kIdleUs = std::chrono::microseconds(RedisStore::kIdleProbe).count();

TEST(RedisStoreHealthTest, AFailedCallHoldsHealthDownForTheHoldOfTheClientsClock) {
  ManualClock clock(kT0);
  ScriptedClient client(&clock);
  RedisStore store(&client, {});
  EXPECT_TRUE(store.GetHealth().up);  // nothing failed yet; it probes (idle)
  client.set_hung(true);
  clock.Advance(kIdleUs + 1);
  EXPECT_TRUE(store.GetHealth().up);  // idle again: its probe times out, seen from the next look
  client.set_hung(false);
  RedisStore::Health health = store.GetHealth();
  EXPECT_FALSE(health.up);
  EXPECT_THAT(health.detail, HasSubstr("a call failed 0 ms ago"));
  // Every probe succeeds from here on, but the failure holds for kFailureHold.
  clock.Advance(kHoldUs);
  health = store.GetHealth();
  EXPECT_FALSE(health.up);
  EXPECT_THAT(health.detail, HasSubstr(fmt::format("a call failed {} ms ago", kHoldUs / 1000)));
  clock.Advance(1);
  EXPECT_TRUE(store.GetHealth().up) << store.GetHealth().detail;
}

TEST(RedisStoreHealthTest, AStepOfTheWallClockDoesNotEndTheHold) {
  ManualClock clock(kT0);
  ScriptedClient client(&clock);
  RedisStore store(&client, {});
  ASSERT_TRUE(store.GetHealth().up);
  client.set_hung(true);
  clock.Advance(kIdleUs + 1);
  store.GetHealth();  // idle: its probe times out
  client.set_hung(false);
  clock.Set(kT0 + int64_t{3600} * 1000000);  // NTP steps the wall clock an hour ahead
  EXPECT_FALSE(store.GetHealth().up);
  clock.Advance(kHoldUs + 1);
  EXPECT_TRUE(store.GetHealth().up) << store.GetHealth().detail;
}

TEST(RedisStoreHealthTest, AnIdleStoreProbesOnceNoCallSucceededForTheIdleProbe) {
  ManualClock clock(kT0);
  ScriptedClient client(&clock);
  RedisStore store(&client, {});
  ASSERT_TRUE(store.GetHealth().up);
  ASSERT_EQ(client.sent(), 1);  // never a success yet: a probe
  clock.Advance(kIdleUs);
  EXPECT_TRUE(store.GetHealth().up);
  EXPECT_EQ(client.sent(), 1);  // the probe succeeded kIdleProbe ago: not idle yet
  clock.Advance(1);
  EXPECT_TRUE(store.GetHealth().up);
  EXPECT_EQ(client.sent(), 2);
}

}  // namespace
}  // namespace sluice::redis
