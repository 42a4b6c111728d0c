// TLS to Redis against real redis-servers that serve TLS alone, with certificates made by openssl
// at test time (tests/support/tls_certs.h): commands and pipelines over mutual TLS, a reconnection
// after a restart, the client (rediss:// seeds, a TLS cluster reached by the addresses it
// announces); and each refusal named by its cause: no client certificate, a wrong CA, an expired
// certificate, a wrong host name (by address and by server_name), with skip-hostname verifying
// the rest still. Files that cannot be used are errors naming the file.

#include "redis/tls.h"

#include <atomic>
#include <boost/asio.hpp>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "redis/client.h"
#include "redis/connection.h"
#include "redis/connection_testing.h"
#include "redis/resp.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tls_certs.h"

namespace sluice::redis {
namespace {

using test::WaitState;

using ::sluice::testing::RedisServer;
using ::sluice::testing::TlsCerts;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// The options that trust the CAs of `ca_file` and present no certificate.
TlsOptions WithCa(const std::string& ca_file) {
  TlsOptions o;
  o.ca_file = ca_file;
  return o;
}

// A redis-server serving TLS alone (mutual by default) on a free port.
struct TlsServer {
  TlsServer(const TlsCerts& certs, const std::string& cert = "server", bool auth_clients = true)
      : port(RedisServer::FreePort()), server(certs.RedisArgs(port, cert, auth_clients), port) {}
  std::string url(const std::string& host = "127.0.0.1") const {
    return "rediss://" + host + ":" + std::to_string(port);
  }
  int port;
  RedisServer server;
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(certs_.ok()) << "openssl failed: see " << certs_.make_log(); }

  // The options of a client with the CA and the client certificate: what mutual TLS needs.
  TlsOptions Mutual() const {
    TlsOptions o = WithCa(certs_.ca());
    o.cert_file = certs_.Cert("client");
    o.key_file = certs_.Key("client");
    return o;
  }

  std::shared_ptr<Connection> Open(const std::string& url, const TlsOptions& tls) {
    auto context = MakeTlsContext(tls);
    EXPECT_TRUE(context.ok()) << context.status();
    Connection::Options o;
    o.endpoint = *ParseUrl(url);
    o.timeout = 2s;
    o.max_backoff = 200ms;
    o.tls = context.ok() ? *context : nullptr;
    return loop_.Open(o);
  }

  // Waits (5 s) until the connection has given up on an attempt, and says why.
  static std::string Refusal(const Connection& c) {
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
      if (c.state() == Connection::State::kDown && !c.last_error().empty()) break;
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_NE(c.state(), Connection::State::kReady);
    return c.last_error();
  }

  static absl::StatusOr<Reply> Call(Connection& c, std::initializer_list<std::string_view> args) {
    std::string command;
    AppendCommand(&command, args);
    std::promise<absl::StatusOr<Reply>> promise;
    auto future = promise.get_future();
    c.Send(std::move(command),
           [&promise](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); });
    if (future.wait_for(10s) != std::future_status::ready) {
      return absl::InternalError("no callback");
    }
    return future.get();
  }

  static absl::StatusOr<Reply> Call(Client& c, std::string_view key,
                                    std::initializer_list<std::string_view> args) {
    std::string command;
    AppendCommand(&command, args);
    std::promise<absl::StatusOr<Reply>> promise;
    auto future = promise.get_future();
    c.Send(key, std::move(command),
           [&promise](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); });
    if (future.wait_for(10s) != std::future_status::ready) {
      return absl::InternalError("no callback");
    }
    return future.get();
  }

  TlsCerts certs_;
  test::IoThread loop_;
};

TEST(TlsUrlTest, RedissIsTls) {
  auto e = ParseUrl("rediss://:pw@cache.internal:6380/2");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->tls);
  EXPECT_EQ(e->host, "cache.internal");
  EXPECT_EQ(e->port, 6380);
  EXPECT_EQ(e->password, "pw");
  EXPECT_EQ(e->db, 2);
  EXPECT_FALSE(ParseUrl("redis://cache:6379")->tls);
  EXPECT_THAT(std::string(ParseUrl("redisss://x").status().message()), HasSubstr("rediss://"));
  EXPECT_EQ(DescribeRedis(false, *e), "redis cache.internal:6380 (TLS)");
}

