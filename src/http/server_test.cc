// HttpServer's deferred answers: a handler that answers later, from another thread, keeps the
// order of pipelined requests; a Responder dropped unsent answers 500; Stop() waits for a
// deferred request in flight.

#include "http/server.h"

#include <chrono>
#include <string>
#include <thread>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

namespace sluice::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Sends `raw` on a fresh connection and reads until the server closes it or `deadline` passes.
std::string Exchange(int port, const std::string& raw, std::chrono::milliseconds deadline) {
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  asio::write(socket, asio::buffer(raw));
  std::string out;
  char buf[4096];
  const auto end = std::chrono::steady_clock::now() + deadline;
  socket.non_blocking(true);
  while (std::chrono::steady_clock::now() < end) {
    boost::system::error_code ec;
    const size_t n = socket.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    if (ec) break;
    out.append(buf, n);
  }
  return out;
}

class DeferralTest : public ::testing::Test {
 protected:
  void Serve(Handler handler) {
    auto port = server_.Listen("127.0.0.1:0", std::move(handler));
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    thread_ = std::thread([this] { server_.Run(); });
  }
  void TearDown() override {
    server_.Stop();
    if (thread_.joinable()) thread_.join();
  }

  HttpServer server_{ServerOptions{.threads = 1}};
  int port_ = 0;
  std::thread thread_;
};

TEST_F(DeferralTest, LaterAnswersFromOtherThreadsKeepPipelinedOrder) {
  Serve([](HttpRequest& request, const std::string&, HttpResponse& response, Deferral& deferral) {
    const std::string target(request.target());
    if (target == "/now") {
      response.body() = "now";
      return;
    }
    std::thread([responder = deferral.Take(), target]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      HttpResponse later(beast_http::status::accepted, 11);
      later.body() = "later" + target;
      responder.Send(std::move(later));
    }).detach();
  });
  const std::string out = Exchange(port_,
                                   "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /now HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                   std::chrono::seconds(3));
  const size_t a = out.find("later/a");
  const size_t now = out.find("now", a == std::string::npos ? 0 : a + 7);
  const size_t b = out.find("later/b");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(now, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  EXPECT_LT(a, now);
  EXPECT_LT(now, b);
  EXPECT_EQ(out.rfind("HTTP/1.1 202 Accepted", 0), 0u) << out;
}

TEST_F(DeferralTest, DroppedResponderAnswers500) {
  Serve([](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
    Responder dropped = deferral.Take();
  });
  const std::string out = Exchange(
      port_, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", std::chrono::seconds(3));
  EXPECT_EQ(out.rfind("HTTP/1.1 500", 0), 0u) << out;
  EXPECT_NE(out.find("dropped without an answer"), std::string::npos) << out;
}

TEST_F(DeferralTest, StopWaitsForADeferredRequest) {
  std::atomic<bool> taken{false};
  Serve([&](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
    std::thread([responder = deferral.Take()]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      HttpResponse later(beast_http::status::ok, 11);
      later.body() = "finished";
      responder.Send(std::move(later));
    }).detach();
    taken = true;
  });
  std::string out;
  std::thread client([&] {
    out = Exchange(port_, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", std::chrono::seconds(3));
  });
  while (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_.Stop();
  thread_.join();  // returns only after the deferred answer was written
  client.join();
  EXPECT_NE(out.find("finished"), std::string::npos) << out;
  EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;  // stopping: no keep-alive
}

// The server writes the status line and fields itself: Content-Length is the body's, a HEAD
// answer has the length but no body, and pipelined answers on one connection stay in order.
TEST_F(DeferralTest, AnswersCarryContentLengthAndHeadSendsNoBody) {
  Serve([](HttpRequest& request, const std::string&, HttpResponse& response, Deferral&) {
    response.set("X-Target", std::string(request.target()));
    response.body() = "hello";
  });
  const std::string out = Exchange(port_,
                                   "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /g HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                   std::chrono::seconds(3));
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nX-Target: /h\r\nContent-Length: 5\r\n\r\n"
            "HTTP/1.1 200 OK\r\nX-Target: /g\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
            "hello");
}

}  // namespace
}  // namespace sluice::http
