// Redis Sentinel: the wire forms the client reads (get-master-addr-by-name, +switch-master,
// -READONLY, sentinel addresses), and the client against a real redis-sentinel watching a real
// master and replica: it finds the master (past a sentinel that is down), follows a failover (by
// asking, and by +switch-master alone), and turns a demoted master's -READONLY into Unavailable;
// over mutual TLS too.

#include "redis/sentinel.h"

#include <boost/asio.hpp>
#include <future>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "redis/client.h"
#include "redis/connection.h"
#include "redis/connection_testing.h"
#include "tests/support/redis_sentinel.h"
#include "tests/support/redis_server.h"
#include "tests/support/tls_certs.h"

namespace sluice::redis {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

Reply Str(std::string s) {
  Reply r;
  r.type = Reply::Type::kString;
  r.str = std::move(s);
  return r;
}

Reply Array(std::vector<Reply> elements) {
  Reply r;
  r.type = Reply::Type::kArray;
  r.elements = std::move(elements);
  return r;
}

TEST(SentinelParseTest, MasterAddr) {
  auto a = ParseMasterAddr(Array({Str("10.0.0.7"), Str("6380")}));
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->host, "10.0.0.7");
  EXPECT_EQ((*a)->port, 6380);
  EXPECT_EQ((*a)->Address(), "10.0.0.7:6380");
  auto v6 = ParseMasterAddr(Array({Str("::1"), Str("6379")}));
  ASSERT_TRUE(v6.ok() && v6->has_value());
  EXPECT_EQ((*v6)->Address(), "[::1]:6379");
  // nil: the sentinel does not know the master.
  auto unknown = ParseMasterAddr(Reply{});
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->has_value());
  Reply error;
  error.type = Reply::Type::kError;
  error.str = "NOAUTH Authentication required.";
  EXPECT_THAT(std::string(ParseMasterAddr(error).status().message()), HasSubstr("NOAUTH"));
  EXPECT_FALSE(ParseMasterAddr(Array({Str("h")})).ok());
  EXPECT_FALSE(ParseMasterAddr(Array({Str("h"), Str("0")})).ok());
  EXPECT_FALSE(ParseMasterAddr(Array({Str("h"), Str("port")})).ok());
  EXPECT_FALSE(ParseMasterAddr(Array({Str(""), Str("6379")})).ok());
}

TEST(SentinelParseTest, SwitchMaster) {
  auto s = ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1 6380");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->master, "mymaster");
  EXPECT_EQ(s->host, "127.0.0.1");
  EXPECT_EQ(s->port, 6380);
  EXPECT_FALSE(ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1").has_value());
  EXPECT_FALSE(ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1 x").has_value());
  EXPECT_FALSE(ParseSwitchMaster("").has_value());
}

TEST(SentinelParseTest, ReadOnly) {
  Reply r;
  r.type = Reply::Type::kError;
  r.str = "READONLY You can't write against a read only replica.";
  EXPECT_TRUE(IsReadOnlyError(r));
  r.str =
      "ERR Error running script (call to f_abc): @user_script:1: -READONLY You can't write "
      "against a read only replica.";
  EXPECT_TRUE(IsReadOnlyError(r));
  r.str = "NOSCRIPT No matching script.";
  EXPECT_FALSE(IsReadOnlyError(r));
  EXPECT_FALSE(IsReadOnlyError(Str("READONLY You can't write")));  // not an error reply
}

TEST(SentinelParseTest, SentinelAddress) {
  auto e = ParseSentinelAddress("10.0.0.1:26380");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "10.0.0.1");
  EXPECT_EQ(e->port, 26380);
  e = ParseSentinelAddress("sentinel-0");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, 26379);
  e = ParseSentinelAddress("[::1]:1");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "::1");
  for (const char* bad : {"", ":1", "h:", "h:0", "h:70000", "a:b:1", "[::1", "[::1]x", "u@h:1"}) {
    EXPECT_FALSE(ParseSentinelAddress(bad).ok()) << bad;
  }
}

// A master, its replica, and one sentinel (quorum 1) watching them.
class SentinelClientTest : public ::testing::Test {
 protected:
  SentinelClientTest()
      : replica_({"--replicaof", "127.0.0.1", std::to_string(master_.port())}),
        sentinel_("mymaster", master_.port()) {}

