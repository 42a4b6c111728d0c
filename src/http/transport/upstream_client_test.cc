// UpstreamClient against scripted loopback servers: keep-alive reuse, the retry of a request on a
// pooled connection the upstream closed while it was idle (idempotent methods only; one found
// closed before a streamed body is read is left out), 502 when nothing listens, 504 on a silent
// upstream, the request/response header rewriting, and the streamed body: bounded pieces,
// chunked and close-delimited answers, an answer cut short or abandoned (its connection never
// pooled), the idle timeout between pieces. CancelAll() (the shutdown deadline) ends exchanges at
// once: 503 before the header, the body cut after. The client's time is a ManualClock: its
// timeouts and the pool's max_idle_age must follow it, not real time.

#include "http/transport/upstream_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <cctype>
#include <chrono>
#include <functional>
#include <optional>
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
using std::chrono::milliseconds;
using ::testing::HasSubstr;

// Accepts connections on a loopback port; each connection reads requests (with their body) and
// answers them with `answer`, then closes if `close_after_answer` (without saying so: a
// keep-alive answer), or never answers if `silent`. With `early`, it answers as soon as the
// header is in and reads nothing more (the body stays unread; the connection stays open unless
// `close_after_answer`). Runs on its own thread until destroyed.
class ScriptedUpstream {
 public:
  ScriptedUpstream(std::string answer, bool close_after_answer, bool silent = false,
                   bool early = false)
      : answer_(std::move(answer)),
        close_after_answer_(close_after_answer),
        silent_(silent),
        early_(early),
        acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~ScriptedUpstream() {
    io_.stop();
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int connections() const { return connections_.load(); }
  int requests() const { return requests_.load(); }
  // Waits (up to 2 s) until it has closed `n` connections after answering
  // (close_after_answer); whether it has.
  bool ClosedWithin(int n) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (closed_.load() < n && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return closed_.load() >= n;
  }
  // Waits (up to 2 s) until `n` requests have come in; whether they have.
  bool RequestsWithin(int n) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (requests_.load() < n && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return requests_.load() >= n;
  }
  std::string received() const {  // every byte received, on every connection
    absl::MutexLock lock(&mu_);
    return received_;
  }
  // What was received once it ends with `suffix`, or after 2 s (the answer may reach the client
  // before this thread has read all it sent).
  std::string ReceivedEndingWith(std::string_view suffix) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    std::string got = received();
    while (!got.ends_with(suffix) && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      got = received();
    }
    return got;
  }

 private:
  struct Conn {
    explicit Conn(tcp::socket s) : socket(std::move(s)) {}
    tcp::socket socket;
    std::string in;
    char buf[4096];
  };

  void Accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) return;
      ++connections_;
      Read(std::make_shared<Conn>(std::move(socket)));
      Accept();
    });
  }

  void Read(std::shared_ptr<Conn> c) {
    c->socket.async_read_some(asio::buffer(c->buf),
                              [this, c](boost::system::error_code ec, size_t n) {
                                if (ec) return;
                                c->in.append(c->buf, n);
                                {
                                  absl::MutexLock lock(&mu_);
                                  received_.append(c->buf, n);
                                }
                                const size_t end = c->in.find("\r\n\r\n");
                                if (end == std::string::npos) return Read(c);
                                size_t request_end = end + 4;
                                if (!early_) {  // the whole body first
                                  const size_t body_end = BodyEnd(c->in, end + 4);
                                  if (body_end == std::string::npos) return Read(c);
                                  request_end = body_end;
                                }
                                c->in.erase(0, request_end);
                                ++requests_;
                                if (silent_) return Read(c);
                                asio::async_write(c->socket, asio::buffer(answer_),
                                                  [this, c](boost::system::error_code, size_t) {
                                                    if (close_after_answer_) {
                                                      boost::system::error_code ignored;
                                                      c->socket.close(ignored);
                                                      ++closed_;
                                                      return;
                                                    }
                                                    // Answered early: the rest of the body
                                                    // stays unread, the connection open.
                                                    if (early_) return held_.push_back(c);
                                                    Read(c);
                                                  });
                              });
  }

  // Where the body of the request whose header ends at `body_start` ends (Content-Length, or
  // the last chunk: the tests' bodies never hold "\r\n\r\n"), npos while incomplete.
  static size_t BodyEnd(const std::string& in, size_t body_start) {
    std::string header = in.substr(0, body_start);
    for (char& ch : header) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (header.find("transfer-encoding: chunked") != std::string::npos) {
      const size_t last = in.find("0\r\n\r\n", body_start);
      return last == std::string::npos ? last : last + 5;
    }
    const size_t at = header.find("content-length: ");
    if (at == std::string::npos) return body_start;
    const size_t length = std::stoul(header.substr(at + 16));
    return in.size() >= body_start + length ? body_start + length : std::string::npos;
  }

  const std::string answer_;
  const bool close_after_answer_;
  const bool silent_;
  const bool early_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  // Answered early, left unread (io thread only). Its sockets go before io_ does.
  std::vector<std::shared_ptr<Conn>> held_;
  std::atomic<int> connections_{0};
  std::atomic<int> requests_{0};
  std::atomic<int> closed_{0};
  mutable absl::Mutex mu_;
  std::string received_ ABSL_GUARDED_BY(mu_);
};