TEST_F(TlsTest, CommandsAndPipelinesOverMutualTls) {
  TlsServer server(certs_);
  auto c = Open(server.url(), Mutual());
  ASSERT_TRUE(WaitState(*c, Connection::State::kReady)) << c->last_error();
  auto pong = Call(*c, {"PING"});
  ASSERT_TRUE(pong.ok()) << pong.status();
  EXPECT_EQ(pong->str, "PONG");
  // Many commands from several threads, pipelined over the one TLS stream, in order per sender.
  constexpr int kThreads = 4, kEach = 500;
  std::atomic<int> answered{0}, wrong{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        std::string command;
        const std::string key = "k" + std::to_string(t);
        AppendCommand(&command, {"INCR", key});
        c->Send(std::move(command), [&, i](absl::StatusOr<Reply> r) {
          if (!r.ok() || r->integer != i + 1) wrong.fetch_add(1);
          answered.fetch_add(1);
        });
      }
    });
  }
  for (auto& s : senders) s.join();
  for (int i = 0; i < 1000 && answered.load() < kThreads * kEach; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(answered.load(), kThreads * kEach);
  EXPECT_EQ(wrong.load(), 0);
  // A pipeline of several commands, one reply array; a value larger than a TLS record.
  const std::string big(100000, 'x');
  std::string pipeline;
  AppendCommand(&pipeline, {"SET", "big", big});
  AppendCommand(&pipeline, {"GET", "big"});
  std::promise<absl::StatusOr<Reply>> promise;
  c->Send(
      std::move(pipeline), [&](absl::StatusOr<Reply> r) { promise.set_value(std::move(r)); }, 2);
  auto both = promise.get_future().get();
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->elements.size(), 2u);
  EXPECT_EQ(both->elements[1].str, big);
}

