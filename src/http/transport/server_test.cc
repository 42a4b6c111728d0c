// HttpServer's deferred answers: a handler that answers later, from another thread, keeps the
// order of pipelined requests; a Responder dropped unsent answers 500; Stop() waits for a
// deferred request in flight. Streamed answers (chunked, a wrong length closing the connection)
// and streamed request bodies (read piece by piece, pipelining after them, an answer sent before
// the body was read closing the connection, 100 Continue). A stream still running at the
// shutdown deadline (by the server's clock) is cut. Requests received before Stop() (pipelined
// behind one being answered, or sent on keep-alive connections under load) are all answered.

#include "http/transport/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "sluice/clock.h"

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
  void Serve(Handler handler, StreamBodyIf stream_body = nullptr) {
    auto port = server_.Listen("127.0.0.1:0", std::move(handler), 0, std::move(stream_body));
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

TEST_F(DeferralTest, AppendedFieldsFollowTheFieldSetNowAndLater) {
  Serve([](HttpRequest& request, const std::string&, HttpResponse& response, Deferral& deferral) {
    const auto fill = [](HttpResponse& answer) {
      answer.set("X-Set", "1");
      answer.AppendField("X-One", "a");
      answer.AppendField("X-Two", "b c");
      answer.body() = "ok";
    };
    if (request.target() == "/now") return fill(response);
    std::thread([responder = deferral.Take(), fill]() mutable {
      HttpResponse later(beast_http::status::ok, 11);
      fill(later);
      responder.Send(std::move(later));
    }).detach();
  });
  const std::string expected =
      "HTTP/1.1 200 OK\r\nX-Set: 1\r\nX-One: a\r\nX-Two: b c\r\nContent-Length: 2\r\n\r\nok";
  const std::string out = Exchange(port_,
                                   "GET /now HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /later HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                   std::chrono::seconds(3));
  const std::string closing =
      "HTTP/1.1 200 OK\r\nX-Set: 1\r\nX-One: a\r\nX-Two: b c\r\n"
      "Content-Length: 2\r\nConnection: close\r\n\r\nok";
  EXPECT_EQ(out, expected + closing);
}

// The answer object is reused on a keep-alive connection (its appended fields' room is kept):
// nothing of one answer may leak into the next.
TEST_F(DeferralTest, NextAnswerOnTheConnectionStartsEmpty) {
  Serve([](HttpRequest& request, const std::string&, HttpResponse& response, Deferral&) {
    EXPECT_EQ(response.result(), beast_http::status::ok);
    EXPECT_TRUE(response.appended_fields().empty());
    EXPECT_EQ(response.begin(), response.end());
    EXPECT_TRUE(response.body().empty());
    EXPECT_EQ(response.reason(), "OK");
    EXPECT_EQ(response.version(), 11u);
    if (request.target() == "/reason") {  // an upstream's own reason phrase, passed on
      response.result(beast_http::status::not_found);
      response.reason("Nowhere");
      response.version(10);
    }
    if (request.target() == "/fields") {
      response.result(beast_http::status::too_many_requests);
      response.set("X-Set", "1");
      response.AppendField("X-One", "a");
      response.body() = "full";
    }
  });
  const std::string out = Exchange(port_,
                                   "GET /fields HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /plain HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /reason HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /fields HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                   std::chrono::seconds(3));
  const std::string fields =
      "HTTP/1.1 429 Too Many Requests\r\nX-Set: 1\r\nX-One: a\r\nContent-Length: 4\r\n";
  EXPECT_EQ(out, fields + "\r\nfull" + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" +
                     "HTTP/1.1 404 Nowhere\r\nContent-Length: 0\r\n\r\n" + fields +
                     "Connection: close\r\n\r\nfull");
}
TEST_F(DeferralTest, DroppedResponderAnswers500) {
  Serve([](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
    Responder dropped = deferral.Take();
  });
  const std::string out = Exchange(port_, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                   std::chrono::seconds(3));
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
  std::thread client(
      [&] { out = Exchange(port_, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", std::chrono::seconds(3)); });
  for (int i = 0; i < 5000 && !taken; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(taken) << "the request was not taken within 5 s";
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

// Streams "hello" and "world" without a length: chunked on HTTP/1.1.
void StreamHelloWorld(Deferral& deferral, std::optional<uint64_t> length) {
  HttpResponse head(beast_http::status::ok, 11);
  deferral.Take().Stream(std::move(head), length, [](std::shared_ptr<BodyWriter> body) {
    ASSERT_NE(body, nullptr);
    BodyWriter& writer = *body;
    writer.Write(asio::buffer("hello", 5), [body](bool written) {
      ASSERT_TRUE(written);
      BodyWriter& again = *body;
      again.Write(asio::buffer("world", 5), [body](bool written) {
        ASSERT_TRUE(written);
        body->End();
      });
    });
  });
}

// Connections are accepted on the first thread and served on all of them (each socket only on
// its own thread: the contexts run without Asio's per-socket lock). Many connections at once,
// each with pipelined requests, must all be answered in order.
TEST(ThreadsTest, ConnectionsSpreadOverThreadsAreAllServed) {
  HttpServer server(ServerOptions{.threads = 3});
  struct {
    absl::Mutex mu;
    std::set<std::thread::id> ids ABSL_GUARDED_BY(mu);
  } threads;
  auto port = server.Listen("127.0.0.1:0", [&](HttpRequest& request, const std::string&,
                                               HttpResponse& response, Deferral&) {
    {
      absl::MutexLock lock(&threads.mu);
      threads.ids.insert(std::this_thread::get_id());
    }
    response.body() = std::string(request.target());
  });
  ASSERT_TRUE(port.ok()) << port.status();
  std::thread runner([&] { server.Run(); });
  constexpr int kConnections = 24;
  std::vector<std::string> answers(kConnections);
  std::vector<std::thread> clients;
  for (int c = 0; c < kConnections; ++c) {
    clients.emplace_back([&, c] {
      const std::string id = std::to_string(c);
      answers[c] = Exchange(*port,
                            "GET /" + id +
                                "/a HTTP/1.1\r\nHost: x\r\n\r\n"
                                "GET /" +
                                id + "/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                            std::chrono::seconds(5));
    });
  }
  for (auto& t : clients) t.join();
  server.Stop();
  runner.join();
  for (int c = 0; c < kConnections; ++c) {
    const std::string id = std::to_string(c);
    const size_t a = answers[c].find("/" + id + "/a");
    const size_t b = answers[c].find("/" + id + "/b");
    ASSERT_NE(a, std::string::npos) << answers[c];
    ASSERT_NE(b, std::string::npos) << answers[c];
    EXPECT_LT(a, b);
  }
  absl::MutexLock lock(&threads.mu);
  EXPECT_EQ(threads.ids.size(), 3u);  // spread over every thread
}

// A server (on `options`) whose handler answers with an endless stream, a piece every 20 ms of
// real time until a write fails, and one client reading it; for the shutdown deadline.
class EndlessStream {
 public:
  explicit EndlessStream(const ServerOptions& options) : server_(options) {}

  // Starts the server and the client; true once the stream runs.
  bool Start() {
    auto port = server_.Listen(
        "127.0.0.1:0", [this](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
          const asio::any_io_executor executor = deferral.executor();
          deferral.Take().Stream(HttpResponse(beast_http::status::ok, 11), std::nullopt,
                                 [this, executor](std::shared_ptr<BodyWriter> body) {
                                   std::make_shared<Drip>(std::move(body), executor)->Next();
                                   streaming_ = true;
                                 });
        });
    if (!port.ok()) return false;
    run_ = std::thread([this] {
      server_.Run();
      ran_ = true;
    });
    client_ = std::thread([this, port = *port] {
      out_ = Exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", std::chrono::seconds(5));
    });
    for (int i = 0; i < 2000 && !streaming_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return streaming_;
  }

  HttpServer& server() { return server_; }

  // Whether Run() returned within `within` of real time.
  bool RanWithin(std::chrono::milliseconds within) {
    for (auto end = std::chrono::steady_clock::now() + within;
         !ran_ && std::chrono::steady_clock::now() < end;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return ran_;
  }

  // Waits for the server and the client to end; what the client read. Run() must have returned.
  std::string Join() {
    if (!ran_) std::abort();  // Run() would never return: joining it would hang the test
    run_.join();
    client_.join();
    return out_;
  }

  ~EndlessStream() {
    if (run_.joinable() || client_.joinable()) {
      server_.Stop();
      if (!RanWithin(std::chrono::seconds(5))) std::abort();  // (a test failed before)
      Join();
    }
  }

 private:
  struct Drip : std::enable_shared_from_this<Drip> {
    Drip(std::shared_ptr<BodyWriter> b, const asio::any_io_executor& e)
        : body(std::move(b)), timer(e) {}
    void Next() {
      body->Write(asio::buffer("tick", 4), [self = shared_from_this()](bool written) {
        if (!written) return;  // the connection is gone: stop
        self->timer.expires_after(std::chrono::milliseconds(20));
        self->timer.async_wait([self](boost::system::error_code ec) {
          if (!ec) self->Next();
        });
      });
    }
    std::shared_ptr<BodyWriter> body;
    asio::steady_timer timer;
  };

  HttpServer server_;
  std::atomic<bool> streaming_{false};
  std::atomic<bool> ran_{false};
  std::thread run_;
  std::thread client_;
  std::string out_;
};

// The cut stream's answer: begun, never ended.
void ExpectCutStream(const std::string& out) {
  EXPECT_EQ(out.rfind("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\ntick\r\n", 0), 0u)
      << out;
  EXPECT_EQ(out.find("0\r\n\r\n"), std::string::npos) << "cut, so never ended: " << out;
}

// An endless streamed answer must not hold Stop() past the shutdown deadline: the connection is
// closed and Run() returns.
TEST(ShutdownTest, AStreamStillRunningAtTheDeadlineIsCut) {
  EndlessStream stream(
      ServerOptions{.threads = 1, .shutdown_timeout = std::chrono::milliseconds(300)});
  ASSERT_TRUE(stream.Start());
  const auto stop = std::chrono::steady_clock::now();
  stream.server().Stop();
  EXPECT_TRUE(stream.RanWithin(std::chrono::seconds(3)))
      << "Run() did not return within 3 s of Stop()";
  const auto took = std::chrono::steady_clock::now() - stop;
  EXPECT_GE(took, std::chrono::milliseconds(250));  // the stream had its time to finish
  ExpectCutStream(stream.Join());
}

// The shutdown deadline is the server's clock's (ServerOptions::clock): real time passing does
// not end the stream, the clock reaching the deadline does.
TEST(ShutdownTest, TheShutdownDeadlineFollowsTheServersClock) {
  ManualClock clock;
  EndlessStream stream(ServerOptions{
      .threads = 1, .shutdown_timeout = std::chrono::milliseconds(100), .clock = &clock});
  ASSERT_TRUE(stream.Start());
  stream.server().Stop();
  EXPECT_FALSE(stream.RanWithin(std::chrono::milliseconds(400)));  // four deadlines of real time
  clock.Advance(99'000);
  EXPECT_FALSE(stream.RanWithin(std::chrono::milliseconds(100)));
  clock.Advance(2'000);
  EXPECT_TRUE(stream.RanWithin(std::chrono::seconds(3)))
      << "Run() did not return within 3 s of the deadline";
  ExpectCutStream(stream.Join());
}

TEST_F(DeferralTest, StreamedAnswerWithoutALengthIsChunkedAndKeepsTheConnection) {
  Serve([](HttpRequest& request, const std::string&, HttpResponse& response, Deferral& deferral) {
    if (request.target() == "/stream") return StreamHelloWorld(deferral, std::nullopt);
    response.body() = "next";
  });
  const std::string out = Exchange(port_,
                                   "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /n HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                   std::chrono::seconds(3));
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n"
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnext");
}

TEST_F(DeferralTest, StreamedAnswerToHeadSendsOnlyTheFields) {
  Serve([](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
    StreamHelloWorld(deferral, std::nullopt);
  });
  const std::string out = Exchange(port_,
                                   "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /g HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                   std::chrono::seconds(3));
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            "5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n");
}

TEST_F(DeferralTest, StreamedAnswerToHttp10IsEndedByTheClose) {
  Serve([](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
    StreamHelloWorld(deferral, std::nullopt);
  });
  const std::string out =
      Exchange(port_, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", std::chrono::seconds(3));
  EXPECT_EQ(out, "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nhelloworld");
}

TEST_F(DeferralTest, StreamedAnswerShorterThanItsLengthClosesTheConnection) {
  Serve([](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
    StreamHelloWorld(deferral, 20);  // announces 20, ends after 10
  });
  const std::string out = Exchange(port_,
                                   "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
                                   std::chrono::seconds(3));
  // Closed after the 10 bytes: the client sees the answer cut short, /b is never answered.
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nhelloworld");
}

// Reads the request's body piece by piece and answers with what it read, the pieces joined by '|'.
void EchoStreamedBody(Deferral& deferral) {
  ASSERT_NE(deferral.body(), nullptr);
  struct Echo {
    std::shared_ptr<BodyReader> body;
    Responder responder;
    std::string read;
  };
  auto echo = std::make_shared<Echo>(Echo{deferral.body(), deferral.Take(), ""});
  auto next = std::make_shared<std::function<void()>>();
  *next = [echo, next] {
    echo->body->Read([echo, next](BodyReader::Status status, std::string_view piece) {
      if (status == BodyReader::Status::kPiece) {
        echo->read += std::string(piece) + "|";
        return (*next)();
      }
      HttpResponse answer(beast_http::status::ok, 11);
      answer.body() = status == BodyReader::Status::kEnd ? echo->read : "error";
      echo->responder.Send(std::move(answer));
      *next = nullptr;  // (breaks the cycle)
    });
  };
  (*next)();
}

TEST_F(DeferralTest, StreamedRequestBodyIsReadPieceByPieceThenTheNextRequestFollows) {
  Serve(
      [](HttpRequest& request, const std::string&, HttpResponse& response, Deferral& deferral) {
        if (request.target() == "/up") return EchoStreamedBody(deferral);
        response.body() = "body " + request.body();
      },
      [](const HttpRequest& header) { return header.target() == "/up"; });
  const std::string out = Exchange(port_,
                                   "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                   "\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                                   "POST /whole HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                                   "Connection: close\r\n\r\nxyz",
                                   std::chrono::seconds(3));
  const size_t up = out.find("\r\n\r\nabcde|");  // (one put() may decode both chunks)
  const size_t up_pieces = out.find("\r\n\r\nabc|de|");
  EXPECT_TRUE(up != std::string::npos || up_pieces != std::string::npos) << out;
  EXPECT_NE(out.find("body xyz"), std::string::npos) << out;  // not streamed: read whole
}

TEST_F(DeferralTest, AnswerBeforeTheStreamedBodyWasReadClosesTheConnection) {
  Serve(
      [](HttpRequest&, const std::string&, HttpResponse& response, Deferral&) {
        response.body() = "no thanks";  // the body is never read
      },
      [](const HttpRequest&) { return true; });
  const std::string out = Exchange(port_,
                                   "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                                   "GET /b HTTP/1.1\r\nHost: x\r\n\r\n",
                                   std::chrono::seconds(3));
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno thanks");
}

// An answer far larger than the socket buffers: the first send takes part of it, the rest is
// written as the client reads, byte for byte, and the connection goes on to the next request.
TEST_F(DeferralTest, AnswerLargerThanTheSocketTakesAtOnceIsSentWhole) {
  std::string big(size_t{8} << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  Serve([&big](HttpRequest& request, const std::string&, HttpResponse& response, Deferral&) {
    response.body() = request.target() == "/big" ? big : "small";
  });
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)));
  asio::write(socket, asio::buffer(std::string("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the socket is full by now
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(big.size()) + "\r\n\r\n";
  std::string out(head.size() + big.size(), '\0');
  boost::system::error_code ec;
  asio::read(socket, asio::buffer(out), ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(out.substr(0, head.size()), head);
  EXPECT_TRUE(out.compare(head.size(), big.size(), big) == 0) << "the body differs";
  asio::write(socket,
              asio::buffer(std::string("GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")));
  std::string next;
  asio::read(socket, asio::dynamic_buffer(next), ec);
  EXPECT_EQ(ec, asio::error::eof) << ec.message();
  EXPECT_EQ(next, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nsmall");
}

TEST(LingerTest, AnswerBeforeTheStreamedBodyWasReadLetsTheClientSendItThenReadTheAnswer) {
  HttpServer server(ServerOptions{.threads = 1, .max_body_bytes = size_t{64} << 20});
  auto port = server.Listen(
      "127.0.0.1:0",
      [](HttpRequest&, const std::string&, HttpResponse& response, Deferral&) {
        response.body() = "no thanks";  // the body is never read
      },
      0, [](const HttpRequest&) { return true; });
  ASSERT_TRUE(port.ok()) << port.status();
  std::thread run([&] { server.Run(); });
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(*port)));
  const std::string body(size_t{8} << 20, 'x');  // far more than the socket buffers hold
  asio::write(socket, asio::buffer("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // answered by now
  // A client that sends its whole body before it reads (as many do) gets to read the answer:
  // the server neither resets the connection nor stops reading.
  boost::system::error_code ec;
  asio::write(socket, asio::buffer(body), ec);
  EXPECT_FALSE(ec) << ec.message();
  std::string out;
  asio::read(socket, asio::dynamic_buffer(out), ec);  // until the server's end
  EXPECT_EQ(ec, asio::error::eof) << ec.message();
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno thanks");
  socket.close();
  server.Stop();
  run.join();
}

TEST_F(DeferralTest, ClientClosingWhileTheAnswerIsDeferredIsReported) {
  std::atomic<int> gone{0};
  struct {
    absl::Mutex mu;
    std::vector<Responder> list ABSL_GUARDED_BY(mu);  // dropped at the end (they answer 500)
  } waiting;
  Serve([&](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
    Responder responder = deferral.Take();
    responder.OnClientGone([&gone] { ++gone; });
    absl::MutexLock lock(&waiting.mu);
    waiting.list.push_back(std::move(responder));
  });
  {
    asio::io_context io;
    tcp::socket socket(io);
    socket.connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)));
    asio::write(socket, asio::buffer(std::string_view("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(gone.load(), 0);  // still there, waiting
  }                             // the client closes
  for (int i = 0; i < 300 && gone.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(gone.load(), 1);
  absl::MutexLock lock(&waiting.mu);
  waiting.list.clear();
}

TEST_F(DeferralTest, ClientClosingAfterTheAnswerIsNotReportedGone) {
  std::atomic<int> gone{0};
  Serve([&](HttpRequest&, const std::string&, HttpResponse&, Deferral& deferral) {
    Responder responder = deferral.Take();
    responder.OnClientGone([&gone] { ++gone; });
    responder.Send(HttpResponse(beast_http::status::ok, 11));
  });
  const std::string out = Exchange(port_, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
                                   std::chrono::milliseconds(200));  // then closes
  EXPECT_EQ(out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << out;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(gone.load(), 0);
}

TEST_F(DeferralTest, ExpectContinueIsAnsweredWhenTheBodyIsFirstRead) {
  Serve([](HttpRequest&, const std::string&, HttpResponse&,
           Deferral& deferral) { EchoStreamedBody(deferral); },
        [](const HttpRequest&) { return true; });
  const std::string out = Exchange(port_,
                                   "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                   "Expect: 100-continue\r\nConnection: close\r\n\r\nhello",
                                   std::chrono::seconds(3));
  EXPECT_EQ(out,
            "HTTP/1.1 100 Continue\r\n\r\n"
            "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello|");
}

// Requests a client pipelined behind one still being answered when Stop() came have arrived
// before the shutdown: each is answered in turn, the last with Connection: close, and only then
// is the connection closed (not reset over the unread requests).
TEST(ShutdownTest, RequestsReceivedBeforeStopAreAllAnswered) {
  HttpServer server(ServerOptions{.threads = 1});
  struct {
    absl::Mutex mu;
    std::optional<Responder> responder ABSL_GUARDED_BY(mu);
  } held;
  auto port = server.Listen("127.0.0.1:0", [&](HttpRequest& request, const std::string&,
                                               HttpResponse& response, Deferral& deferral) {
    if (request.target() == "/held") {
      absl::MutexLock lock(&held.mu);
      held.responder.emplace(deferral.Take());
      return;
    }
    response.body() = std::string(request.target());
  });
  ASSERT_TRUE(port.ok()) << port.status();
  std::thread run([&] { server.Run(); });
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(*port)));
  asio::write(socket, asio::buffer(std::string("GET /held HTTP/1.1\r\nHost: x\r\n\r\n")));
  const auto taken = [&] {
    absl::MutexLock lock(&held.mu);
    return held.responder.has_value();
  };
  for (int i = 0; i < 2000 && !taken(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(taken());
  // While the first is deferred the server reads nothing more: these wait in its socket.
  asio::write(socket, asio::buffer(std::string("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                               "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.Stop();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Stop() has run meanwhile
  {
    absl::MutexLock lock(&held.mu);
    HttpResponse later(beast_http::status::ok, 11);
    later.body() = "held";
    held.responder->Send(std::move(later));
  }
  std::string out;
  boost::system::error_code ec;
  asio::read(socket, asio::dynamic_buffer(out), ec);  // until the server's end
  EXPECT_EQ(ec, asio::error::eof) << ec.message();
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nheld"
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/a"
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n/b");
  socket.close();
  run.join();
}

// Connections whose requests arrived before Stop() but that the server had not accepted yet (its
// only thread was busy) are accepted and answered, not reset when the listener closes.
TEST(ShutdownTest, ConnectionsNotYetAcceptedAtStopAreAnswered) {
  HttpServer server(ServerOptions{.threads = 1});
  std::atomic<bool> blocking{false};
  auto port = server.Listen("127.0.0.1:0", [&](HttpRequest& request, const std::string&,
                                               HttpResponse& response, Deferral&) {
    if (request.target() == "/block") {  // holds the server's only thread
      blocking = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    response.body() = std::string(request.target());
  });
  ASSERT_TRUE(port.ok()) << port.status();
  std::thread run([&] { server.Run(); });
  const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(*port));
  asio::io_context io;
  tcp::socket first(io);
  first.connect(at);
  asio::write(first, asio::buffer(std::string("GET /block HTTP/1.1\r\nHost: x\r\n\r\n")));
  for (int i = 0; i < 2000 && !blocking; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(blocking);
  // The kernel completes these connections and takes their requests; nobody accepts them yet.
  std::vector<tcp::socket> waiting;
  for (int i = 0; i < 5; ++i) {
    waiting.emplace_back(io);
    waiting.back().connect(at);
    asio::write(waiting.back(),
                asio::buffer(fmt::format("GET /w{} HTTP/1.1\r\nHost: x\r\n\r\n", i)));
  }
  server.Stop();  // while the thread is still blocked
  for (int i = 0; i < 5; ++i) {
    std::string out;
    boost::system::error_code ec;
    asio::read(waiting[i], asio::dynamic_buffer(out), ec);  // until the server's end
    EXPECT_EQ(ec, asio::error::eof) << i << ": " << ec.message();
    EXPECT_EQ(out, fmt::format("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n"
                               "\r\n/w{}",
                               i));
  }
  std::string out;
  boost::system::error_code ec;
  asio::read(first, asio::dynamic_buffer(out), ec);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\n/block");
  run.join();
}

// One answer read from a blocking socket: the status line and fields, then Content-Length
// bytes of body. False if the connection ended (or broke, or was silent 5 s) first. `*close`
// tells whether it said Connection: close.
bool ReadAnswer(int fd, std::string* pending, std::string* body, bool* close) {
  const auto fill = [&] {
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    pending->append(buf, static_cast<size_t>(n));
    return true;
  };
  size_t end;
  while ((end = pending->find("\r\n\r\n")) == std::string::npos) {
    if (!fill()) return false;
  }
  const std::string head = pending->substr(0, end + 4);
  const size_t at = head.find("Content-Length: ");
  if (at == std::string::npos) return false;
  const size_t length = std::stoul(head.substr(at + 16));
  while (pending->size() < end + 4 + length) {
    if (!fill()) return false;
  }
  *body = pending->substr(end + 4, length);
  *close = head.find("Connection: close") != std::string::npos;
  pending->erase(0, end + 4 + length);
  return true;
}

// Keep-alive clients sending pairs of pipelined requests without pause, across Stop(): every
// request written before Stop() was called gets its whole answer (the connection may end only
// after it); those written later get an answer or the connection's end, never a hang.
TEST(ShutdownTest, NoRequestSentBeforeStopIsLostUnderLoad) {
  HttpServer server(ServerOptions{.threads = 2});
  auto port = server.Listen("127.0.0.1:0",
                            [](HttpRequest& request, const std::string&, HttpResponse& response,
                               Deferral&) { response.body() = std::string(request.target()); });
  ASSERT_TRUE(port.ok()) << port.status();
  std::thread run([&] { server.Run(); });
  constexpr int kClients = 6;
  constexpr int kMaxPairs = 20000;  // each client's bound, with a bound in time
  std::atomic<bool> stop_called{false};
  std::atomic<int> ready{0};  // clients past their first 20 pairs
  std::atomic<int> lost{0};   // requests written before Stop() without a whole answer
  std::vector<std::string> failures(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      timeval timeout{.tv_sec = 5, .tv_usec = 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(*port));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        failures[c] = "cannot connect";
        ++ready;
        return;
      }
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      std::string pending;
      bool counted = false;
      for (int i = 0; i < kMaxPairs && std::chrono::steady_clock::now() < give_up; ++i) {
        if (i == 20 && !counted) {
          counted = true;
          ++ready;
        }
        const std::string a = "/" + std::to_string(c) + "/" + std::to_string(i) + "/a";
        const std::string b = "/" + std::to_string(c) + "/" + std::to_string(i) + "/b";
        const std::string pair =
            "GET " + a + " HTTP/1.1\r\nHost: x\r\n\r\nGET " + b + " HTTP/1.1\r\nHost: x\r\n\r\n";
        const ssize_t sent = ::send(fd, pair.data(), pair.size(), MSG_NOSIGNAL);
        const bool before_stop = !stop_called.load();  // written whole before Stop() was called
        if (sent != static_cast<ssize_t>(pair.size())) {
          if (before_stop) failures[c] = "cannot send before Stop()";
          break;
        }
        std::string body;
        bool close = false;
        const bool got_a = ReadAnswer(fd, &pending, &body, &close);
        if (got_a && body != a) failures[c] = "answer " + body + " for " + a;
        const bool got_b = got_a && !close && ReadAnswer(fd, &pending, &body, &close);
        if (got_b && body != b) failures[c] = "answer " + body + " for " + b;
        if (before_stop && !(got_a && got_b)) {
          lost += got_a ? 1 : 2;
          failures[c] = "pair " + std::to_string(i) + " written before Stop() not answered";
        }
        if (!got_b || close) break;
      }
      if (!counted) ++ready;
      ::close(fd);
    });
  }
  for (int i = 0; i < 5000 && ready.load() < kClients; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop_called = true;
  server.Stop();
  for (auto& t : clients) t.join();
  run.join();
  EXPECT_EQ(lost.load(), 0);
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(failures[c], "") << "client " << c;
}

}  // namespace
}  // namespace sluice::http