constexpr char kOk[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-End: 1\r\n\r\nok";

class UpstreamClientTest : public ::testing::Test {
 protected:
  // Forwards `method /up` with its body read from `request_body`; the answer's body is left
  // unread.
  UpstreamResult Upload(uint16_t port, beast_http::verb method,
                        std::shared_ptr<BodyReader> request_body,
                        milliseconds timeout = std::chrono::seconds(5)) {
    UpstreamResult result;
    finished_ = false;
    client_.Forward(
        io_.get_executor(), {.host = "127.0.0.1", .port = port}, HttpRequest(method, "/up", 11),
        timeout,
        [&](UpstreamResult r) {
          result = std::move(r);
          finished_ = true;
        },
        std::move(request_body));
    io_.run();
    io_.restart();
    return result;
  }

  // Forwards a request and reads the answer's body whole into response.body() (for kOk);
  // `body_status` is how the body ended, `pieces` the size of each piece read.
  UpstreamResult Send(uint16_t port, beast_http::verb method,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5),
                      std::shared_ptr<BodyReader> request_body = nullptr) {
    HttpRequest request(method, "/x", 11);
    request.set(beast_http::field::host, "test");
    UpstreamResult out;
    pieces_.clear();
    body_status_ = UpstreamBody::Status::kPiece;
    finished_ = false;
    client_.Forward(
        io_.get_executor(), {.host = "127.0.0.1", .port = port}, std::move(request), timeout,
        [&](UpstreamResult r) {
          out = std::move(r);
          if (out.body == nullptr) finished_ = true;
          if (out.body != nullptr) Drain(out.body, &out.response.body());
        },
        std::move(request_body));
    io_.run();
    io_.restart();
    out.body.reset();
    return out;
  }

  void Drain(std::shared_ptr<UpstreamBody> body, std::string* into) {
    UpstreamBody& source = *body;
    source.Read([this, body, into](UpstreamBody::Status status, std::string_view piece) {
      body_status_ = status;
      if (status != UpstreamBody::Status::kPiece) {
        finished_ = true;
        return;
      }
      pieces_.push_back(piece.size());
      into->append(piece);
      Drain(body, into);
    });
  }

  // From another thread, while Send or Upload runs: after `wait` of real time, notes whether
  // the exchange had ended by then (finished_before_advance_), then advances clock_ by `advance`.
  std::thread AdvanceAfter(milliseconds wait, milliseconds advance) {
    return std::thread([this, wait, advance] {
      std::this_thread::sleep_for(wait);
      finished_before_advance_ = finished_.load();
      clock_.Advance(std::chrono::microseconds(advance).count());
    });
  }

  std::vector<size_t> pieces_;
  UpstreamBody::Status body_status_ = UpstreamBody::Status::kPiece;
  // Send's or Upload's exchange has ended: answered without a body, or its body read to its end
  // or to an error.
  std::atomic<bool> finished_{false};
  std::atomic<bool> finished_before_advance_{false};

  ManualClock clock_;
  asio::io_context io_;
  UpstreamClient client_{{.max_idle_age = milliseconds(100), .clock = &clock_}};
};

