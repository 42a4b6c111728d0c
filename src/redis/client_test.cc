// redis::Client: hash slots (CRC16 and hash tags, checked against Redis's own CLUSTER KEYSLOT),
// routing on a real 3-master Redis Cluster, MOVED after a slot moves (the map follows), ASK
// during a migration, TRYAGAIN sent again until a migration ends (or the client stops), and a
// standalone server.

#include "redis/client.h"

#include <boost/asio.hpp>
#include <future>
#include <set>
#include <thread>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

TEST(KeySlotTest, KnownValuesAndHashTags) {
  EXPECT_EQ(KeySlot("123456789"), 12739);  // CRC16/XMODEM check value 0x31C3
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{}{bar}"),
            KeySlot(std::string_view("foo{}{bar}")));  // empty tag: whole key
  EXPECT_NE(KeySlot("foo{}{bar}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot(""), 0);
}

// Synchronous calls for the tests.
absl::StatusOr<Reply> Call(Client& client, std::string_view key,
                           std::initializer_list<std::string_view> args) {
  std::string command;
  AppendCommand(&command, args);
  std::promise<absl::StatusOr<Reply>> promise;
  auto future = promise.get_future();
  client.Send(key, std::move(command),
              [&](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); });
  if (future.wait_for(10s) != std::future_status::ready) return absl::InternalError("no reply");
  return future.get();
}

std::unique_ptr<Client> Open(std::vector<std::string> urls, bool cluster) {
  Client::Options o;
  for (const auto& u : urls) o.seeds.push_back(*ParseUrl(u));
  o.cluster = cluster;
  o.connection.timeout = 2s;
  o.connection.max_backoff = 200ms;
  auto client = Client::Create(o);
  EXPECT_TRUE(client.ok());
  for (int i = 0; i < 500 && !(*client)->Ready(); ++i) std::this_thread::sleep_for(10ms);
  return std::move(*client);
}

