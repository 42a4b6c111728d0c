// HttpServer's limits on connections, against a real loopback server: a connection that sends
// nothing is closed at the header timeout counted from the accept, a keep-alive one may wait the
// idle timeout for its next request and is closed after it (the timeouts on a ManualClock, which
// the server must follow rather than real time), a connection arriving at the
// cap takes the place of the one idle the longest (on any thread) and is refused only when none
// is idle. Requests the server answers itself (400, 413, 431; HTTP/1.1 without exactly one Host)
// never reach the handler and are reported to the listener's `server_answered`.

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "http/transport/server.h"
#include "sluice/clock.h"

namespace sluice::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// One client connection, read without blocking, to watch what the server does with it.
class RawClient {
 public:
  explicit RawClient(int port) : socket_(io_) {
    socket_.connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  }

  void Send(std::string_view raw) {
    boost::system::error_code ec;  // the server may have closed the connection already
    asio::write(socket_, asio::buffer(raw.data(), raw.size()), ec);
  }

  // Reads what comes for up to `within`; true as soon as the server has closed the connection
  // (end of stream or reset), false if it is still open after `within`.
  bool ClosedWithin(milliseconds within) {
    if (closed_) return true;
    socket_.non_blocking(true);
    const auto end = SteadyClock::now() + within;
    char buffer[4096];
    while (SteadyClock::now() < end) {
      boost::system::error_code ec;
      const size_t n = socket_.read_some(asio::buffer(buffer), ec);
      if (ec == asio::error::would_block) {
        std::this_thread::sleep_for(milliseconds(2));
        continue;
      }
      if (ec) {
        closed_ = true;
        break;
      }
      received_.append(buffer, n);
    }
    socket_.non_blocking(false);
    return closed_;
  }

  // Waits up to `within` for a whole answer without a body (its blank line); true if it came.
  bool AnswerWithin(milliseconds within) {
    const auto end = SteadyClock::now() + within;
    while (received_.find("\r\n\r\n") == std::string::npos && SteadyClock::now() < end &&
           !closed_) {
      ClosedWithin(milliseconds(10));
    }
    return received_.find("\r\n\r\n") != std::string::npos;
  }

  const std::string& received() const { return received_; }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  std::string received_;
  bool closed_ = false;
};

constexpr std::string_view kRequest = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";

class ConnectionLimitsTest : public ::testing::Test {
 protected:
  // Serves an empty 200 to every request, on a server with `options` and a listener capped at
  // `max_connections` (0: the options').
  void Serve(const ServerOptions& options, size_t max_connections = 0) {
    server_.emplace(options);
    auto port = server_->Listen(
        "127.0.0.1:0",
        [this](HttpRequest& request, const std::string&, HttpResponse&, Deferral&) {
          if (request.target() == "/sync") return;  // Sync()'s, not counted
          absl::MutexLock lock(&mu_);
          ++handled_;
        },
        max_connections, nullptr,
        [this](unsigned status) {
          absl::MutexLock lock(&mu_);
          server_answered_.push_back(status);
        });
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    thread_ = std::thread([this] { server_->Run(); });
  }