TEST_F(UpstreamClientTest, KeepAliveConnectionIsReused) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/false);
  for (int i = 0; i < 3; ++i) {
    const UpstreamResult r = Send(upstream.port(), beast_http::verb::get);
    ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);
    EXPECT_EQ(r.response.body(), "ok");
  }
  EXPECT_EQ(upstream.connections(), 1);
  EXPECT_EQ(client_.connections_opened(), 1u);
  EXPECT_EQ(client_.idle_connections(), 1u);
  client_.CloseIdle();
  EXPECT_EQ(client_.idle_connections(), 0u);
}

TEST_F(UpstreamClientTest, StalePooledConnectionIsRetriedForIdempotentRequests) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/true);
  ASSERT_EQ(Send(upstream.port(), beast_http::verb::get).outcome, UpstreamOutcome::kOk);
  ASSERT_EQ(client_.idle_connections(), 1u);  // it looked reusable
  ASSERT_TRUE(upstream.ClosedWithin(1));      // the upstream closed it
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get);
  EXPECT_EQ(r.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(r.response.body(), "ok");
  EXPECT_EQ(upstream.connections(), 2);
  EXPECT_EQ(upstream.requests(), 2);  // the stale connection never delivered the request
}

TEST_F(UpstreamClientTest, StalePooledConnectionIsNotRetriedForPost) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/true);
  ASSERT_EQ(Send(upstream.port(), beast_http::verb::get).outcome, UpstreamOutcome::kOk);
  ASSERT_TRUE(upstream.ClosedWithin(1));
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::post);
  EXPECT_EQ(r.outcome, UpstreamOutcome::kError);
  EXPECT_EQ(r.response.result(), beast_http::status::bad_gateway);
  EXPECT_EQ(upstream.connections(), 1);
}

TEST_F(UpstreamClientTest, NothingListeningIs502NamingTheUpstream) {
  uint16_t port;
  {
    tcp::acceptor probe(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = probe.local_endpoint().port();
  }
  const UpstreamResult r = Send(port, beast_http::verb::get);
  EXPECT_EQ(r.outcome, UpstreamOutcome::kConnectError);
  EXPECT_EQ(r.response.result(), beast_http::status::bad_gateway);
  EXPECT_THAT(r.response.body(), HasSubstr("http://127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(r.response.body(), HasSubstr("cannot connect"));
}

// The timeout is the client's clock's: real time passing (six timeouts of it) does not end the
// wait, the clock passing the timeout does.
TEST_F(UpstreamClientTest, SilentUpstreamIs504AtTheTimeout) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/false, /*silent=*/true);
  std::thread advance = AdvanceAfter(milliseconds(300), milliseconds(60));
  const auto start = std::chrono::steady_clock::now();
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get, milliseconds(50));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  advance.join();
  EXPECT_FALSE(finished_before_advance_) << "timed out before the clock reached the timeout";
  EXPECT_EQ(r.outcome, UpstreamOutcome::kTimeout);
  EXPECT_EQ(r.response.result(), beast_http::status::gateway_timeout);
  EXPECT_THAT(r.response.body(), HasSubstr("no answer within the timeout"));
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  EXPECT_EQ(client_.idle_connections(), 0u);  // a timed-out connection is not reused
}

