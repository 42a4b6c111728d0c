#include "http/transport/session.h"

#include <algorithm>
#include <array>
#include <utility>

#include "fmt/format.h"
#include "http/transport/wire.h"

namespace sluice::http {

HttpServer::Impl::Session::Session(Socket socket, Impl* server, Listener* listener, IdleList* idle)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      server_(server),
      listener_(listener),
      idle_(idle),
      handler_(&listener->handler) {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);  // answers are single writes; never wait
  // Non-blocking for the synchronous calls too: WriteAnswer's first send and WatchClose's peek
  // return would_block rather than wait (Asio's own operations are non-blocking either way).
  socket_.non_blocking(true, ec);
  const tcp::endpoint peer = socket_.remote_endpoint(ec);
  if (!ec) {
    const asio::ip::address a = peer.address();
    peer_ = a.is_v6() && a.to_v6().is_v4_mapped()
                ? asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_string()
                : a.to_string();
  }
}

HttpServer::Impl::Session::~Session() {
  LeaveIdle();
  server_->stats->connections_open.fetch_sub(1, std::memory_order_relaxed);
  listener_->open.fetch_sub(1, std::memory_order_relaxed);
}

void HttpServer::Impl::Session::Start() {
  // The first request must arrive whole within the header timeout from now; a client that
  // sends nothing is not let wait longer than an idle one either.
  const MonoTime now = Now();
  first_request_deadline_ = now + server_->options.header_timeout;
  deadline_ = std::min(first_request_deadline_, now + server_->options.idle_timeout);
  ArmTimer(now);
  WaitForRequest();
}

bool HttpServer::Impl::Session::CloseOldestIdle(IdleList& idle) {
  Session* const oldest = idle.head;
  if (oldest == nullptr) return false;
  oldest->Close();  // unlinks it; its pending read completes with operation_aborted
  return true;
}

void HttpServer::Impl::Session::CloseIfIdle() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->waiting_) {
      self->socket_.cancel();  // the read ends (or has ended with a request's first bytes)
    } else if (self->lingering_ && self->deadline_ > self->Now() + kStopLingerTime) {
      self->SetDeadline(kStopLingerTime);
    }
  });
}

void HttpServer::Impl::Session::ForceClose() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
}

void HttpServer::Impl::Session::SetDeadline(std::chrono::milliseconds timeout) {
  const MonoTime now = Now();
  SetDeadlineAt(now + timeout, now);
}

void HttpServer::Impl::Session::SetDeadlineAt(MonoTime deadline, std::optional<MonoTime> now) {
  deadline_ = deadline;
  if (deadline_ < armed_at_) ArmTimer(now ? *now : Now());
}

void HttpServer::Impl::Session::EnterIdle(MonoTime now) {
  idle_since_ = now;
  idle_prev_ = idle_->tail;
  idle_next_ = nullptr;
  if (idle_->tail != nullptr) {
    idle_->tail->idle_next_ = this;
  } else {
    idle_->head = this;
    PublishOldestIdle();
  }
  idle_->tail = this;
  idle_linked_ = true;
}

void HttpServer::Impl::Session::LeaveIdle() {
  if (!idle_linked_) return;
  idle_linked_ = false;
  (idle_next_ != nullptr ? idle_next_->idle_prev_ : idle_->tail) = idle_prev_;
  if (idle_prev_ != nullptr) {
    idle_prev_->idle_next_ = idle_next_;
  } else {
    idle_->head = idle_next_;
    PublishOldestIdle();
  }
  idle_prev_ = idle_next_ = nullptr;
}

void HttpServer::Impl::Session::PublishOldestIdle() {
  idle_->oldest_idle_since.store(idle_->head != nullptr
                                     ? idle_->head->idle_since_.time_since_epoch().count()
                                     : IdleList::kNone,
                                 std::memory_order_relaxed);
}