  // `one_down`: a sentinel that is down comes first (the client asks the next). `check_interval`:
  // how often it asks anyway.
  std::unique_ptr<Client> MakeClient(bool one_down = true,
                                     std::chrono::milliseconds check_interval = 200ms) {
    Client::Options o;
    o.seeds.push_back(*ParseUrl("redis://mymaster"));
    SentinelOptions s;
    s.master = "mymaster";
    if (one_down) {
      s.sentinels.push_back(
          *ParseSentinelAddress("127.0.0.1:" + std::to_string(testing::RedisServer::FreePort())));
    }
    s.sentinels.push_back(*ParseSentinelAddress(sentinel_.address()));
    s.check_interval = check_interval;
    o.sentinel = s;
    o.connection.timeout = 1s;
    o.connection.max_backoff = 100ms;
    auto client = Client::Create(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  // A direct connection (a sentinel's: no TIME at login).
  Connection& Open(int port) {
    Connection::Options o;
    o.endpoint = *ParseUrl("redis://127.0.0.1:" + std::to_string(port));
    o.timeout = 2s;
    o.read_server_time = false;
    Connection& c = *loop_.Open(o);
    EXPECT_TRUE(test::WaitState(c, Connection::State::kReady));
    return c;
  }

  static absl::StatusOr<Reply> Call(Connection& c, std::initializer_list<std::string_view> args) {
    std::string command;
    AppendCommand(&command, args);
    std::promise<absl::StatusOr<Reply>> promise;
    c.Send(std::move(command),
           [&promise](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); });
    return promise.get_future().get();
  }

  static absl::StatusOr<Reply> Set(Client& client, const std::string& value) {
    std::string command;
    AppendCommand(&command, {"SET", "k", value});
    std::promise<absl::StatusOr<Reply>> promise;
    client.Send("k", std::move(command),
                [&promise](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); });
    return promise.get_future().get();
  }

  static bool Eventually(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    return done();
  }

  static std::string At(int port) { return "127.0.0.1:" + std::to_string(port); }

  // SENTINEL FAILOVER, once the sentinel finds the replica fit to promote (it must have heard
  // from it first: NOGOODSLAVE until then). True once it started one.
  bool Failover() {
    Connection& sentinel = Open(sentinel_.port());
    const auto until = std::chrono::steady_clock::now() + 15s;
    while (std::chrono::steady_clock::now() < until) {
      auto r = Call(sentinel, {"SENTINEL", "FAILOVER", "mymaster"});
      last_failover_answer_ = r.ok() ? r->str : std::string(r.status().message());
      if (r.ok() && !r->IsError()) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  std::string last_failover_answer_;

  testing::RedisServer master_;
  testing::RedisServer replica_;
  testing::RedisSentinel sentinel_;
  test::IoThread loop_;
};

TEST_F(SentinelClientTest, FindsTheMasterAndFollowsAFailover) {
  auto client = MakeClient();
  ASSERT_TRUE(Eventually([&] { return client->Ready(); }, 5s)) << client->last_error();
  EXPECT_EQ(client->NodeFor("k"), At(master_.port()));
  EXPECT_FALSE(client->cluster());
  auto set = Set(*client, "one");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->str, "OK");

  // The sentinel fails over to the replica.
  ASSERT_TRUE(Failover()) << last_failover_answer_;
  ASSERT_TRUE(Eventually(
      [&] { return client->NodeFor("k") == At(replica_.port()) && client->Ready(); }, 10s))
      << client->NodeFor("k") << " " << client->last_error();
  EXPECT_EQ(client->map_refreshes(), 1u);  // one change of master
  // The promoted replica takes writes (once the promotion is done).
  ASSERT_TRUE(Eventually(
      [&] {
        auto r = Set(*client, "two");
        return r.ok() && r->str == "OK";
      },
      5s));
}

// With no periodic question and no calls, only the +switch-master subscription can move it.
TEST_F(SentinelClientTest, FollowsSwitchMasterMessages) {
  auto client = MakeClient(/*one_down=*/false, /*check_interval=*/std::chrono::hours(1));
  ASSERT_TRUE(Eventually([&] { return client->Ready(); }, 5s)) << client->last_error();
  EXPECT_EQ(client->NodeFor("k"), At(master_.port()));
  ASSERT_TRUE(Failover()) << last_failover_answer_;
  EXPECT_TRUE(Eventually([&] { return client->NodeFor("k") == At(replica_.port()); }, 10s))
      << client->NodeFor("k") << " " << client->last_error();
}

TEST_F(SentinelClientTest, ADemotedMastersReadOnlyIsUnavailable) {
  auto client = MakeClient();
  ASSERT_TRUE(Eventually([&] { return client->Ready(); }, 5s)) << client->last_error();
  // The master becomes a replica behind the sentinel's back.
  Connection& master = Open(master_.port());
  ASSERT_EQ(Call(master, {"REPLICAOF", "127.0.0.1", std::to_string(replica_.port())})->str, "OK");
  auto set = Set(*client, "x");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(set.status().message()), HasSubstr("no longer the master"));
  EXPECT_THAT(std::string(set.status().message()), HasSubstr("READONLY"));
}