// A pooled connection is reused up to max_idle_age (100 ms here) by the client's clock, however
// long it waited in real time, and not after.
TEST_F(UpstreamClientTest, PooledConnectionIsDroppedAtMaxIdleAge) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/false);
  ASSERT_EQ(Send(upstream.port(), beast_http::verb::get).outcome, UpstreamOutcome::kOk);
  std::this_thread::sleep_for(milliseconds(300));  // real time: three times max_idle_age
  ASSERT_EQ(Send(upstream.port(), beast_http::verb::get).outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(client_.connections_opened(), 1u);
  clock_.Advance(101'000);
  ASSERT_EQ(Send(upstream.port(), beast_http::verb::get).outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(client_.connections_opened(), 2u);
  EXPECT_EQ(upstream.connections(), 2);
}

TEST_F(UpstreamClientTest, ResponseLosesHopByHopFields) {
  ScriptedUpstream upstream(
      "HTTP/1.1 200 OK\r\nConnection: X-Private\r\nX-Private: p\r\nKeep-Alive: timeout=5\r\n"
      "Transfer-Encoding: chunked\r\nX-End: 1\r\n\r\n2\r\nok\r\n0\r\n\r\n",
      false);
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get);
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(r.response.body(), "ok");
  EXPECT_EQ(r.response.count("X-Private"), 0u);
  EXPECT_EQ(r.response.count("Keep-Alive"), 0u);
  EXPECT_EQ(r.response.count(beast_http::field::transfer_encoding), 0u);
  EXPECT_EQ(r.response.count(beast_http::field::connection), 0u);
  EXPECT_EQ(r.response["X-End"], "1");
}

// A body of `size` bytes that shows any piece lost, repeated or misplaced.
std::string Pattern(size_t size) {
  std::string body(size, '\0');
  for (size_t i = 0; i < size; ++i) body[i] = static_cast<char>('a' + (i * 7 + i / 1000) % 26);
  return body;
}

TEST_F(UpstreamClientTest, LargeBodyArrivesWholeInBoundedPiecesAndTheConnectionIsPooled) {
  const std::string body = Pattern(300000);
  ScriptedUpstream upstream(
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
      false);
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get);
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(body_status_, UpstreamBody::Status::kEnd);
  EXPECT_TRUE(r.response.body() == body);
  EXPECT_GE(pieces_.size(), 5u);
  for (size_t n : pieces_) EXPECT_LE(n, size_t{64} << 10);
  EXPECT_EQ(client_.idle_connections(), 1u);
}

TEST_F(UpstreamClientTest, ContentLengthIsReportedBeforeTheBody) {
  ScriptedUpstream upstream(kOk, false);
  HttpRequest request(beast_http::verb::get, "/x", 11);
  std::optional<uint64_t> length;
  client_.Forward(io_.get_executor(), {.host = "127.0.0.1", .port = upstream.port()},
                  std::move(request), std::chrono::seconds(5), [&](UpstreamResult r) {
                    ASSERT_NE(r.body, nullptr);
                    length = r.body->content_length();
                  });
  io_.run();
  EXPECT_EQ(length, std::optional<uint64_t>(2));
  EXPECT_EQ(client_.idle_connections(), 0u);  // dropped unread: closed, not pooled
}

TEST_F(UpstreamClientTest, ChunkedBodyIsDecodedWithoutALength) {
  ScriptedUpstream upstream(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1\r\n \r\n"
      "5\r\nworld\r\n0\r\n\r\n",
      false);
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get);
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(body_status_, UpstreamBody::Status::kEnd);
  EXPECT_EQ(r.response.body(), "hello world");
  EXPECT_EQ(client_.idle_connections(), 1u);
}

TEST_F(UpstreamClientTest, CloseDelimitedBodyEndsAtTheCloseAndIsNotPooled) {
  ScriptedUpstream upstream("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end", true);
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get);
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(body_status_, UpstreamBody::Status::kEnd);
  EXPECT_EQ(r.response.body(), "until the end");
  EXPECT_EQ(client_.idle_connections(), 0u);
}

TEST_F(UpstreamClientTest, BodyCutShortIsAnErrorAndTheConnectionIsNotPooled) {
  ScriptedUpstream upstream("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true);
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get);
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);  // the header came whole
  EXPECT_EQ(body_status_, UpstreamBody::Status::kError);
  EXPECT_EQ(r.response.body(), "abc");
  EXPECT_EQ(client_.idle_connections(), 0u);
}

