// HttpServer's limits, against a real loopback server: requests the server answers itself (400,
// 413, 431; HTTP/1.1 without exactly one Host) never reach the handler and are reported to the
// listener's `server_answered`.

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "http/server.h"

namespace sluice::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// One client connection, read without blocking, to watch what the server does with it.
class Client {
 public:
  explicit Client(int port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
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
        [this](HttpRequest&, const std::string&, HttpResponse&, Deferral&) {
          std::lock_guard lock(mu_);
          ++handled_;
        },
        max_connections, nullptr,
        [this](unsigned status) {
          std::lock_guard lock(mu_);
          server_answered_.push_back(status);
        });
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    thread_ = std::thread([this] { server_->Run(); });
  }

  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }

  std::vector<unsigned> server_answered() {
    std::lock_guard lock(mu_);
    return server_answered_;
  }
  int handled() {
    std::lock_guard lock(mu_);
    return handled_;
  }

  std::optional<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<unsigned> server_answered_;  // guarded by mu_
  int handled_ = 0;                        // guarded by mu_
};

// RFC 9112 §3.2: an HTTP/1.1 request without Host, or with two, is a 400; HTTP/1.0 needs none.
TEST_F(ConnectionLimitsTest, HttpOneOneNeedsExactlyOneHost) {
  Serve({.threads = 1});
  const auto answer = [&](std::string_view request) {
    Client client(port_);
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
    Client client(port_);
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