  // Waits until the server's one thread (threads = 1) has done what it was doing: connections
  // are accepted one after the other, and a handler runs to its end before the next, so once a
  // new connection is answered, the connections opened and the answers received before it have
  // set their deadlines (by the clock's reading before this). Then the clock may be advanced.
  void Sync() {
    RawClient probe(port_);
    probe.Send("GET /sync HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    ASSERT_TRUE(probe.ClosedWithin(milliseconds(3000)));
    ASSERT_EQ(probe.received().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << probe.received();
  }

  // Waits (up to 3 s) until the server has accepted `n` connections in all; whether it has.
  bool AcceptedWithin(uint64_t n) {
    const auto end = SteadyClock::now() + milliseconds(3000);
    while (server_->stats().connections_total.load() < n && SteadyClock::now() < end) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return server_->stats().connections_total.load() >= n;
  }

  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }

  std::vector<unsigned> server_answered() {
    absl::MutexLock lock(&mu_);
    return server_answered_;
  }
  int handled() {
    absl::MutexLock lock(&mu_);
    return handled_;
  }

  ManualClock clock_;  // for the timeouts, where a test sets ServerOptions::clock to it
  std::optional<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<unsigned> server_answered_ ABSL_GUARDED_BY(mu_);
  int handled_ ABSL_GUARDED_BY(mu_) = 0;
};

// A connection that never sends a byte is closed at the header timeout, not at the idle timeout
// (60 s by default), so that no client can hold every connection of the cap with silent sockets.
// The timeout is the server's clock's: real time passing does not close it, the clock reaching it
// does.
TEST_F(ConnectionLimitsTest, SilentConnectionIsClosedAtTheHeaderTimeout) {
  Serve({.threads = 1,
         .header_timeout = milliseconds(50),
         .idle_timeout = milliseconds(10000),
         .clock = &clock_});
  RawClient silent(port_);
  Sync();
  EXPECT_FALSE(silent.ClosedWithin(milliseconds(300)));  // six header timeouts of real time
  clock_.Advance(49'000);
  EXPECT_FALSE(silent.ClosedWithin(milliseconds(100)));
  clock_.Advance(2'000);
  EXPECT_TRUE(silent.ClosedWithin(milliseconds(3000)));
  EXPECT_EQ(silent.received(), "");
}

// The header timeout counts from the accept, not from the first byte: a client that waits before
// it starts does not get the whole header timeout again.
TEST_F(ConnectionLimitsTest, FirstRequestMustArriveWholeWithinTheHeaderTimeoutFromTheAccept) {
  Serve({.threads = 1,
         .header_timeout = milliseconds(100),
         .idle_timeout = milliseconds(10000),
         .clock = &clock_});
  RawClient slow(port_);
  Sync();
  clock_.Advance(60'000);
  EXPECT_FALSE(slow.ClosedWithin(milliseconds(100)));
  slow.Send("GET / HTTP/1.1\r\n");  // and never the rest
  clock_.Advance(30'000);
  EXPECT_FALSE(slow.ClosedWithin(milliseconds(300)));
  // 110 ms after the accept; counted from the first byte it would be 50 ms.
  clock_.Advance(20'000);
  EXPECT_TRUE(slow.ClosedWithin(milliseconds(3000)));
  EXPECT_EQ(slow.received(), "");
}

// Between requests, a keep-alive connection waits for the next one up to the idle timeout, even
// when that is longer than the header timeout.
TEST_F(ConnectionLimitsTest, KeepAliveConnectionWaitsTheIdleTimeoutForTheNextRequest) {
  Serve({.threads = 1,
         .header_timeout = milliseconds(50),
         .idle_timeout = milliseconds(500),
         .clock = &clock_});
  RawClient client(port_);
  client.Send(kRequest);
  ASSERT_TRUE(client.AnswerWithin(milliseconds(3000))) << client.received();
  Sync();
  clock_.Advance(450'000);
  EXPECT_FALSE(client.ClosedWithin(milliseconds(200)));
  client.Send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(client.ClosedWithin(milliseconds(3000)));
  EXPECT_EQ(handled(), 2) << client.received();
}

// ... and no longer: at the idle timeout by the server's clock (not by real time) it is closed.
TEST_F(ConnectionLimitsTest, KeepAliveConnectionIsClosedAtTheIdleTimeout) {
  Serve({.threads = 1,
         .header_timeout = milliseconds(50),
         .idle_timeout = milliseconds(100),
         .clock = &clock_});
  RawClient client(port_);
  client.Send(kRequest);
  ASSERT_TRUE(client.AnswerWithin(milliseconds(3000))) << client.received();
  Sync();
  EXPECT_FALSE(client.ClosedWithin(milliseconds(400)));  // four idle timeouts of real time
  clock_.Advance(99'000);
  EXPECT_FALSE(client.ClosedWithin(milliseconds(100)));
  clock_.Advance(2'000);
  EXPECT_TRUE(client.ClosedWithin(milliseconds(3000)));
  EXPECT_EQ(handled(), 1);
}

// At the cap, a new connection closes the one idle the longest instead of being refused.
TEST_F(ConnectionLimitsTest, AtTheCapTheOldestIdleConnectionMakesRoom) {
  Serve({.threads = 1}, /*max_connections=*/2);
  RawClient oldest(port_);
  ASSERT_TRUE(AcceptedWithin(1));  // (and idle: one thread accepts and starts it in one go)
  RawClient newer(port_);
  ASSERT_TRUE(AcceptedWithin(2));
  RawClient late(port_);
  late.Send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(late.ClosedWithin(milliseconds(3000)));
  EXPECT_EQ(late.received().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << late.received();
  EXPECT_TRUE(oldest.ClosedWithin(milliseconds(1000)));
  EXPECT_EQ(oldest.received(), "");
  EXPECT_FALSE(newer.ClosedWithin(milliseconds(100)));
}

// A connection in the middle of a request is not idle: with only those open, a new connection is
// refused, as before.
TEST_F(ConnectionLimitsTest, AtTheCapWithNoIdleConnectionTheNewOneIsRefused) {
  Serve({.threads = 1}, /*max_connections=*/2);
  RawClient first(port_);
  first.Send("GET / HTTP/1.1\r\n");
  RawClient second(port_);
  second.Send("GET / HTTP/1.1\r\n");
  std::this_thread::sleep_for(milliseconds(100));
  RawClient refused(port_);
  refused.Send(kRequest);
  ASSERT_TRUE(refused.ClosedWithin(milliseconds(3000)));
  EXPECT_EQ(refused.received(), "");
  EXPECT_FALSE(first.ClosedWithin(milliseconds(100)));
  EXPECT_FALSE(second.ClosedWithin(milliseconds(100)));
  EXPECT_EQ(server_->stats().connections_rejected.load(), 1u);
}

// Connections live on several threads; the one idle the longest is found on whichever it is.
TEST_F(ConnectionLimitsTest, TheOldestIdleConnectionIsFoundAcrossThreads) {
  Serve({.threads = 4}, /*max_connections=*/4);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 4; ++i) {  // one on each thread, in turn
    idle.push_back(std::make_unique<RawClient>(port_));
    std::this_thread::sleep_for(milliseconds(50));
  }
  // The second becomes busy (mid-request): the first is still the oldest idle one.
  idle[1]->Send("GET / HTTP/1.1\r\n");
  std::this_thread::sleep_for(milliseconds(50));
  // Two more, each kept open after its answer (so the cap stays reached): the first makes room
  // by closing the first idle one, the second by closing the third (the first late one, idle
  // since its answer, is newer).
  std::vector<std::unique_ptr<RawClient>> late;
  for (int i = 0; i < 2; ++i) {
    late.push_back(std::make_unique<RawClient>(port_));
    late.back()->Send(kRequest);
    ASSERT_TRUE(late.back()->AnswerWithin(milliseconds(3000))) << late.back()->received();
    EXPECT_EQ(late.back()->received().rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  }
  EXPECT_TRUE(idle[0]->ClosedWithin(milliseconds(1000)));
  EXPECT_TRUE(idle[2]->ClosedWithin(milliseconds(1000)));
  EXPECT_FALSE(idle[1]->ClosedWithin(milliseconds(100)));
  EXPECT_FALSE(idle[3]->ClosedWithin(milliseconds(100)));
  EXPECT_FALSE(late[0]->ClosedWithin(milliseconds(100)));
}

// RFC 9112 §3.2: an HTTP/1.1 request without Host, or with two, is a 400; HTTP/1.0 needs none.
TEST_F(ConnectionLimitsTest, HttpOneOneNeedsExactlyOneHost) {
  Serve({.threads = 1});
  const auto answer = [&](std::string_view request) {
    RawClient client(port_);
    client.Send(request);
    client.ClosedWithin(milliseconds(3000));
    return client.received().substr(0, client.received().find("\r\n"));
  };
  EXPECT_EQ(answer("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(answer("GET / HTTP/1.1\r\nHost: a\r\nX-Other: 1\r\nHost: b\r\n\r\n"),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(answer("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"), "HTTP/1.1 200 OK");
  EXPECT_EQ(answer("GET / HTTP/1.0\r\n\r\n"), "HTTP/1.0 200 OK");
  EXPECT_EQ(handled(), 2);
}

// 400, 413 and 431 are the server's own answers: the handler never sees those requests, so the
// listener is told of them (to count them with the handler's answers).
TEST_F(ConnectionLimitsTest, AnswersTheServerWritesItselfAreReported) {
  Serve({.threads = 1, .max_header_bytes = 1024, .max_body_bytes = 100});
  const auto status = [&](const std::string& request) {
    RawClient client(port_);
    client.Send(request);
    client.ClosedWithin(milliseconds(3000));
    return client.received().substr(0, 12);
  };
  EXPECT_EQ(status("NOT A REQUEST LINE\r\n\r\n"), "HTTP/1.1 400");
  EXPECT_EQ(status("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n"),
            "HTTP/1.1 431");
  EXPECT_EQ(status("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"), "HTTP/1.1 413");
  EXPECT_EQ(status("GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 400");
  EXPECT_EQ(server_answered(), (std::vector<unsigned>{400, 431, 413, 400}));
  EXPECT_EQ(handled(), 0);
}

}  // namespace
}  // namespace sluice::http
