// The reverse proxy's client (upstream_client.h): an exchange, from the pool or a new connection
// to the answer's body, and the exchanges' tracking. Near 500 lines as one idea: an exchange's
// phases (connect, send, streamed bodies both ways, the deadline) share one state machine, and
// splitting it would only scatter it. The pool is upstream_pool.cc; the request's fields,
// upstream_request.cc.

#include "http/transport/upstream_client.h"

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <optional>

#include "fmt/format.h"
#include "http/transport/upstream_connection.h"
#include "util/json_string.h"

namespace sluice::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

bool Idempotent(beast_http::verb method) {
  switch (method) {
    case beast_http::verb::get:
    case beast_http::verb::head:
    case beast_http::verb::options:
    case beast_http::verb::trace:
    case beast_http::verb::put:
    case beast_http::verb::delete_:
      return true;
    default:
      return false;
  }
}

HttpResponse ErrorResponse(beast_http::status status, const UpstreamTarget& target,
                           std::string_view what) {
  HttpResponse response(status, 11);
  response.set(beast_http::field::content_type, "application/json");
  std::string body = "{\"error\":";
  util::AppendJsonString(&body, fmt::format("upstream {}: {}", target.Describe(), what));
  body += ",\"upstream\":";
  util::AppendJsonString(&body, target.Describe());
  body += "}";
  response.body() = std::move(body);
  return response;
}

// Whether a pooled connection can still carry a request: nothing to read on it, neither the
// upstream's close nor a reset nor stray bytes. Looks without waiting and without consuming.
bool StillOpen(tcp::socket& socket) {
  beast::error_code ec;
  const bool was_non_blocking = socket.non_blocking();
  socket.non_blocking(true, ec);
  if (ec) return false;
  char byte;
  socket.receive(asio::buffer(&byte, 1), tcp::socket::message_peek, ec);
  beast::error_code ignored;
  socket.non_blocking(was_non_blocking, ignored);
  return ec == asio::error::would_block;
}

}  // namespace