void HttpServer::Impl::Session::ArmTimer(MonoTime now) {
  armed_at_ = deadline_;
  // A wait pending before completes with operation_aborted.
  if (deadline_ == MonoTime::max()) {
    timer_.expires_at(Timer::time_point::max());
  } else {
    timer_.expires_after(deadline_ - now);  // at once if it has passed
  }
  timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->OnTimer();
  });
}

void HttpServer::Impl::Session::OnTimer() {
  if (!socket_.is_open()) return;
  const MonoTime now = Now();
  if (now < deadline_) return ArmTimer(now);
  Close();  // pending reads and writes complete with operation_aborted
}

void HttpServer::Impl::Session::WaitForRequest() {
  if (buffer_.size() > 0) return ReadRequest();
  if (server_->stopping.load() && !BytesWaiting()) return Close();
  const MonoTime now = Now();
  if (!first_request_) SetDeadlineAt(now + server_->options.idle_timeout, now);
  EnterIdle(now);
  waiting_ = true;
  socket_.async_read_some(buffer_.prepare(kReadSize),
                          [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                            self->LeaveIdle();
                            self->waiting_ = false;
                            // Cancelled by Stop() (CloseIfIdle): look again.
                            if (ec == asio::error::operation_aborted && self->socket_.is_open()) {
                              return self->WaitForRequest();
                            }
                            if (ec) return self->Close();
                            self->buffer_.commit(n);
                            self->ReadRequest();
                          });
}

void HttpServer::Impl::Session::ReadRequest() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(server_->options.max_header_bytes));
  parser_->body_limit(server_->options.max_body_bytes);
  // To be asked whether to stream a body, the parser must stop after the header.
  parser_->eager(!listener_->stream_body);
  if (first_request_) {
    SetDeadlineAt(first_request_deadline_);
  } else {
    SetDeadline(server_->options.header_timeout);
  }
  Parse();
}

void HttpServer::Impl::Session::Parse() {
  if (buffer_.size() > 0) {
    beast::error_code ec;
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec && ec != beast_http::error::need_more) return OnRead(ec);
    if (parser_->is_done()) return OnRead({});
    if (!parser_->eager() && parser_->is_header_done()) {
      if (listener_->stream_body(parser_->get())) return OnHeader();
      parser_->eager(true);
    }
    if (!ec && used > 0 && buffer_.size() > 0) return Parse();
  }
  socket_.async_read_some(buffer_.prepare(kReadSize), [self = shared_from_this()](
                                                          boost::system::error_code ec, size_t n) {
    if (ec == asio::error::eof && self->parser_->got_some()) {
      self->parser_->put_eof(ec);  // a request cut short: partial_message (400)
      return self->OnRead(ec ? ec : beast_http::error::partial_message);
    }
    if (ec) return self->Close();  // closed before a byte, reset, timed out, stopped
    self->buffer_.commit(n);
    self->Parse();
  });
}

void HttpServer::Impl::Session::OnRead(beast::error_code ec) {
  if (ec == beast_http::error::header_limit) {
    return Fail(beast_http::status::request_header_fields_too_large,
                "request header block too large");
  }
  if (ec == beast_http::error::body_limit) {
    return Fail(beast_http::status::payload_too_large, "request body too large");
  }
  if (ec)
    return Fail(beast_http::status::bad_request, fmt::format("bad request: {}", ec.message()));
  HttpRequest request = parser_->release();
  Handle(request, nullptr);
}

void HttpServer::Impl::Session::OnHeader() {
  body_parser_.emplace(std::move(*parser_));
  body_parser_->eager(true);
  parser_.reset();
  HttpRequest request(HttpRequest::header_type(body_parser_->get().base()));
  const auto expect = request[beast_http::field::expect];
  expect_continue_ = beast::iequals(expect, "100-continue");
  Handle(request, shared_from_this());
}