TEST_F(UpstreamClientTest, SilenceMidBodyIsAnErrorAtTheTimeout) {
  ScriptedUpstream upstream("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false);
  std::thread advance = AdvanceAfter(milliseconds(300), milliseconds(60));
  const auto start = std::chrono::steady_clock::now();
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get, milliseconds(50));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  advance.join();
  EXPECT_FALSE(finished_before_advance_) << "timed out before the clock reached the timeout";
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(r.response.body(), "abc");
  EXPECT_EQ(body_status_, UpstreamBody::Status::kError);
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  EXPECT_EQ(client_.idle_connections(), 0u);
}

TEST_F(UpstreamClientTest, BodyAbandonedMidwayClosesTheConnection) {
  const std::string body = Pattern(1 << 20);
  ScriptedUpstream upstream(
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
      false);
  HttpRequest request(beast_http::verb::get, "/x", 11);
  size_t got = 0;
  client_.Forward(
      io_.get_executor(), {.host = "127.0.0.1", .port = upstream.port()}, std::move(request),
      std::chrono::seconds(5), [&](UpstreamResult r) {
        ASSERT_NE(r.body, nullptr);
        UpstreamBody& source = *r.body;
        source.Read([&got, body = r.body](UpstreamBody::Status, std::string_view piece) {
          got = piece.size();  // and the body is dropped after this
        });
      });
  io_.run();
  io_.restart();
  EXPECT_GT(got, 0u);
  EXPECT_EQ(client_.idle_connections(), 0u);
  // The next request needs a new connection: the abandoned one was closed, not reused.
  EXPECT_EQ(Send(upstream.port(), beast_http::verb::get).response.body(), body);
  EXPECT_EQ(upstream.connections(), 2);
}

TEST_F(UpstreamClientTest, HeadAnswerHasNoBodyButKeepsItsLength) {
  ScriptedUpstream upstream("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", false);
  HttpRequest request(beast_http::verb::head, "/x", 11);
  std::optional<uint64_t> length;
  std::string received;
  client_.Forward(io_.get_executor(), {.host = "127.0.0.1", .port = upstream.port()},
                  std::move(request), std::chrono::seconds(5), [&](UpstreamResult r) {
                    ASSERT_NE(r.body, nullptr);
                    length = r.body->content_length();
                    Drain(r.body, &received);
                  });
  io_.run();
  io_.restart();
  EXPECT_EQ(length, std::optional<uint64_t>(1234));
  EXPECT_EQ(received, "");
  EXPECT_EQ(body_status_, UpstreamBody::Status::kEnd);
  EXPECT_EQ(client_.idle_connections(), 1u);
}

// A request body handed over piece by piece, as HttpServer's streamed bodies are.
class FakeBody : public BodyReader {
 public:
  FakeBody(std::vector<std::string> pieces, std::optional<uint64_t> length, bool breaks = false)
      : pieces_(std::move(pieces)), length_(length), breaks_(breaks) {}
  void Read(std::function<void(Status, std::string_view)> got) override {
    ++reads_;
    if (next_ < pieces_.size()) return got(Status::kPiece, pieces_[next_++]);
    got(breaks_ ? Status::kError : Status::kEnd, {});
  }
  std::optional<uint64_t> content_length() const override { return length_; }
  int reads() const { return reads_; }

 private:
  const std::vector<std::string> pieces_;
  const std::optional<uint64_t> length_;
  const bool breaks_;
  size_t next_ = 0;
  int reads_ = 0;
};