TEST_F(TlsTest, ReconnectsWithAFreshHandshakeAfterARestart) {
  TlsServer server(certs_);
  auto c = Open(server.url(), Mutual());
  ASSERT_TRUE(WaitState(*c, Connection::State::kReady)) << c->last_error();
  ASSERT_TRUE(Call(*c, {"SET", "a", "1"}).ok());
  server.server.Kill();
  EXPECT_FALSE(Call(*c, {"PING"}).ok());
  ASSERT_TRUE(server.server.Start());
  ASSERT_TRUE(WaitState(*c, Connection::State::kReady)) << c->last_error();
  auto pong = Call(*c, {"PING"});
  ASSERT_TRUE(pong.ok()) << pong.status();
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(TlsTest, MutualTlsRefusesAClientWithoutACertificate) {
  TlsServer server(certs_);
  auto c = Open(server.url(), WithCa(certs_.ca()));
  const std::string why = Refusal(*c);
  EXPECT_THAT(why, HasSubstr("the server refused the client's certificate"));
  EXPECT_THAT(why, HasSubstr("certificate required"));
  // Commands fail at once, as for any server that is down.
  auto r = Call(*c, {"PING"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("certificate"));
  // Without mutual TLS the same client is fine.
  TlsServer open_server(certs_, "server", /*auth_clients=*/false);
  auto d = Open(open_server.url(), WithCa(certs_.ca()));
  EXPECT_TRUE(WaitState(*d, Connection::State::kReady)) << d->last_error();
}

TEST_F(TlsTest, AWrongCaIsNamed) {
  TlsServer server(certs_);
  TlsOptions tls = Mutual();
  tls.ca_file = certs_.Cert("other-ca");
  auto c = Open(server.url(), tls);
  // (The server sends its CA after its certificate, as OpenSSL does with the CA in its store: the
  // CA is then what the client does not trust.)
  EXPECT_THAT(Refusal(*c),
              HasSubstr("TLS handshake with 127.0.0.1:" + std::to_string(server.port) +
                        " failed: certificate verify failed: self-signed certificate in "
                        "certificate chain"));
  // The system's store does not know the test CA either.
  tls.ca_file = "";
  auto d = Open(server.url(), tls);
  EXPECT_THAT(Refusal(*d), HasSubstr("certificate verify failed"));
}

TEST_F(TlsTest, AnExpiredCertificateIsNamed) {
  TlsServer server(certs_, "expired");
  auto c = Open(server.url(), Mutual());
  EXPECT_THAT(Refusal(*c), HasSubstr("certificate verify failed: certificate has expired"));
  // Skipping the host name check skips nothing else.
  TlsOptions skip = Mutual();
  skip.verify_hostname = false;
  auto d = Open(server.url(), skip);
  EXPECT_THAT(Refusal(*d), HasSubstr("certificate has expired"));
}

TEST_F(TlsTest, AWrongHostNameIsNamed) {
  // A certificate for elsewhere.test, reached at 127.0.0.1.
  TlsServer elsewhere(certs_, "elsewhere");
  auto c = Open(elsewhere.url(), Mutual());
  EXPECT_THAT(Refusal(*c), HasSubstr("certificate verify failed: IP address mismatch"));
  // ... and by a name it does not carry.
  TlsServer server(certs_);
  TlsOptions other_name = Mutual();
  other_name.server_name = "redis.other.test";
  auto d = Open(server.url(), other_name);
  EXPECT_THAT(Refusal(*d), HasSubstr("certificate verify failed: hostname mismatch"));
  // The right name, given as server_name, passes.
  TlsOptions right_name = Mutual();
  right_name.server_name = "elsewhere.test";
  auto e = Open(elsewhere.url(), right_name);
  EXPECT_TRUE(WaitState(*e, Connection::State::kReady)) << e->last_error();
  // So does the host name of the URL (localhost is in the server's certificate).
  auto f = Open(server.url("localhost"), Mutual());
  EXPECT_TRUE(WaitState(*f, Connection::State::kReady)) << f->last_error();
  // Skipping the name check lets the wrong name through, the chain still verified.
  TlsOptions skip = Mutual();
  skip.verify_hostname = false;
  auto g = Open(elsewhere.url(), skip);
  EXPECT_TRUE(WaitState(*g, Connection::State::kReady)) << g->last_error();
}

TEST_F(TlsTest, FilesThatCannotBeUsedAreNamed) {
  sluice::testing::TempDir dir;
  const std::string garbage = dir.Write("garbage.pem", "not a certificate\n");
  const auto error = [](const TlsOptions& o, std::string* field = nullptr) {
    auto context = MakeTlsContext(o, field);
    EXPECT_FALSE(context.ok());
    EXPECT_EQ(context.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(context.status().message());
  };
  std::string field;
  EXPECT_THAT(error(WithCa(dir.Path("missing.pem")), &field),
              HasSubstr("TLS CA file " + dir.Path("missing.pem") +
                        ": cannot read it: No such file or directory"));
  EXPECT_EQ(field, "ca_file");
  EXPECT_THAT(error(WithCa(garbage)),
              HasSubstr("TLS CA file " + garbage + ": no CA certificate in it"));
  TlsOptions o = Mutual();
  o.cert_file = garbage;
  EXPECT_THAT(error(o, &field), HasSubstr("TLS client certificate " + garbage));
  EXPECT_EQ(field, "cert_file");
  o = Mutual();
  o.key_file = certs_.Key("server");  // another certificate's key
  EXPECT_THAT(error(o, &field), HasSubstr("TLS client key " + certs_.Key("server")));
  EXPECT_EQ(field, "key_file");
  o = Mutual();
  o.key_file = dir.Path("nope.key");
  EXPECT_THAT(error(o), HasSubstr("cannot read it"));
  o = Mutual();
  o.key_file = "";
  EXPECT_THAT(error(o), HasSubstr("without its key"));
  EXPECT_TRUE(MakeTlsContext(Mutual()).ok());
  EXPECT_TRUE(MakeTlsContext(TlsOptions{}).ok());  // the system's store
}

TEST_F(TlsTest, ClientOverTls) {
  TlsServer server(certs_);
  Client::Options o;
  o.seeds = {*ParseUrl(server.url())};
  o.tls = Mutual();
  o.connection.timeout = 2s;
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(AwaitFirstConnection(**client, 5s, "test").ok());
  ASSERT_TRUE((*client)->Ready()) << (*client)->last_error();
  auto r = Call(**client, "k", {"INCRBY", "k", "5"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->integer, 5);

  // A client whose certificate the server refuses is not ready, and says why; it is not a
  // refused login (the caller goes on, its failure policy answering).
  Client::Options refused = o;
  refused.tls = WithCa(certs_.Cert("other-ca"));
  auto bad = Client::Create(refused);
  ASSERT_TRUE(bad.ok());
  EXPECT_TRUE(AwaitFirstConnection(**bad, 500ms, "test").ok());
  EXPECT_FALSE((*bad)->Ready());
  EXPECT_THAT((*bad)->last_error(), HasSubstr("certificate verify failed"));

  // TLS is the seeds' scheme: options for redis:// and mixed seeds are errors.
  Client::Options plain = o;
  plain.seeds = {*ParseUrl("redis://127.0.0.1:1")};
  EXPECT_THAT(std::string(Client::Create(plain).status().message()), HasSubstr("rediss://"));
  Client::Options mixed = o;
  mixed.seeds.push_back(*ParseUrl("redis://127.0.0.1:1"));
  EXPECT_THAT(std::string(Client::Create(mixed).status().message()), HasSubstr("mixed"));
  Client::Options missing = o;
  missing.tls->ca_file = "/nonexistent/ca.pem";
  EXPECT_THAT(std::string(Client::Create(missing).status().message()),
              HasSubstr("/nonexistent/ca.pem"));
}

// A cluster over TLS (its bus too): the client reaches every master over TLS at the address the
// cluster announces (127.0.0.1, in the servers' certificate), following the slot map.
TEST_F(TlsTest, ClusterOverTls) {
  sluice::testing::RedisCluster cluster(3, 0, &certs_);
  ASSERT_TRUE(cluster.created());
  Client::Options o;
  o.cluster = true;
  o.seeds = {*ParseUrl("rediss://127.0.0.1:" + std::to_string(cluster.port(0)))};
  o.tls = Mutual();
  o.connection.timeout = 2s;
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 500 && !(*client)->Ready(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE((*client)->Ready()) << (*client)->last_error();
  std::set<std::string> nodes;
  for (int i = 0; i < 30; ++i) {
    const std::string key = "key" + std::to_string(i);
    auto r = Call(**client, key, {"SET", key, "v"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->str, "OK");
    nodes.insert((*client)->NodeFor(key));
  }
  EXPECT_EQ(nodes.size(), 3u);
}

}  // namespace
}  // namespace sluice::redis