void HttpServer::Impl::Session::Handle(HttpRequest& request, std::shared_ptr<BodyReader> body) {
  if (request.version() >= 11 && !HasOneHost(request)) {
    return Fail(beast_http::status::bad_request,
                "an HTTP/1.1 request needs exactly one Host field (RFC 9112 3.2)");
  }
  version_ = request.version();
  keep_alive_ = request.keep_alive();
  head_ = request.method() == beast_http::verb::head;
  response_.result(beast_http::status::ok);
  Deferral deferral(
      socket_.get_executor(),
      [this] {
        return Responder(
            shared_from_this(),
            asio::prefer(socket_.get_executor(), asio::execution::outstanding_work.tracked));
      },
      std::move(body));
  (*handler_)(request, peer_, response_, deferral);
  if (deferral.taken()) {
    deadline_ = MonoTime::max();  // the handler's own deadlines bound the wait
    return;
  }
  WriteAnswer();
}

void HttpServer::Impl::Session::Deliver(HttpResponse response) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), response = std::move(response)]() mutable {
               self->client_gone_ = nullptr;  // answered: nobody waits for the close any more
               self->response_ = std::move(response);
               self->WriteAnswer();
             });
}

void HttpServer::Impl::Session::Fail(beast_http::status status, std::string message) {
  if (listener_->server_answered) listener_->server_answered(static_cast<unsigned>(status));
  version_ = 11;
  keep_alive_ = false;
  head_ = false;
  response_.result(status);
  response_.set(beast_http::field::content_type, "application/json");
  response_.body() = fmt::format("{{\"error\":\"{}\"}}", message);
  WriteAnswer();
}

bool HttpServer::Impl::Session::BytesWaiting() {
  char byte;
  boost::system::error_code ec;
  const size_t n = socket_.receive(asio::buffer(&byte, 1), Socket::message_peek, ec);
  return !ec && n > 0;
}

bool HttpServer::Impl::Session::CloseAfterThisAnswer() {
  return !keep_alive_ || BodyUnread() || (server_->stopping.load() && !NextRequestArrived());
}

void HttpServer::Impl::Session::WriteAnswer() {
  close_after_write_ = CloseAfterThisAnswer();
  const bool without_content = WithoutContent(response_.result_int());
  SerializeHeader(response_, version_, !close_after_write_, Framing::kLength,
                  response_.body().size(), &header_);
  const size_t body_size = without_content || head_ ? 0 : response_.body().size();
  std::array<asio::const_buffer, 2> buffers{asio::buffer(header_),
                                            asio::buffer(response_.body().data(), body_size)};
  // Sent at once, as nginx does, when no pipelined request waits in the buffer: the usual short
  // answer then needs no asynchronous operation started, queued and completed. (With a request
  // waiting, Answered would go on to it from here, and a long pipeline would nest that deep.)
  // Whatever the socket does not take now is written asynchronously, under the idle timeout. (An
  // answer sent at once needs no deadline of its own: Answered sets the next one, or closes,
  // before anything waits; so the clock is not read for it.)
  if (buffer_.size() == 0) {
    boost::system::error_code ec;
    const size_t sent = socket_.send(buffers, 0, ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return Close();
    if (!ec && sent == asio::buffer_size(buffers)) return Answered();
    if (!ec) {
      const size_t from_header = std::min(sent, buffers[0].size());
      buffers[0] += from_header;
      buffers[1] += sent - from_header;
    }
  }
  SetDeadline(server_->options.idle_timeout);
  asio::async_write(socket_, buffers,
                    [self = shared_from_this()](boost::system::error_code ec, size_t) {
                      if (ec) return self->Close();
                      self->Answered();
                    });
}

void HttpServer::Impl::Session::Answered() {
  first_request_ = false;
  // Stopping, a request the client sent before it read this Connection: close would reset the
  // connection if it came before the close, which may destroy this answer: so it lingers.
  if (close_after_write_) return BodyUnread() || server_->stopping.load() ? Linger() : Close();
  response_.Clear();
  if (body_parser_) {  // the room a streamed body took is not kept for the next request
    body_parser_.reset();
    body_piece_ = std::string();
    buffer_.shrink_to_fit();
  }
  WaitForRequest();
}

void HttpServer::Impl::Session::DeliverStream(HttpResponse head,
                                              std::optional<uint64_t> content_length,
                                              Responder::StreamStarted started) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), head = std::move(head),
                                      content_length, started = std::move(started)]() mutable {
    self->client_gone_ = nullptr;
    self->response_ = std::move(head);
    self->WriteStreamHead(content_length, std::move(started));
  });
}