TEST_F(UpstreamClientTest, StreamedRequestBodyWithoutALengthIsSentChunked) {
  ScriptedUpstream upstream(kOk, false);
  auto body = std::make_shared<FakeBody>(std::vector<std::string>{"abc", "de"}, std::nullopt);
  const UpstreamResult result = Upload(upstream.port(), beast_http::verb::post, body);
  EXPECT_EQ(result.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(body->reads(), 3);  // two pieces and the end
  const std::string sent = upstream.ReceivedEndingWith("0\r\n\r\n");
  EXPECT_THAT(sent, HasSubstr("Transfer-Encoding: chunked\r\n"));
  EXPECT_THAT(sent, ::testing::EndsWith("\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
}

// A request without Host (an HTTP/1.0 client's) is sent as HTTP/1.1, which requires one: the
// upstream's authority stands in. A Host the client sent is kept (see PrepareUpstreamRequest).
TEST_F(UpstreamClientTest, RequestWithoutHostGetsTheUpstreamsAuthority) {
  ScriptedUpstream upstream(kOk, false);
  auto body = std::make_shared<FakeBody>(std::vector<std::string>{"abc"}, 3);
  const UpstreamResult result = Upload(upstream.port(), beast_http::verb::post, body);
  EXPECT_EQ(result.outcome, UpstreamOutcome::kOk);
  const std::string sent = upstream.ReceivedEndingWith("abc");
  EXPECT_THAT(sent, HasSubstr(fmt::format("\r\nHost: 127.0.0.1:{}\r\n", upstream.port())));
  EXPECT_EQ(Send(upstream.port(), beast_http::verb::get).outcome, UpstreamOutcome::kOk);
  EXPECT_THAT(upstream.ReceivedEndingWith("\r\n\r\n"), HasSubstr("\r\nHost: test\r\n"));
}

TEST_F(UpstreamClientTest, StreamedRequestBodyWithALengthIsSentAsIs) {
  ScriptedUpstream upstream(kOk, false);
  auto body = std::make_shared<FakeBody>(std::vector<std::string>{"abc", "de"}, 5);
  const UpstreamResult result = Upload(upstream.port(), beast_http::verb::put, body);
  EXPECT_EQ(result.outcome, UpstreamOutcome::kOk);
  const std::string sent = upstream.ReceivedEndingWith("abcde");
  EXPECT_THAT(sent, HasSubstr("Content-Length: 5\r\n"));
  EXPECT_EQ(sent.find("Transfer-Encoding"), std::string::npos) << sent;
  EXPECT_THAT(sent, ::testing::EndsWith("\r\n\r\nabcde"));
}

// With a streamed request body, the answer's timeout counts from the body's end, on the same
// clock.
TEST_F(UpstreamClientTest, SilentUpstreamAfterAStreamedBodyIs504AtTheTimeout) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/false, /*silent=*/true);
  auto body = std::make_shared<FakeBody>(std::vector<std::string>{"abc", "de"}, 5);
  std::thread advance = AdvanceAfter(milliseconds(300), milliseconds(60));
  const UpstreamResult r = Upload(upstream.port(), beast_http::verb::post, body, milliseconds(50));
  advance.join();
  EXPECT_FALSE(finished_before_advance_) << "timed out before the clock reached the timeout";
  EXPECT_EQ(r.outcome, UpstreamOutcome::kTimeout);
  EXPECT_EQ(r.response.result(), beast_http::status::gateway_timeout);
  EXPECT_THAT(upstream.ReceivedEndingWith("abcde"), HasSubstr("\r\n\r\nabcde"));
}

TEST_F(UpstreamClientTest, RequestBodyBreakingOffIsAnErrorAndTheConnectionIsNotPooled) {
  ScriptedUpstream upstream(kOk, false);
  auto body = std::make_shared<FakeBody>(std::vector<std::string>{"abc"}, 5, /*breaks=*/true);
  const UpstreamResult result = Upload(upstream.port(), beast_http::verb::post, body);
  EXPECT_EQ(result.outcome, UpstreamOutcome::kError);
  EXPECT_EQ(result.body, nullptr);
  EXPECT_EQ(client_.idle_connections(), 0u);
}

TEST_F(UpstreamClientTest, StalePooledConnectionIsNotUsedForAStreamedBody) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/true);
  ASSERT_EQ(Send(upstream.port(), beast_http::verb::get).outcome, UpstreamOutcome::kOk);
  ASSERT_EQ(client_.idle_connections(), 1u);  // it looked reusable
  ASSERT_TRUE(upstream.ClosedWithin(1));      // the upstream closed it ...
  // ... and its end reached the client's socket (which StillOpen looks at; nothing shows when).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto body = std::make_shared<FakeBody>(std::vector<std::string>{"abc", "de"}, 5);
  const UpstreamResult result = Upload(upstream.port(), beast_http::verb::put, body);
  EXPECT_EQ(result.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(result.response.result(), beast_http::status::ok);
  EXPECT_EQ(body->reads(), 3);  // read once: two pieces and the end
  EXPECT_EQ(upstream.connections(), 2);
  EXPECT_THAT(upstream.ReceivedEndingWith("abcde"), ::testing::EndsWith("\r\n\r\nabcde"));
}

