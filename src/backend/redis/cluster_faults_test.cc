// RedisStore on a real Redis Cluster (3 masters, 1 replica each) while callers decide under load:
// a manual failover (CLUSTER FAILOVER on the replica of a busy key's master) and a reshard of the
// busy key's slot (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE). Every call ends, ok or
// with a clean error, in bounded time; the client follows the slot to its new owner (MOVED, ASK,
// map refresh); the script is reloaded where it is missing (NOSCRIPT); and no acknowledged
// decision is lost, so the limits still hold exactly. Each test runs on a plaintext cluster and
// on one that speaks mutual TLS alone (clients, bus and replication: TlsCerts::RedisArgs).

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backend/redis/redis_store.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_store/redis_calls.h"
#include "tests/support/tls_certs.h"
#include "tests/support/units.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using Item = backend::Item;
using SteadyClock = std::chrono::steady_clock;

using sluice::testing::kDay;

using testing::MakeLimit;

std::unique_ptr<Client> Open(const std::string& url, bool cluster,
                             std::chrono::microseconds timeout,
                             std::optional<TlsOptions> tls = std::nullopt) {
  return testing::OpenRedis({url}, cluster, timeout, SystemClock::Get(), std::move(tls));
}

// Callers deciding in a loop on their own threads until Stop(), bounded in calls and time. Each
// round decides one of `spread` (keys across every slot) and then `busy`.
class LoadLoop {
 public:
  static constexpr int kMaxCallsPerThread = 20000;
  static constexpr auto kMaxTime = 60s;