// One request: connect (or reuse), send, read the answer's header, call back; then, as the
// UpstreamBody handed over, read the body piece by piece. Owns itself while an operation is
// pending; the holder of the body owns it after that.
//
// The operation under way is bounded by one deadline in the client's clock (Bound), enforced by
// one timer that waits, in real time, for what is left by the clock and reads it again when it
// fires (OnTimer): connecting, sending and the answer's header by answer_by_; with a streamed
// request body, each piece's write by its own timeout, and the header from the body's end; each
// piece of the answer's body by its own timeout. No deadline while nothing is bounded (waiting
// for the client's next piece, or for the holder of the body to read it): the timer is then
// cancelled, so that an idle exchange holds no work on the io_context.
class UpstreamClient::Exchange : public std::enable_shared_from_this<Exchange>,
                                 public UpstreamBody {
 public:
  Exchange(UpstreamClient* client, asio::any_io_executor executor, UpstreamTarget target,
           HttpRequest request, std::chrono::milliseconds timeout,
           std::function<void(UpstreamResult)> done, std::shared_ptr<BodyReader> request_body)
      : client_(client),
        executor_(std::move(executor)),
        target_(std::move(target)),
        request_(std::move(request)),
        clock_(*client->options_.clock),
        timeout_(timeout),
        answer_by_(Now() + timeout),
        done_(std::move(done)),
        request_body_(std::move(request_body)),
        resolver_(executor_),
        timer_(executor_),
        key_(&asio::query(executor_, asio::execution::context),
             fmt::format("{}:{}", target_.host, target_.port)) {
    request_.version(11);
    request_.keep_alive(true);
    // HTTP/1.1 requires Host (RFC 9112 §3.2): an HTTP/1.0 client may have sent none, so the
    // upstream's own authority stands in (as nginx's proxy_set_header Host $proxy_host).
    if (request_.find(beast_http::field::host) == request_.end()) {
      const bool ipv6 = target_.host.find(':') != std::string::npos;
      request_.set(beast_http::field::host, ipv6
                                                ? fmt::format("[{}]:{}", target_.host, target_.port)
                                                : fmt::format("{}:{}", target_.host, target_.port));
    }
    if (request_body_ == nullptr) {
      request_.prepare_payload();
    } else if (const auto length = request_body_->content_length()) {
      request_.content_length(*length);
    } else {
      request_.chunked(true);
    }
  }

  ~Exchange() override { CloseConnection(); }  // a body not read to its end: never pooled

  // UpstreamClient::CancelAll(), on the io_context's thread.
  // Ends the exchange: answered kCancelled with `why` when its answer's header has not come.
  void Cancel(std::string_view why = "not answered before sluice shut down") {
    resolver_.cancel();
    if (!Over()) {
      return Finish(UpstreamOutcome::kCancelled, beast_http::status::service_unavailable,
                    std::string(why));
    }
    CloseConnection();  // the body's read pending (or the next) ends with kError
  }

  const asio::any_io_executor& executor() const { return executor_; }

  void Start() {
    connection_ = client_->TakeIdle(key_);
    // A streamed body cannot be sent again once a piece of it was read from the client, and a
    // connection the upstream closed while it sat idle usually fails only after that (the
    // request's header fits in the socket's buffer all the same): so such a connection is left
    // out before anything is sent on it, and the next one (or a fresh one) is tried.
    while (connection_ != nullptr && request_body_ != nullptr &&
           !StillOpen(connection_->stream.socket())) {
      CloseConnection();
      connection_ = client_->TakeIdle(key_);
    }
    if (connection_ != nullptr) {
      reused_ = true;
      return Send();
    }
    Connect();
  }

 private:
  void Connect() {
    reused_ = false;
    connecting_ = true;
    resolver_.async_resolve(
        target_.host, std::to_string(target_.port),
        [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type results) {
          if (self->Over()) return;  // cancelled, or timed out (a retry's connection)
          if (ec) {
            return self->Finish(UpstreamOutcome::kConnectError, beast_http::status::bad_gateway,
                                fmt::format("cannot resolve: {}", ec.message()));
          }
          self->connection_ = std::make_unique<Connection>(self->executor_);
          {
            absl::MutexLock lock(&self->client_->mu_);
            ++self->client_->opened_;
          }
          self->Bound(self->answer_by_);
          self->connection_->stream.async_connect(results, [self](beast::error_code ec,
                                                                  const tcp::endpoint&) {
            if (self->Over()) return;  // cancelled, or timed out (OnTimer)
            self->connecting_ = false;
            if (ec) {
              return self->Finish(UpstreamOutcome::kConnectError, beast_http::status::bad_gateway,
                                  fmt::format("cannot connect: {}", ec.message()));
            }
            self->Send();
          });
        });
  }

  void Send() {
    connecting_ = false;
    Bound(answer_by_);  // the request's header (and body, if in request_) and the answer's
    if (request_body_ == nullptr) {
      return beast_http::async_write(connection_->stream, request_,
                                     [self = shared_from_this()](beast::error_code ec, size_t) {
                                       if (self->Over())
                                         return;  // answered meanwhile: no connection
                                       if (ec) return self->Failed(ec, /*sent=*/false);
                                       self->ReadHeader();
                                     });
    }
    head_.emplace(HttpRequest::header_type(request_.base()));
    head_serializer_.emplace(*head_);
    beast_http::async_write_header(connection_->stream, *head_serializer_,
                                   [self = shared_from_this()](beast::error_code ec, size_t) {
                                     // Answered meanwhile (CancelAll, or a deadline): the
                                     // connection is closed and gone, even where the write had
                                     // completed before.
                                     if (self->Over()) return;
                                     if (ec) return self->Failed(ec, /*sent=*/false);
                                     // The upstream may answer before it has the whole body
                                     // (a 413, a 401): its answer is read while the body is
                                     // sent, without a deadline (the writes have theirs, and
                                     // BodySent sets the answer's).
                                     self->Bound(MonoTime::max());
                                     self->ReadHeader();
                                     self->SendBody();
                                   });
  }

  // The client's body, piece by piece as it arrives: the next is read once this one is sent.
  // Stops as soon as the exchange is over (answered early, or failed).
  void SendBody() {
    body_started_ = true;  // what is read from the client cannot be sent again
    request_body_->Read([self = shared_from_this()](BodyReader::Status status,
                                                    std::string_view piece) {
      if (self->Over()) return;
      if (status == BodyReader::Status::kError) {
        return self->Finish(UpstreamOutcome::kError, beast_http::status::bad_request,
                            "the request's body broke off");
      }
      const bool chunked = self->request_.chunked();
      if (status == BodyReader::Status::kEnd) {
        if (!chunked) return self->BodySent();
        static constexpr std::string_view kLast = "0\r\n\r\n";
        self->Bound(self->Now() + self->timeout_);
        self->writing_ = true;
        return asio::async_write(
            self->connection_->stream, asio::buffer(kLast.data(), kLast.size()),
            [self](beast::error_code ec, size_t) { self->BodyWritten(ec, /*last=*/true); });
      }
      std::array<asio::const_buffer, 3> buffers{
          asio::const_buffer(), asio::buffer(piece.data(), piece.size()), asio::const_buffer()};
      if (chunked) {
        self->chunk_size_ = fmt::format("{:x}\r\n", piece.size());
        buffers[0] = asio::buffer(self->chunk_size_);
        buffers[2] = asio::buffer("\r\n", 2);
      }
      self->Bound(self->Now() + self->timeout_);  // the answer's read has none
      self->writing_ = true;
      asio::async_write(self->connection_->stream, buffers, [self](beast::error_code ec, size_t) {
        self->BodyWritten(ec, /*last=*/false);
      });
    });
  }

  // A piece of the body (or its last chunk) written, or not. While the answer's header is being
  // read, a failed write is not the end yet: the upstream may have answered and closed (a
  // connection closed with the body unread is reset), and the read says which.
  void BodyWritten(beast::error_code ec, bool last) {
    writing_ = false;
    if (Over()) return;      // answered early (or timed out): the rest is not sent
    Bound(MonoTime::max());  // until the next piece's write, or the answer's deadline
    if (read_failure_) return Failed(*read_failure_, /*sent=*/true);
    if (ec) {
      if (header_pending_) {
        write_failure_ = ec;
        return ArmHeaderDeadline();
      }
      return Failed(ec, /*sent=*/true);
    }
    if (last) return BodySent();
    SendBody();
  }

  void BodySent() {
    body_sent_ = true;
    ArmHeaderDeadline();
  }

  // Nothing more is sent (the body is out, or a write failed): the wait for the answer's header,
  // already being read, is bounded from now on.
  void ArmHeaderDeadline() {
    answer_by_ = Now() + timeout_;
    Bound(answer_by_);
  }

  // Reads the answer's header, under the deadline the caller set (see Send).
  void ReadHeader() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(client_->options_.max_response_header_bytes));
    parser_->body_limit(boost::none);  // streamed: any size
    if (request_.method() == beast_http::verb::head) parser_->skip(true);
    header_pending_ = true;
    beast_http::async_read_header(
        connection_->stream, connection_->buffer, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->HeaderRead(ec); });
  }

  void HeaderRead(beast::error_code ec) {
    header_pending_ = false;
    if (Over()) return;
    if (ec) {
      // A write still pending tells more (it may yet fail, or time out); a write that failed
      // already may have been the reset that followed an answer, but there is no answer.
      if (writing_) {
        read_failure_ = ec;
        return;
      }
      return Failed(write_failure_.value_or(ec), /*sent=*/true);
    }
    // 1xx (but 101) are interim: the answer follows (RFC 9110 §15.2).
    const unsigned code = parser_->get().result_int();
    if (code / 100 == 1 && code != 101) return ReadHeader();
    HeaderArrived();
  }

  // An I/O error after connecting: a stale pooled connection is retried once when safe.
  void Failed(beast::error_code ec, bool sent) {
    if (Over()) return;  // cancelled, or timed out (OnTimer): what failed was cut by that
    const bool nothing_back = !parser_ || !parser_->got_some();
    if (reused_ && nothing_back && !body_started_ && (!sent || Idempotent(request_.method()))) {
      CloseConnection();
      return Connect();
    }
    const char* doing = !sent                                     ? "sending the request"
                        : request_body_ != nullptr && !body_sent_ ? "sending the request's body"
                                                                  : "reading the answer";
    Finish(UpstreamOutcome::kError, beast_http::status::bad_gateway,
           fmt::format("{}: {}", doing, ec.message()));
  }

  void HeaderArrived() {
    if (writing_) {
      // Answered before the whole body was sent, and the upstream reads no more of it: shutting
      // the sending side ends the write at once, and the answer is read as usual.
      beast::error_code ignored;
      connection_->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
    HttpResponse head(beast_http::response_header<>(parser_->get().base()));
    StripHopByHop(head.base());
    Call(
        {.outcome = UpstreamOutcome::kOk, .response = std::move(head), .body = shared_from_this()});
  }

  // UpstreamBody.
  void Read(std::function<void(Status, std::string_view)> got) override {
    if (parser_->is_done()) {
      // A request whose body was not all sent (answered early) leaves the connection unusable.
      const bool request_complete = request_body_ == nullptr || body_sent_;
      if (parser_->keep_alive() && request_complete && connection_ != nullptr &&
          connection_->buffer.size() == 0) {
        client_->ReturnIdle(key_, std::move(connection_));
      }
      CloseConnection();
      return got(Status::kEnd, {});
    }
    if (connection_ == nullptr) return got(Status::kError, {});
    piece_.resize(client_->options_.body_piece_bytes);
    // Beast reads at most what the buffer can take without growing (at least 512 bytes): with
    // room for a whole piece, a piece costs one read instead of a hundred.
    connection_->buffer.reserve(piece_.size());
    parser_->get().body().data = piece_.data();
    parser_->get().body().size = piece_.size();
    parser_->get().body().more = true;
    Bound(Now() + timeout_);  // the longest silence while the body streams
    beast_http::async_read_some(
        connection_->stream, connection_->buffer, *parser_,
        [self = shared_from_this(), got = std::move(got)](beast::error_code ec, size_t) mutable {
          self->Bound(MonoTime::max());                       // until the holder reads on
          if (ec == beast_http::error::need_buffer) ec = {};  // the piece is full
          if (ec) {
            self->CloseConnection();
            return got(Status::kError, {});
          }
          const size_t n = self->piece_.size() - self->parser_->get().body().size;
          // Nothing for the body yet (only framing, e.g. a chunk's size line), or its end.
          if (n == 0) return self->Read(std::move(got));
          got(Status::kPiece, std::string_view(self->piece_.data(), n));
        });
  }

  std::optional<uint64_t> content_length() const override {
    const auto length = parser_->content_length();
    if (!length) return std::nullopt;
    return *length;
  }

  // Closes the connection, which cancels what is pending on it. The object itself lives on
  // until the exchange ends: a cancelled read still touches its buffer when it completes, and
  // the handlers of such operations hold the exchange.
  void CloseConnection() {
    if (connection_ == nullptr) return;
    beast::error_code ignored;
    connection_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection_->stream.close();
    closed_.push_back(std::move(connection_));
  }

  void Finish(UpstreamOutcome outcome, beast_http::status status, std::string what) {
    CloseConnection();
    Call({.outcome = outcome, .response = ErrorResponse(status, target_, what)});
  }

  // The callback was called: the exchange is answered (or failed), nothing more is sent.
  bool Over() const { return done_ == nullptr; }

  void Call(UpstreamResult result) {
    Bound(MonoTime::max());  // until the holder of the body reads it
    auto done = std::move(done_);
    done_ = nullptr;
    if (done) done(std::move(result));
  }

  // --- deadlines (see the class comment)

  MonoTime Now() const { return MonotonicNow(clock_); }

  // The operation under way must end by `deadline` (MonoTime::max(): is not bounded). Moves the
  // timer only when the deadline comes earlier than the one it is set for, or when there is
  // none any more (cancelled).
  void Bound(MonoTime deadline) {
    deadline_ = deadline;
    if (deadline_ == MonoTime::max()) {
      if (armed_at_ != MonoTime::max()) {
        armed_at_ = MonoTime::max();
        timer_.cancel();
      }
      return;
    }
    if (deadline_ < armed_at_) ArmTimer(Now());
  }

  // Wakes after deadline_ - now in real time. Holds the exchange weakly: a timer alone does not
  // keep it alive (its destructor cancels the wait).
  void ArmTimer(MonoTime now) {
    armed_at_ = deadline_;
    timer_.expires_after(deadline_ - now);  // a wait pending before ends with operation_aborted
    timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->OnTimer();
    });
  }

  void OnTimer() {
    armed_at_ = MonoTime::max();
    if (deadline_ == MonoTime::max()) return;
    const MonoTime now = Now();
    if (now < deadline_) return ArmTimer(now);  // the deadline moved later meanwhile
    deadline_ = MonoTime::max();
    if (Over()) return CloseConnection();  // a body's piece: its read ends with kError
    // Closing the connection (Finish) ends what is pending on it; those handlers see Over().
    Finish(UpstreamOutcome::kTimeout, beast_http::status::gateway_timeout,
           connecting_ ? "no connection within the timeout" : "no answer within the timeout");
  }

  UpstreamClient* client_;
  asio::any_io_executor executor_;
  const UpstreamTarget target_;
  HttpRequest request_;
  const Clock& clock_;  // the client's (UpstreamOptions::clock)
  const std::chrono::milliseconds timeout_;
  MonoTime answer_by_;  // for connecting, sending and the answer's header (see the class comment)
  MonoTime deadline_ = MonoTime::max();  // of the operation under way; max(): none
  MonoTime armed_at_ = MonoTime::max();  // the deadline timer_ is set for; max(): not set
  bool connecting_ = false;              // resolving or connecting (for the 504's message)
  std::function<void(UpstreamResult)> done_;
  const std::shared_ptr<BodyReader> request_body_;  // null: the body is in request_
  // request_'s header
  std::optional<beast_http::request<beast_http::empty_body, HttpFields>> head_;
  std::optional<beast_http::serializer<true, beast_http::empty_body, HttpFields>> head_serializer_;
  std::string chunk_size_;       // the size line of the chunk being sent
  bool body_started_ = false;    // (streamed) the body was asked for from the client
  bool body_sent_ = false;       // (streamed) the whole body was sent
  bool writing_ = false;         // (streamed) a piece of the body is being written
  bool header_pending_ = false;  // the answer's header is being read
  std::optional<beast::error_code> read_failure_;   // (streamed) while a write was pending
  std::optional<beast::error_code> write_failure_;  // (streamed) while the header was read
  tcp::resolver resolver_;
  asio::steady_timer timer_;  // in real time: see ArmTimer
  const PoolKey key_;
  std::unique_ptr<Connection> connection_;
  std::vector<std::unique_ptr<Connection>> closed_;  // closed while an operation was pending
  std::optional<beast_http::response_parser<beast_http::buffer_body>> parser_;
  std::vector<char> piece_;  // the body piece being read
  bool reused_ = false;
};