void HttpServer::Impl::Session::WatchClose(std::function<void()> gone) {
  if (!socket_.is_open()) return asio::post(socket_.get_executor(), std::move(gone));
  client_gone_ = std::move(gone);
  socket_.async_wait(Socket::wait_read, [weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (self == nullptr || !self->client_gone_) return;  // answered meanwhile
    auto gone = std::move(self->client_gone_);
    self->client_gone_ = nullptr;
    if (ec) return gone();  // closed here (a deadline, the shutdown)
    boost::system::error_code peek;
    char byte;
    self->socket_.receive(asio::buffer(&byte, 1), Socket::message_peek, peek);
    if (peek == asio::error::would_block) return self->WatchClose(std::move(gone));
    if (peek) gone();  // eof (the client closed) or a reset; else bytes: watch no more
  });
}

void HttpServer::Impl::Session::WriteStreamHead(std::optional<uint64_t> content_length,
                                                Responder::StreamStarted started) {
  close_after_write_ = CloseAfterThisAnswer();
  const bool without_content = WithoutContent(response_.result_int());
  stream_ = Stream{};  // not emplace(): clang-14 sees Stream as not default-constructible here
  stream_->discard = without_content || head_;
  stream_->chunked = !without_content && !content_length && version_ != 10;
  stream_->content_length = stream_->discard ? std::optional<uint64_t>(0) : content_length;
  // Without a length or chunked framing, only the connection's end can end the body.
  if (!without_content && !content_length && version_ == 10) close_after_write_ = true;
  const Framing framing = content_length     ? Framing::kLength
                          : stream_->chunked ? Framing::kChunked
                                             : Framing::kClose;
  SerializeHeader(response_, version_, !close_after_write_, framing, content_length.value_or(0),
                  &header_);
  response_.body().clear();
  SetDeadline(server_->options.idle_timeout);
  asio::async_write(socket_, asio::buffer(header_),
                    [self = shared_from_this(), started = std::move(started)](
                        boost::system::error_code ec, size_t) {
                      self->deadline_ = MonoTime::max();  // the source's pace
                      if (ec) {
                        self->Close();
                        return started(nullptr);
                      }
                      started(self);
                    });
}

void HttpServer::Impl::Session::Read(std::function<void(Status, std::string_view)> got) {
  if (!body_parser_ || !socket_.is_open() || lingering_) return got(Status::kError, {});
  if (body_parser_->is_done()) return got(Status::kEnd, {});
  // The client waits for this before it sends the body (RFC 9110 §10.1.1).
  if (expect_continue_) {
    expect_continue_ = false;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    SetDeadline(server_->options.idle_timeout);
    return asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                             [self = shared_from_this(), got = std::move(got)](
                                 boost::system::error_code ec, size_t) mutable {
                               self->deadline_ = MonoTime::max();
                               if (ec) {
                                 self->Close();
                                 return got(Status::kError, {});
                               }
                               self->Read(std::move(got));
                             });
  }
  body_piece_.resize(kPieceBytes);
  auto& body = body_parser_->get().body();
  body.data = body_piece_.data();
  body.size = body_piece_.size();
  body.more = true;
  ParseBody(std::move(got));
}

std::optional<uint64_t> HttpServer::Impl::Session::content_length() const {
  if (!body_parser_) return std::nullopt;
  const auto length = body_parser_->content_length();
  if (!length) return std::nullopt;
  return *length;
}

