// Session's writing (session.h): an answer written whole (at once when the socket takes it), a
// streamed answer's head and pieces (BodyWriter), and the watch for a client that goes away
// while its answer is awaited.
#include <algorithm>
#include <array>
#include <utility>

#include "fmt/format.h"
#include "http/transport/session.h"
#include "http/transport/wire.h"

namespace sluice::http {

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
  if (tls_) {
    // One TLS record (and one write) for a short answer rather than one for each buffer.
    if (buffers[1].size() <= kReadSize) {
      header_.append(static_cast<const char*>(buffers[1].data()), buffers[1].size());
      buffers = {asio::buffer(header_), asio::const_buffer()};
    }
  } else if (buffer_.size() == 0) {
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
  AsyncWrite(buffers, [self = shared_from_this()](boost::system::error_code ec, size_t) {
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
  AsyncWrite(asio::buffer(header_), [self = shared_from_this(), started = std::move(started)](
                                        boost::system::error_code ec, size_t) {
    self->deadline_ = MonoTime::max();  // the source's pace
    if (ec) {
      self->Close();
      return started(nullptr);
    }
    started(self);
  });
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
  AsyncWrite(buffers, [self = shared_from_this(), done = std::move(done)](
                          boost::system::error_code ec, size_t) {
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
  AsyncWrite(asio::buffer("0\r\n\r\n", 5),
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

}  // namespace sluice::http