// A large body: `pieces` times the same 64 KiB, read at once each time.
class RepeatedBody : public BodyReader {
 public:
  explicit RepeatedBody(int pieces) : pieces_(pieces), piece_(size_t{64} << 10, 'x') {}
  void Read(std::function<void(Status, std::string_view)> got) override {
    if (read_ == pieces_) return got(Status::kEnd, {});
    ++read_;
    got(Status::kPiece, piece_);
  }
  std::optional<uint64_t> content_length() const override {
    return static_cast<uint64_t>(pieces_) * piece_.size();
  }
  int read() const { return read_; }

 private:
  const int pieces_;
  const std::string piece_;
  int read_ = 0;
};

constexpr char kTooLarge[] =
    "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\nX-End: 1\r\n\r\ntoo large";

// 16 MiB, far more than the socket buffers hold while the upstream reads none of it.
constexpr int kLargeUploadPieces = 256;

TEST_F(UpstreamClientTest, AnswerBeforeTheBodyIsSentIsPassedOnAndTheRestIsNotSent) {
  ScriptedUpstream upstream(kTooLarge, /*close_after_answer=*/false, /*silent=*/false,
                            /*early=*/true);  // answers, then holds the connection, unread
  auto body = std::make_shared<RepeatedBody>(kLargeUploadPieces);
  const auto start = std::chrono::steady_clock::now();
  const UpstreamResult r =
      Send(upstream.port(), beast_http::verb::put, std::chrono::seconds(3), body);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk) << r.response.body();
  EXPECT_EQ(r.response.result(), beast_http::status::payload_too_large);
  EXPECT_EQ(r.response["X-End"], "1");
  EXPECT_EQ(r.response.body(), "too large");
  EXPECT_EQ(body_status_, UpstreamBody::Status::kEnd);
  EXPECT_LT(body->read(), kLargeUploadPieces);  // sending stopped
  EXPECT_LT(elapsed, std::chrono::seconds(2));  // not after a write timed out
  EXPECT_EQ(client_.idle_connections(), 0u);    // its request cut short: not pooled
}

TEST_F(UpstreamClientTest, AnswerBeforeTheBodyIsSentThenCloseIsPassedOn) {
  // Closed with the body unread: the kernel resets the connection after the answer.
  ScriptedUpstream upstream(kTooLarge, /*close_after_answer=*/true, /*silent=*/false,
                            /*early=*/true);
  auto body = std::make_shared<RepeatedBody>(kLargeUploadPieces);
  const UpstreamResult r =
      Send(upstream.port(), beast_http::verb::post, std::chrono::seconds(3), body);
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk) << r.response.body();
  EXPECT_EQ(r.response.result(), beast_http::status::payload_too_large);
  EXPECT_EQ(r.response.body(), "too large");
  EXPECT_EQ(body_status_, UpstreamBody::Status::kEnd);
  EXPECT_LT(body->read(), kLargeUploadPieces);
  EXPECT_EQ(client_.idle_connections(), 0u);
}

TEST_F(UpstreamClientTest, StreamedBodyAnsweredAfterItsEndKeepsTheConnection) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/false);  // reads the whole body first
  auto body = std::make_shared<RepeatedBody>(8);
  const UpstreamResult r =
      Send(upstream.port(), beast_http::verb::put, std::chrono::seconds(5), body);
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);
  EXPECT_EQ(r.response.body(), "ok");
  EXPECT_EQ(body->read(), 8);
  EXPECT_EQ(client_.idle_connections(), 1u);
}