UpstreamClient::UpstreamClient(UpstreamOptions options) : options_(options) {}

UpstreamClient::~UpstreamClient() = default;

std::function<void()> UpstreamClient::Forward(asio::any_io_executor executor, UpstreamTarget target,
                                              HttpRequest request,
                                              std::chrono::milliseconds timeout,
                                              std::function<void(UpstreamResult)> done,
                                              std::shared_ptr<BodyReader> request_body) {
  auto exchange = std::make_shared<Exchange>(this, executor, std::move(target), std::move(request),
                                             timeout, std::move(done), std::move(request_body));
  std::function<void()> cancel = [weak = std::weak_ptr<Exchange>(exchange), executor] {
    asio::post(executor, [weak] {
      if (auto e = weak.lock()) e->Cancel("not answered: cancelled (its client left)");
    });
  };
  // Run on the io_context's thread: pooled connections are touched only there.
  if (!Track(exchange)) {
    asio::dispatch(executor, [exchange] { exchange->Cancel(); });
    return cancel;
  }
  asio::dispatch(executor, [exchange] { exchange->Start(); });
  return cancel;
}

bool UpstreamClient::Track(const std::shared_ptr<Exchange>& exchange) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  if (++tracked_since_prune_ >= live_.size() / 2 + 64) {  // amortised O(1), bounded size
    tracked_since_prune_ = 0;
    std::erase_if(live_, [](const std::weak_ptr<Exchange>& w) { return w.expired(); });
  }
  live_.push_back(exchange);
  return true;
}

void UpstreamClient::CancelAll() {
  std::vector<std::weak_ptr<Exchange>> live;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    live.swap(live_);
  }
  for (const std::weak_ptr<Exchange>& w : live) {
    std::shared_ptr<Exchange> exchange = w.lock();
    if (exchange == nullptr) continue;
    const asio::any_io_executor executor = exchange->executor();
    asio::post(executor, [exchange = std::move(exchange)] { exchange->Cancel(); });
  }
}

}  // namespace sluice::http
