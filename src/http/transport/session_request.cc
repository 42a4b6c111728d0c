// Session's reading (session.h): waiting for a request, parsing its header (and a whole body),
// handing it to the handler, and a streamed request body read piece by piece (BodyReader).
#include <memory>
#include <utility>

#include "fmt/format.h"
#include "http/transport/session.h"
#include "http/transport/wire.h"

namespace sluice::http {

void HttpServer::Impl::Session::WaitForRequest() {
  if (buffer_.size() > 0) return ReadRequest();
  if (server_->stopping.load() && !BytesWaiting()) return Close();
  const MonoTime now = Now();
  if (!first_request_) SetDeadlineAt(now + server_->options.idle_timeout, now);
  EnterIdle(now);
  waiting_ = true;
  AsyncReadSome(buffer_.prepare(kReadSize),
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
  AsyncReadSome(buffer_.prepare(kReadSize),
                [self = shared_from_this()](boost::system::error_code ec, size_t n) {
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

bool HttpServer::Impl::Session::BytesWaiting() {
  char byte;
  boost::system::error_code ec;
  const size_t n = socket_.receive(asio::buffer(&byte, 1), Socket::message_peek, ec);
  if (!ec && n > 0) return true;
  return tls_ && TlsBytesPending();
}

void HttpServer::Impl::Session::Read(std::function<void(Status, std::string_view)> got) {
  if (!body_parser_ || !socket_.is_open() || lingering_) return got(Status::kError, {});
  if (body_parser_->is_done()) return got(Status::kEnd, {});
  // The client waits for this before it sends the body (RFC 9110 §10.1.1).
  if (expect_continue_) {
    expect_continue_ = false;
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    SetDeadline(server_->options.idle_timeout);
    return AsyncWrite(asio::buffer(kContinue.data(), kContinue.size()),
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
  AsyncReadSome(buffer_.prepare(kPieceBytes), [self = shared_from_this(), got = std::move(got)](
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

void HttpServer::Impl::Session::BodyFailed(std::function<void(Status, std::string_view)> got) {
  Close();
  got(Status::kError, {});
}

}  // namespace sluice::http