TEST(PrepareUpstreamRequestTest, StripsHopByHopAndAppendsForwardedFor) {
  HttpRequest request(beast_http::verb::post, "/a?b=c", 11);
  request.set(beast_http::field::host, "example.test");
  request.set(beast_http::field::connection, "keep-alive, X-Secret");
  request.set("X-Secret", "s");
  request.set("Keep-Alive", "timeout=5");
  request.set(beast_http::field::te, "trailers");
  request.set(beast_http::field::upgrade, "websocket");
  request.set("Proxy-Connection", "keep-alive");
  request.set(beast_http::field::expect, "100-continue");
  request.insert("X-Forwarded-For", "203.0.113.1");
  request.insert("X-Forwarded-For", "198.51.100.2");
  request.set("X-Kept", "k");
  PrepareUpstreamRequest(request, "127.0.0.1");
  for (const char* gone :
       {"Connection", "X-Secret", "Keep-Alive", "TE", "Upgrade", "Proxy-Connection", "Expect"}) {
    EXPECT_EQ(request.count(gone), 0u) << gone;
  }
  EXPECT_EQ(request.count("X-Forwarded-For"), 1u);
  EXPECT_EQ(request["X-Forwarded-For"], "203.0.113.1, 198.51.100.2, 127.0.0.1");
  EXPECT_EQ(request["X-Forwarded-Proto"], "http");
  EXPECT_EQ(request["X-Forwarded-Host"], "example.test");
  EXPECT_EQ(request[beast_http::field::host], "example.test");
  EXPECT_EQ(request["X-Kept"], "k");
  EXPECT_EQ(request.target(), "/a?b=c");
}

// CancelAll() (the shutdown deadline) ends an exchange whatever the upstream does: one waiting
// for a header that would come much later (30 s) is answered 503 at once, and later ones too.
TEST_F(UpstreamClientTest, CancelAllAnswersAWaitingExchange503AtOnce) {
  ScriptedUpstream upstream(kOk, /*close_after_answer=*/false, /*silent=*/true);
  std::thread cancel([this, &upstream] {
    upstream.RequestsWithin(1);  // the exchange waits for the answer's header
    client_.CancelAll();
  });
  const auto start = std::chrono::steady_clock::now();
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get, std::chrono::seconds(30));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  cancel.join();
  EXPECT_EQ(r.outcome, UpstreamOutcome::kCancelled);
  EXPECT_EQ(r.response.result(), beast_http::status::service_unavailable);
  EXPECT_THAT(r.response.body(), HasSubstr("shut down"));
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  EXPECT_EQ(client_.idle_connections(), 0u);
  // Once cancelled, every later exchange is answered so at once, without a connection.
  const int connections = upstream.connections();
  EXPECT_EQ(Send(upstream.port(), beast_http::verb::get).outcome, UpstreamOutcome::kCancelled);
  EXPECT_EQ(upstream.connections(), connections);
}

// An answer whose body is still coming is cut by CancelAll(): its reader sees kError at once,
// not after the upstream's silence of 30 s.
TEST_F(UpstreamClientTest, CancelAllCutsABodyStillStreaming) {
  ScriptedUpstream upstream("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false);
  std::thread cancel([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    client_.CancelAll();
  });
  const auto start = std::chrono::steady_clock::now();
  const UpstreamResult r = Send(upstream.port(), beast_http::verb::get, std::chrono::seconds(30));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  cancel.join();
  ASSERT_EQ(r.outcome, UpstreamOutcome::kOk);  // the header came before
  EXPECT_EQ(r.response.body(), "abc");
  EXPECT_EQ(body_status_, UpstreamBody::Status::kError);
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  EXPECT_EQ(client_.idle_connections(), 0u);
}

}  // namespace
}  // namespace sluice::http