void HttpServer::Impl::Session::ParseBody(std::function<void(Status, std::string_view)> got) {
  if (buffer_.size() > 0) {
    beast::error_code ec;
    const size_t used = body_parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == beast_http::error::need_buffer) ec = {};  // the piece is full
    if (ec && ec != beast_http::error::need_more) return BodyFailed(std::move(got));
    const size_t n = body_piece_.size() - body_parser_->get().body().size;
    if (n > 0) return got(Status::kPiece, std::string_view(body_piece_.data(), n));
    if (body_parser_->is_done()) return got(Status::kEnd, {});
    if (!ec && used > 0 && buffer_.size() > 0) return ParseBody(std::move(got));
  }
  SetDeadline(server_->options.idle_timeout);  // the longest silence while the body streams
  body_read_pending_ = true;
  socket_.async_read_some(
      buffer_.prepare(kPieceBytes), [self = shared_from_this(), got = std::move(got)](
                                        boost::system::error_code ec, size_t n) mutable {
        self->body_read_pending_ = false;
        if (self->lingering_) {  // answered meanwhile: the body is dropped from now on
          got(Status::kError, {});
          return ec ? self->Close() : self->Drain();
        }
        self->deadline_ = MonoTime::max();
        if (ec) return self->BodyFailed(std::move(got));  // cut short, reset, timed out
        self->buffer_.commit(n);
        self->ParseBody(std::move(got));
      });
}

void HttpServer::Impl::Session::Linger() {
  lingering_ = true;
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return Close();
  SetDeadline(std::min(server_->stopping.load() ? kStopLingerTime : kLingerTime,
                       server_->options.idle_timeout));
  if (!body_read_pending_) Drain();  // else the pending read goes on with it
}

void HttpServer::Impl::Session::Drain() {
  buffer_.clear();
  socket_.async_read_some(buffer_.prepare(kReadSize),
                          [self = shared_from_this()](boost::system::error_code ec, size_t) {
                            if (ec) return self->Close();  // closed, or the time is up
                            self->Drain();
                          });
}

void HttpServer::Impl::Session::BodyFailed(std::function<void(Status, std::string_view)> got) {
  Close();
  got(Status::kError, {});
}

void HttpServer::Impl::Session::Write(asio::const_buffer piece, std::function<void(bool)> done) {
  if (!stream_ || !socket_.is_open()) {
    return asio::post(socket_.get_executor(), [done = std::move(done)] { done(false); });
  }
  if (stream_->discard || piece.size() == 0) {
    return asio::post(socket_.get_executor(), [done = std::move(done)] { done(true); });
  }
  stream_->written += piece.size();
  std::array<asio::const_buffer, 3> buffers{asio::const_buffer(), piece, asio::const_buffer()};
  if (stream_->chunked) {
    header_.clear();
    AppendHex(piece.size(), &header_);
    header_.append("\r\n");
    buffers[0] = asio::buffer(header_);
    buffers[2] = asio::buffer("\r\n", 2);
  }
  SetDeadline(server_->options.idle_timeout);
  asio::async_write(
      socket_, buffers,
      [self = shared_from_this(), done = std::move(done)](boost::system::error_code ec, size_t) {
        self->deadline_ = MonoTime::max();
        if (ec) self->Close();
        done(!ec);
      });
}

void HttpServer::Impl::Session::End() {
  if (!stream_ || !socket_.is_open()) return;
  const bool complete =
      !stream_->content_length || stream_->discard || stream_->written == *stream_->content_length;
  if (!complete) return Abort();
  if (!stream_->chunked || stream_->discard) {
    stream_.reset();
    return Answered();
  }
  SetDeadline(server_->options.idle_timeout);
  asio::async_write(socket_, asio::buffer("0\r\n\r\n", 5),
                    [self = shared_from_this()](boost::system::error_code ec, size_t) {
                      self->stream_.reset();
                      if (ec) return self->Close();
                      self->Answered();
                    });
}

void HttpServer::Impl::Session::Abort() {
  stream_.reset();
  Close();
}

void HttpServer::Impl::Session::Close() {
  LeaveIdle();
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  timer_.cancel();
}

}  // namespace sluice::http