bool WaitClusterOk(std::vector<Client*> nodes_admin, const std::vector<std::string>& keys) {
  for (int i = 0; i < 500; ++i) {
    bool ok = true;
    for (size_t n = 0; n < nodes_admin.size(); ++n) {
      auto info = Call(*nodes_admin[n], keys[n], {"CLUSTER", "INFO"});
      ok = ok && info.ok() && info->str.find("cluster_state:ok") != std::string::npos;
    }
    if (ok) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

TEST(ClientTest, NoSeedIsAnError) { EXPECT_FALSE(Client::Create({}).ok()); }

TEST(ClientTest, StandaloneServer) {
  testing::RedisServer server;
  auto client = Open({server.url()}, false);
  ASSERT_TRUE(client->Ready()) << client->last_error();
  EXPECT_EQ(Call(*client, "k", {"SET", "k", "v"})->str, "OK");
  EXPECT_EQ(Call(*client, "k", {"GET", "k"})->str, "v");
  EXPECT_EQ(client->NodeFor("k"), fmt::format("127.0.0.1:{}", server.port()));
}

// One cluster for every test here (each test uses its own slots).
class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new testing::RedisCluster(3); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(cluster_->created()) << "redis-cli --cluster create failed";
    for (size_t i = 0; i < cluster_->size(); ++i) admin_.push_back(Open({cluster_->url(i)}, false));
    std::vector<Client*> admins;
    std::vector<std::string> keys(cluster_->size(), "x");
    for (auto& a : admin_) admins.push_back(a.get());
    ASSERT_TRUE(WaitClusterOk(admins, keys));
    client_ = Open({cluster_->url(0)}, true);
    ASSERT_TRUE(client_->Ready()) << client_->last_error();
  }

  // The admin connection to the node at "127.0.0.1:PORT".
  Client& Admin(const std::string& address) {
    for (size_t i = 0; i < cluster_->size(); ++i) {
      if (address == fmt::format("127.0.0.1:{}", cluster_->port(i))) return *admin_[i];
    }
    ADD_FAILURE() << "no node " << address;
    return *admin_[0];
  }
  std::string Id(Client& node) { return Call(node, "x", {"CLUSTER", "MYID"})->str; }
  std::string OtherNode(const std::string& address) {
    for (size_t i = 0; i < cluster_->size(); ++i) {
      std::string a = fmt::format("127.0.0.1:{}", cluster_->port(i));
      if (a != address) return a;
    }
    return "";
  }

  // A slot half migrated, the way redis-cli --cluster reshard goes: `key`'s slot IMPORTING on
  // another node, MIGRATING on its owner, and `key` alone moved over.
  struct Migration {
    std::string from, to, slot, to_id;
    std::string to_host() const { return to.substr(0, to.rfind(':')); }
    std::string to_port() const { return to.substr(to.rfind(':') + 1); }
  };
  Migration BeginMigration(const std::string& key) {
    Migration m;
    m.from = client_->NodeFor(key);
    m.to = OtherNode(m.from);
    m.slot = std::to_string(KeySlot(key));
    m.to_id = Id(Admin(m.to));
    const std::string from_id = Id(Admin(m.from));
    EXPECT_EQ(Call(Admin(m.to), key, {"CLUSTER", "SETSLOT", m.slot, "IMPORTING", from_id})->str,
              "OK");
    EXPECT_EQ(Call(Admin(m.from), key, {"CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.to_id})->str,
              "OK");
    EXPECT_EQ(Move(m, key)->str, "OK");
    return m;
  }
  // MIGRATE of `key` to the migration's target.
  absl::StatusOr<Reply> Move(const Migration& m, const std::string& key) {
    return Call(Admin(m.from), key,
                {"MIGRATE", m.to_host(), m.to_port(), "", "0", "5000", "KEYS", key});
  }
  // Every node told the slot's new owner: the migration ends. The target first, then the source,
  // then the others, as Redis's cluster specification orders it: told the other way round, the
  // source sends a client MOVED to a target that, still importing, sends it MOVED back (a
  // client's call went back and forth until its redirect limit, under the sanitizers' slowness).
  void EndMigration(const Migration& m, const std::string& key) {
    const auto set_node = [&](Client& node) {
      EXPECT_EQ(Call(node, key, {"CLUSTER", "SETSLOT", m.slot, "NODE", m.to_id})->str, "OK");
    };
    set_node(Admin(m.to));
    set_node(Admin(m.from));
    for (size_t i = 0; i < cluster_->size(); ++i) {
      const std::string node = fmt::format("127.0.0.1:{}", cluster_->port(i));
      if (node != m.to && node != m.from) set_node(*admin_[i]);
    }
  }

  // "{TAG}moved" and "{TAG}stays" set, then the migration of their slot begun with "moved" alone
  // moved over (into *m): an MGET of both is refused TRYAGAIN by the node. Sends that MGET
  // through the client; the future is its answer.
  std::future<absl::StatusOr<Reply>> SplitAndSendMget(const std::string& tag, Migration* m) {
    const std::string moved = "{" + tag + "}moved", stays = "{" + tag + "}stays";
    EXPECT_EQ(Call(*client_, moved, {"SET", moved, "m"})->str, "OK");
    EXPECT_EQ(Call(*client_, stays, {"SET", stays, "s"})->str, "OK");
    *m = BeginMigration(moved);
    EXPECT_THAT(Call(Admin(m->from), moved, {"MGET", moved, stays})->str,
                ::testing::StartsWith("TRYAGAIN"));
    auto answered = std::make_shared<std::promise<absl::StatusOr<Reply>>>();
    std::string command;
    AppendCommand(&command, {"MGET", moved, stays});
    client_->Send(moved, std::move(command),
                  [answered](absl::StatusOr<Reply> r) { answered->set_value(std::move(r)); });
    return answered->get_future();
  }

  static testing::RedisCluster* cluster_;
  std::vector<std::unique_ptr<Client>> admin_;
  std::unique_ptr<Client> client_;
};

testing::RedisCluster* ClusterTest::cluster_ = nullptr;

TEST_F(ClusterTest, RoutesEveryKeyToItsSlotsOwner) {
  std::set<std::string> owners;
  for (int i = 0; i < 200; ++i) {
    const std::string key = fmt::format("key:{}", i);
    ASSERT_EQ(Call(*client_, key, {"SET", key, std::to_string(i)})->str, "OK") << key;
    // Our slot is Redis's slot, and the node we chose holds the key (no redirect needed).
    EXPECT_EQ(Call(*client_, key, {"CLUSTER", "KEYSLOT", key})->integer, KeySlot(key));
    const std::string owner = client_->NodeFor(key);
    owners.insert(owner);
    EXPECT_EQ(Call(Admin(owner), key, {"GET", key})->str, std::to_string(i));
  }
  EXPECT_EQ(owners.size(), 3u);
  EXPECT_EQ(client_->redirects(), 0u);
}

TEST_F(ClusterTest, MovedSlotIsFollowedAndRemembered) {
  const std::string key = "{moving}k";
  ASSERT_EQ(Call(*client_, key, {"SET", key, "v"})->str, "OK");
  // Move the slot and its key.
  const Migration m = BeginMigration(key);
  EndMigration(m, key);
  // The client still thinks `from`; the answer comes from `to` after one MOVED.
  EXPECT_EQ(Call(*client_, key, {"GET", key})->str, "v");
  EXPECT_GE(client_->redirects(), 1u);
  EXPECT_EQ(client_->NodeFor(key), m.to);
  const uint64_t redirects = client_->redirects();
  EXPECT_EQ(Call(*client_, key, {"GET", key})->str, "v");
  EXPECT_EQ(client_->redirects(), redirects);  // remembered: no second redirect
}

TEST_F(ClusterTest, AskDuringAMigrationIsFollowedOnce) {
  const std::string moved = "{mig}moved", stays = "{mig}stays";
  ASSERT_EQ(Call(*client_, moved, {"SET", moved, "m"})->str, "OK");
  ASSERT_EQ(Call(*client_, stays, {"SET", stays, "s"})->str, "OK");
  const Migration m = BeginMigration(moved);
  // Half-way: `moved` is on `to` (ASK), `stays` still on `from`; the map does not change.
  EXPECT_EQ(Call(*client_, moved, {"GET", moved})->str, "m");
  EXPECT_EQ(Call(*client_, stays, {"GET", stays})->str, "s");
  EXPECT_EQ(client_->redirects(), 1u);
  EXPECT_EQ(client_->NodeFor(moved), m.from);
}

// A multi-key command whose keys a migration has split between two nodes gets TRYAGAIN from the
// node it goes to; the client sends it again shortly, and once the migration ends (the slot
// then MOVED) the command is answered, not refused.
TEST_F(ClusterTest, TryAgainDuringAMigrationIsSentAgainUntilItEnds) {
  // Split: the node refuses MGET of both keys with TRYAGAIN for as long as the migration lasts.
  Migration m;
  auto answer = SplitAndSendMget("try", &m);
  // Still refused a while later: the client is trying again, not answering.
  EXPECT_EQ(answer.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  // The migration ends: the other key follows, and every node learns the slot's new owner.
  ASSERT_EQ(Move(m, "{try}stays")->str, "OK");
  EndMigration(m, "{try}moved");
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  absl::StatusOr<Reply> reply = answer.get();
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->elements.size(), 2u) << reply->str;
  EXPECT_EQ(reply->elements[0].str, "m");
  EXPECT_EQ(reply->elements[1].str, "s");
}

// A client stopped while a call waits to be sent again answers that call, "client stopping".
TEST_F(ClusterTest, AClientStoppedWhileACallWaitsToBeSentAgainAnswersIt) {
  Migration m;
  auto answer = SplitAndSendMget("stop", &m);
  EXPECT_EQ(answer.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  client_.reset();
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(1)), std::future_status::ready);
  const absl::StatusOr<Reply> reply = answer.get();
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable) << reply.status();
  ASSERT_EQ(Move(m, "{stop}stays")->str, "OK");
  EndMigration(m, "{stop}moved");
}

}  // namespace
}  // namespace sluice::redis