TEST_F(SentinelClientTest, NoMasterFailsFastAndSaysWhy) {
  Client::Options o;
  o.seeds.push_back(*ParseUrl("redis://nosuchmaster"));
  o.sentinel.emplace();
  o.sentinel->master = "nosuchmaster";
  o.sentinel->sentinels.push_back(*ParseSentinelAddress(sentinel_.address()));
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(Eventually(
      [&] { return (*client)->last_error().find("does not know it") != std::string::npos; }, 5s))
      << (*client)->last_error();
  EXPECT_FALSE((*client)->Ready());
  auto set = Set(**client, "x");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(set.status().message()), HasSubstr("no master for 'nosuchmaster'"));
}

// The master and the sentinel both over mutual TLS (rediss:// and sentinels with tls).
TEST(SentinelTlsTest, MasterAndSentinelOverMutualTls) {
  testing::TlsCerts certs;
  ASSERT_TRUE(certs.ok()) << "openssl failed: see " << certs.make_log();
  const int master_port = testing::RedisServer::FreePort();
  std::vector<std::string> master_args = certs.RedisArgs(master_port);
  testing::RedisServer master(master_args, master_port);
  const int sentinel_port = testing::RedisServer::FreePort();
  std::vector<std::string> sentinel_args = certs.RedisArgs(sentinel_port);
  sentinel_args.insert(sentinel_args.end(), {"--tls-replication", "yes"});
  testing::RedisSentinel sentinel("mymaster", master_port, 1, 1000, sentinel_args, sentinel_port);

  Client::Options o;
  o.seeds.push_back(*ParseUrl("rediss://mymaster"));
  SentinelOptions s;
  s.master = "mymaster";
  s.sentinels.push_back(*ParseSentinelAddress(sentinel.address()));
  s.sentinels[0].tls = true;
  o.sentinel = s;
  TlsOptions tls;
  tls.ca_file = certs.ca();
  tls.cert_file = certs.Cert("client");
  tls.key_file = certs.Key("client");
  o.tls = tls;
  o.connection.timeout = 1s;
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!(*client)->Ready() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE((*client)->Ready()) << (*client)->last_error();
  EXPECT_EQ((*client)->NodeFor("k"), "127.0.0.1:" + std::to_string(master_port));
  std::string command;
  AppendCommand(&command, {"SET", "k", "v"});
  std::promise<absl::StatusOr<Reply>> promise;
  (*client)->Send("k", std::move(command),
                  [&promise](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); });
  auto reply = promise.get_future().get();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->str, "OK");
}

// A sentinel with a password: the client logs in with the sentinels' own password; a wrong one
// is a refused login (a start-up error in serve: AwaitFirstConnection), naming the sentinel.
TEST(SentinelAuthTest, TheSentinelsOwnLogin) {
  testing::RedisServer master;
  testing::RedisSentinel sentinel("mymaster", master.port(), 1, 1000, {"--requirepass", "spw"});
  const auto make = [&](const std::string& password) {
    Client::Options o;
    o.seeds.push_back(*ParseUrl("redis://mymaster"));
    o.sentinel.emplace();
    o.sentinel->master = "mymaster";
    o.sentinel->sentinels.push_back(*ParseSentinelAddress(sentinel.address()));
    o.sentinel->sentinels[0].password = password;
    auto client = Client::Create(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  };
  auto right = make("spw");
  EXPECT_TRUE(AwaitFirstConnection(*right, 5s, "where").ok());
  EXPECT_TRUE(right->Ready()) << right->last_error();
  EXPECT_EQ(right->NodeFor("k"), "127.0.0.1:" + std::to_string(master.port()));
  auto wrong = make("nope");
  const absl::Status refused = AwaitFirstConnection(*wrong, 1s, "where");
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("login to " + sentinel.address()));
  EXPECT_FALSE(wrong->Ready());
}

TEST(SentinelCreateTest, RefusesBadOptions) {
  Client::Options o;
  o.seeds.push_back(*ParseUrl("redis://m"));
  o.sentinel.emplace();
  o.sentinel->master = "m";
  EXPECT_FALSE(Client::Create(o).ok());
  o.sentinel->sentinels.push_back(*ParseSentinelAddress("h:1"));
  o.sentinel->master = "";
  EXPECT_FALSE(Client::Create(o).ok());
  o.sentinel->master = "m";
  o.cluster = true;
  EXPECT_FALSE(Client::Create(o).ok());
  o.cluster = false;
  o.tls = TlsOptions{};  // TLS options, and nothing over TLS
  EXPECT_FALSE(Client::Create(o).ok());
}

}  // namespace
}  // namespace sluice::redis
