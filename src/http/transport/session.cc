// Session's lifecycle (session.h): start, the deadline and its timer, the listener's idle list,
// and the end of a connection (lingering after a last answer, closing). Reading requests is
// session_request.cc; writing answers, session_answer.cc; TLS, session_tls.cc.
#include "http/transport/session.h"

#include <algorithm>
#include <utility>

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
  if (listener->tls) MakeTlsStream();
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
  if (!tls_) return WaitForRequest();
  WaitForHandshake();
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
  // (With TLS too, from the socket: what still comes is dropped unread, so it need not be
  // decrypted.)
  socket_.async_read_some(buffer_.prepare(kReadSize),
                          [self = shared_from_this()](boost::system::error_code ec, size_t) {
                            if (ec) return self->Close();  // closed, or the time is up
                            self->Drain();
                          });
}

// A TLS connection is closed without TLS's close_notify: an answer's end is in HTTP's framing (a
// length or the last chunk), except a streamed answer of unknown length to an HTTP/1.0 client,
// which ends with the connection and so cannot be told from one cut short.
void HttpServer::Impl::Session::Close() {
  LeaveIdle();
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  timer_.cancel();
}

}  // namespace sluice::http