  LoadLoop(RedisStore* store, std::vector<Item> spread, std::vector<Item> busy, int threads)
      : store_(store), spread_(std::move(spread)), busy_(std::move(busy)) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { Run(t); });
  }
  ~LoadLoop() { Stop(); }

  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  // Waits (up to 10 s) until `n` more calls have succeeded.
  bool WaitForOk(int64_t n) {
    const int64_t target = ok_.load() + n;
    for (auto deadline = SteadyClock::now() + 10s; SteadyClock::now() < deadline;) {
      if (ok_.load() >= target) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  int64_t ok() const { return ok_.load(); }
  int64_t errors() const { return errors_.load(); }
  int64_t hangs() const { return hangs_.load(); }
  int64_t busy_allowed(size_t i) const { return busy_allowed_[i].load(); }
  int64_t busy_failed(size_t i) const { return busy_failed_[i].load(); }
  SteadyClock::duration max_latency() const {
    absl::MutexLock lock(&mu_);
    return max_latency_;
  }
  std::string last_error() const {
    absl::MutexLock lock(&mu_);
    return last_error_;
  }
  // The first few kinds of error, "; "-separated.
  std::string errors_seen() const {
    absl::MutexLock lock(&mu_);
    std::string all;
    for (const auto& e : distinct_errors_) all += (all.empty() ? "" : "; ") + e;
    return all;
  }

 private:
  void Run(int thread) {
    const auto until = SteadyClock::now() + kMaxTime;
    for (int i = 0; i < kMaxCallsPerThread && !stop_ && SteadyClock::now() < until; ++i) {
      One(spread_[static_cast<size_t>(thread + i * 7) % spread_.size()], -1);
      const size_t b = static_cast<size_t>(i) % busy_.size();
      One(busy_[b], static_cast<int>(b));
    }
  }

  void One(const Item& item, int busy) {
    const auto start = SteadyClock::now();
    absl::StatusOr<DecideResult> r = testing::DecideNow(*store_, {item});
    const auto took = SteadyClock::now() - start;
    {
      absl::MutexLock lock(&mu_);
      max_latency_ = std::max(max_latency_, took);
      if (!r.ok()) {
        last_error_ = r.status().ToString();
        if (distinct_errors_.size() < 8 &&
            std::find(distinct_errors_.begin(), distinct_errors_.end(), last_error_) ==
                distinct_errors_.end()) {
          distinct_errors_.push_back(last_error_);
        }
      }
    }
    if (r.ok()) {
      ++ok_;
      if (busy >= 0 && r->allowed) ++busy_allowed_[busy];
      return;
    }
    ++errors_;
    if (busy >= 0) ++busy_failed_[busy];
    if (r.status().code() == absl::StatusCode::kInternal) ++hangs_;
    std::this_thread::sleep_for(1ms);  // an open breaker refuses at once: no hot spin
  }

  RedisStore* const store_;
  const std::vector<Item> spread_, busy_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> ok_{0}, errors_{0}, hangs_{0};
  std::atomic<int64_t> busy_allowed_[2] = {}, busy_failed_[2] = {};
  mutable absl::Mutex mu_;
  SteadyClock::duration max_latency_ ABSL_GUARDED_BY(mu_){};
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> distinct_errors_ ABSL_GUARDED_BY(mu_);  // the first few kinds
};

// One cluster for both tests, 3 masters and 3 replicas: plaintext (GetParam() false), or mutual
// TLS alone with certificates made for the run (true). Each is made when its first test starts.
class ClusterFaultsTest : public ::testing::TestWithParam<bool> {
 protected:
  static void TearDownTestSuite() {
    for (testing::RedisCluster*& cluster : clusters_) {
      delete cluster;
      cluster = nullptr;
    }
    delete certs_;
    certs_ = nullptr;
  }

  void SetUp() override {
    const bool tls = GetParam();
    if (tls && certs_ == nullptr) certs_ = new testing::TlsCerts();
    if (tls) {
      ASSERT_TRUE(certs_->ok()) << "openssl failed: see " << certs_->make_log();
    }
    testing::RedisCluster*& cluster = clusters_[tls ? 1 : 0];
    if (cluster == nullptr) cluster = new testing::RedisCluster(3, 1, tls ? certs_ : nullptr);
    cluster_ = cluster;
    ASSERT_TRUE(cluster_->created()) << "redis-cli --cluster create --cluster-replicas 1 failed";
    ASSERT_EQ(cluster_->size(), 6u);
    std::optional<TlsOptions> client_tls;
    if (tls) {
      client_tls.emplace();
      client_tls->ca_file = certs_->ca();
      client_tls->cert_file = certs_->Cert("client");
      client_tls->key_file = certs_->Key("client");
    }
    for (size_t i = 0; i < cluster_->size(); ++i)
      admin_.push_back(Open(cluster_->url(i), false, 5s, client_tls));
    client_ = Open(cluster_->url(0), true, 2s, client_tls);
    ASSERT_TRUE(client_->Ready()) << client_->last_error();
    store_ = std::make_unique<RedisStore>(client_.get(), RedisStore::Options{});
    for (int i = 0; i < 256; ++i) {
      spread_keys_.push_back(fmt::format("user:{}", i));
      spread_.push_back(
          Item{.limit = &spread_limit_, .limit_id = 1, .key = spread_keys_.back(), .cost = 1});
    }
    // A cluster just made may still answer CLUSTERDOWN for a moment (its nodes agree on the
    // state at different times): the test starts once every master decides.
    std::vector<Item> peeks;
    for (const Item& item : spread_) {
      Item peek = item;
      peek.cost = 0;
      peeks.push_back(peek);
    }
    const auto until = SteadyClock::now() + 10s;
    bool all = false;
    while (!all && SteadyClock::now() < until) {
      all = true;
      for (size_t i = 0; i < peeks.size() && all; i += 16)
        all = testing::DecideNow(*store_, {peeks[i]}).ok();
      if (!all) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(all) << "the cluster did not decide within 10 s";
  }

  // The admin connection to the node "127.0.0.1:PORT".
  Client& Admin(const std::string& address) {
    for (size_t i = 0; i < cluster_->size(); ++i) {
      if (address == fmt::format("127.0.0.1:{}", cluster_->port(i))) return *admin_[i];
    }
    ADD_FAILURE() << "no node " << address;
    return *admin_[0];
  }

  std::string Id(const std::string& address) {
    return testing::RedisCommand(Admin(address), {"CLUSTER", "MYID"})->str;
  }

  // The address of a replica of the master at `address`, from CLUSTER NODES
  // ("<id> <ip:port@bus> <flags> <master id> ...", one node a line).
  std::string ReplicaOf(const std::string& address) {
    const std::string master_id = Id(address);
    const std::string nodes = testing::RedisCommand(Admin(address), {"CLUSTER", "NODES"})->str;
    for (size_t at = 0; at < nodes.size();) {
      size_t end = nodes.find('\n', at);
      if (end == std::string::npos) end = nodes.size();
      std::vector<std::string> f;
      std::string line = nodes.substr(at, end - at);
      for (size_t p = 0; p <= line.size();) {
        const size_t space = std::min(line.find(' ', p), line.size());
        f.push_back(line.substr(p, space - p));
        p = space + 1;
      }
      if (f.size() > 3 && f[2].find("slave") != std::string::npos && f[3] == master_id) {
        return f[1].substr(0, f[1].find('@'));
      }
      at = end + 1;
    }
    return "";
  }

  // A descriptor key not used before whose state lands on the node `address`.
  std::string FreshKeyOn(const std::string& address, uint64_t limit_id) {
    for (int i = 0; i < 100000; ++i) {
      std::string key = fmt::format("fresh:{}:{}", fresh_++, i);
      if (client_->NodeFor(store_->RedisKey(limit_id, key)) == address) return key;
    }
    return "";
  }

  // How many of `tries` calls of a fresh limit of N on `address` are admitted (errors: -1).
  int AdmittedOfFreshLimit(const std::string& address, Algorithm algorithm, int n, int tries) {
    const Limit limit = MakeLimit(algorithm, static_cast<uint64_t>(n), kDay);
    const std::string key = FreshKeyOn(address, 9);
    int admitted = 0;
    for (int i = 0; i < tries; ++i) {
      auto r = testing::DecideNow(*store_,
                                  {Item{.limit = &limit, .limit_id = 9, .key = key, .cost = 1}});
      if (!r.ok()) return -1;
      admitted += r->allowed ? 1 : 0;
    }
    return admitted;
  }

  // What is left of `item`'s limit (a cost-0 call).
  int64_t Remaining(const Item& item) {
    Item peek = item;
    peek.cost = 0;
    auto r = testing::DecideNow(*store_, {peek});
    return r.ok() ? r->decisions[0].remaining : -1;
  }

  static testing::RedisCluster* clusters_[2];  // plaintext, TLS
  static testing::TlsCerts* certs_;
  testing::RedisCluster* cluster_ = nullptr;  // this test's
  std::vector<std::unique_ptr<Client>> admin_;
  std::unique_ptr<RedisStore> store_;
  std::unique_ptr<Client> client_;  // goes before store_ (it fails the calls still in flight)
  const Limit spread_limit_ = MakeLimit(Algorithm::kTokenBucket, 1000000, 1000000);
  std::deque<std::string> spread_keys_;  // spread_'s keys point into it: it never moves them
  std::vector<Item> spread_;
  int fresh_ = 0;
};

testing::RedisCluster* ClusterFaultsTest::clusters_[2] = {};
testing::TlsCerts* ClusterFaultsTest::certs_ = nullptr;

// The busy keys count in fixed windows of a day (aligned to midnight UTC), so that the counts
// below are exact: the window of `item`, already started, must not end while the test runs.
bool WindowOutlastsTheTest(RedisStore& store, const Item& item) {
  Item peek = item;
  peek.cost = 0;
  auto r = testing::DecideNow(store, {peek});
  return r.ok() && r->decisions[0].reset_after_us > int64_t{60} * 1000000;
}

TEST_P(ClusterFaultsTest, FailoverUnderLoadIsFollowedAndLosesNoDecision) {
  const Limit counter = MakeLimit(Algorithm::kFixedWindow, 1000000000, kDay);
  const Limit small = MakeLimit(Algorithm::kFixedWindow, 300, kDay);
  const Item busy[] = {{.limit = &counter, .limit_id = 1, .key = "busy:failover", .cost = 1},
                       {.limit = &small, .limit_id = 2, .key = "busy:failover", .cost = 1}};
  ASSERT_TRUE(testing::DecideNow(*store_, {busy[0]}).ok());
  if (!WindowOutlastsTheTest(*store_, busy[0])) GTEST_SKIP() << "too close to midnight UTC";
  const std::string old_master = client_->NodeFor(store_->RedisKey(1, "busy:failover"));
  const std::string replica = ReplicaOf(old_master);
  ASSERT_FALSE(replica.empty()) << "no replica of " << old_master;
  // The replica does not have the script (scripts replicate as their effects): make sure of it,
  // so the NOSCRIPT path is taken after the failover.
  ASSERT_EQ(testing::RedisCommand(Admin(replica), {"SCRIPT", "FLUSH"})->str, "OK");
  const uint64_t redirects = client_->redirects(), refreshes = client_->map_refreshes();
  const uint64_t noscript = store_->GetStats().noscript_reloads;

  LoadLoop load(store_.get(), spread_, {busy[0], busy[1]}, 4);
  ASSERT_TRUE(load.WaitForOk(500)) << load.last_error();
  ASSERT_EQ(testing::RedisCommand(Admin(replica), {"CLUSTER", "FAILOVER"})->str, "OK");
  const auto failover = SteadyClock::now();
  bool promoted = false;
  for (int i = 0; i < 500 && !promoted; ++i) {
    auto role = testing::RedisCommand(Admin(replica), {"ROLE"});
    promoted = role.ok() && !role->elements.empty() && role->elements[0].str == "master";
    if (!promoted) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(promoted) << replica << " did not become master";
  // Decisions on the busy key succeed again within a few seconds, on the new master.
  absl::StatusOr<DecideResult> back = absl::UnavailableError("not yet");
  Item peek = busy[0];
  peek.cost = 0;
  while (SteadyClock::now() - failover < 10s &&
         !(back = testing::DecideNow(*store_, {peek})).ok()) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(back.ok()) << back.status();
  const auto recovered = SteadyClock::now() - failover;
  EXPECT_LT(recovered, 5s);
  EXPECT_TRUE(load.WaitForOk(500)) << load.errors_seen();
  load.Stop();
  std::printf(
      "failover: %lld ok, %lld errors (%s), max latency %.1f ms, busy key back after %.0f ms, "
      "%llu redirects, %llu map refreshes, %llu NOSCRIPT reloads\n",
      static_cast<long long>(load.ok()), static_cast<long long>(load.errors()),
      load.errors_seen().c_str(),
      std::chrono::duration<double, std::milli>(load.max_latency()).count(),
      std::chrono::duration<double, std::milli>(recovered).count(),
      static_cast<unsigned long long>(client_->redirects() - redirects),
      static_cast<unsigned long long>(client_->map_refreshes() - refreshes),
      static_cast<unsigned long long>(store_->GetStats().noscript_reloads - noscript));
  // Every call ended, ok or with a clean error, in bounded time: a connection wait and a call
  // timeout (2 s each) at the most, well short of a hang.
  EXPECT_EQ(load.hangs(), 0);
  EXPECT_LT(load.max_latency(), 6s);
  // The client follows the slot to the new master.
  EXPECT_EQ(client_->NodeFor(store_->RedisKey(1, "busy:failover")), replica);
  EXPECT_GT(client_->redirects() + client_->map_refreshes(), redirects + refreshes);
  EXPECT_GT(store_->GetStats().noscript_reloads, noscript);
  // The first MOVED names a node the client has no connection to yet: the command waits for
  // the connection instead of failing, so the breaker never opens.
  EXPECT_EQ(store_->GetStats().breaker_opened, 0u);
  // A manual failover waits for the replica to catch up: nothing acknowledged is lost. A call
  // that failed (a timeout) may or may not have been applied.
  const int64_t used = 1000000000 - Remaining(busy[0]);
  EXPECT_GE(used, load.busy_allowed(0) + 1);
  EXPECT_LE(used, load.busy_allowed(0) + 1 + load.busy_failed(0));
  const int64_t small_used = 300 - Remaining(busy[1]);
  EXPECT_LE(load.busy_allowed(1), 300);
  EXPECT_LE(small_used - load.busy_allowed(1), load.busy_failed(1));
  EXPECT_GE(small_used, load.busy_allowed(1));
  // And a fresh limit on the new master admits exactly N.
  EXPECT_EQ(AdmittedOfFreshLimit(replica, Algorithm::kTokenBucket, 20, 30), 20);
  EXPECT_EQ(AdmittedOfFreshLimit(replica, Algorithm::kFixedWindow, 20, 30), 20);
}

TEST_P(ClusterFaultsTest, ReshardOfTheBusySlotUnderLoadLosesNothing) {
  const Limit counter = MakeLimit(Algorithm::kFixedWindow, 1000000000, kDay);
  const Limit small = MakeLimit(Algorithm::kFixedWindow, 300, kDay);
  const Item busy[] = {{.limit = &counter, .limit_id = 1, .key = "busy:reshard", .cost = 1},
                       {.limit = &small, .limit_id = 2, .key = "busy:reshard", .cost = 1}};
  ASSERT_TRUE(testing::DecideNow(*store_, {busy[0]}).ok());
  if (!WindowOutlastsTheTest(*store_, busy[0])) GTEST_SKIP() << "too close to midnight UTC";
  const std::string key = store_->RedisKey(1, "busy:reshard");
  const std::string slot = std::to_string(KeySlot(key));
  const std::string from = client_->NodeFor(key);
  std::string to;  // another master
  for (size_t i = 0; i < spread_keys_.size() && to.empty(); ++i) {
    const std::string node = client_->NodeFor(store_->RedisKey(1, spread_keys_[i]));
    if (!node.empty() && node != from) to = node;
  }
  ASSERT_FALSE(to.empty());
  const std::string from_id = Id(from), to_id = Id(to);
  const uint64_t redirects = client_->redirects();

  LoadLoop load(store_.get(), spread_, {busy[0], busy[1]}, 4);
  // Long enough for the small limit to run out before the move: if its state did not move with
  // it, the calls after would be admitted again.
  ASSERT_TRUE(load.WaitForOk(1400)) << load.last_error();
  // The steps of redis-cli --cluster reshard for one slot, with pauses so that calls arrive in
  // each state: still on `from` while migrating, ASK to `to` once the keys moved, MOVED after.
  ASSERT_EQ(
      testing::RedisCommand(Admin(to), {"CLUSTER", "SETSLOT", slot, "IMPORTING", from_id})->str,
      "OK");
  ASSERT_EQ(
      testing::RedisCommand(Admin(from), {"CLUSTER", "SETSLOT", slot, "MIGRATING", to_id})->str,
      "OK");
  EXPECT_TRUE(load.WaitForOk(200)) << load.last_error();
  auto keys = testing::RedisCommand(Admin(from), {"CLUSTER", "GETKEYSINSLOT", slot, "100"});
  ASSERT_TRUE(keys.ok());
  ASSERT_GE(keys->elements.size(), 2u);
  std::vector<std::string> migrate = {
      "MIGRATE", to.substr(0, to.rfind(':')), to.substr(to.rfind(':') + 1), "", "0", "5000",
      "KEYS"};
  for (const Reply& k : keys->elements) migrate.push_back(k.str);
  ASSERT_EQ(testing::RedisCommand(Admin(from), migrate)->str, "OK");
  const uint64_t before_ask = client_->redirects();
  EXPECT_TRUE(load.WaitForOk(200)) << load.last_error();
  const uint64_t asked = client_->redirects() - before_ask;
  // Owners first, then the others (as redis-cli does).
  ASSERT_EQ(testing::RedisCommand(Admin(to), {"CLUSTER", "SETSLOT", slot, "NODE", to_id})->str,
            "OK");
  ASSERT_EQ(testing::RedisCommand(Admin(from), {"CLUSTER", "SETSLOT", slot, "NODE", to_id})->str,
            "OK");
  for (size_t i = 0; i < cluster_->size(); ++i) {
    const std::string node = fmt::format("127.0.0.1:{}", cluster_->port(i));
    if (node == from || node == to) continue;
    (void)testing::RedisCommand(
        *admin_[i], {"CLUSTER", "SETSLOT", slot, "NODE", to_id});  // a replica may refuse
  }
  EXPECT_TRUE(load.WaitForOk(500)) << load.last_error();
  load.Stop();

  std::printf(
      "reshard of slot %s: %lld ok, %lld errors (last: %s), max latency %.1f ms, "
      "%llu redirects (%llu while the keys were on the importing node)\n",
      slot.c_str(), static_cast<long long>(load.ok()), static_cast<long long>(load.errors()),
      load.last_error().c_str(),
      std::chrono::duration<double, std::milli>(load.max_latency()).count(),
      static_cast<unsigned long long>(client_->redirects() - redirects),
      static_cast<unsigned long long>(asked));
  EXPECT_EQ(load.errors(), 0) << load.last_error();
  EXPECT_EQ(load.hangs(), 0);
  EXPECT_GT(client_->redirects(), redirects);
  EXPECT_GT(asked, 0u);  // ASK, followed with ASKING
  EXPECT_EQ(client_->NodeFor(key), to);
  // The state moved with the keys: every admitted call counted exactly once.
  EXPECT_EQ(1000000000 - Remaining(busy[0]), load.busy_allowed(0) + 1);
  EXPECT_EQ(testing::RedisCommand(Admin(to), {"EXISTS", key})->integer, 1);
  EXPECT_EQ(load.busy_allowed(1), 300);
}

INSTANTIATE_TEST_SUITE_P(Plain, ClusterFaultsTest, ::testing::Values(false));
INSTANTIATE_TEST_SUITE_P(Tls, ClusterFaultsTest, ::testing::Values(true));

}  // namespace
}  // namespace sluice::redis
