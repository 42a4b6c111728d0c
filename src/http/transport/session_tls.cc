// Session's TLS (session.h): the SSL stream over the socket, made at accept time on a TLS
// listener, its handshake, reads and writes. Apart from the other session files, so that the
// plaintext path's code is compiled as if TLS were not there.
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <utility>

#include "http/transport/session.h"

namespace sluice::http {

void HttpServer::Impl::Session::MakeTlsStream() {
  tls_context_ = listener_->tls->context();
  tls_ = std::make_unique<TlsStream>(socket_, *tls_context_);
}

void HttpServer::Impl::Session::WaitForHandshake() {
  if (server_->stopping.load() && !BytesWaiting()) return Close();
  // Until its first byte, a TLS connection is idle like a plaintext one that sent nothing: the
  // first to close for room.
  EnterIdle(Now());
  waiting_ = true;
  socket_.async_wait(Socket::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
    self->LeaveIdle();
    self->waiting_ = false;
    // Cancelled by Stop() (CloseIfIdle): look again.
    if (ec == asio::error::operation_aborted && self->socket_.is_open()) {
      return self->WaitForHandshake();
    }
    if (ec || !self->socket_.is_open()) return self->Close();
    self->Handshake();
  });
}

void HttpServer::Impl::Session::Handshake() {
  // The handshake counts as part of the first request: a client that never finishes it is
  // closed by the same deadline (the handshake then fails, and the connection closes).
  tls_->async_handshake(asio::ssl::stream_base::server,
                        [self = shared_from_this()](boost::system::error_code ec) {
                          if (ec || !self->socket_.is_open()) return self->Close();
                          self->WaitForRequest();
                        });
}

void HttpServer::Impl::Session::TlsReadSome(asio::mutable_buffer buffer, IoDone done) {
  tls_->async_read_some(buffer, std::move(done));
}

void HttpServer::Impl::Session::TlsWrite(std::array<asio::const_buffer, 3> buffers, IoDone done) {
  asio::async_write(*tls_, buffers, std::move(done));
}

// What the stream has taken from the socket and not given out yet: decrypted (SSL_pending) or
// still in its input BIO.
bool HttpServer::Impl::Session::TlsBytesPending() {
  SSL* ssl = tls_->native_handle();
  return SSL_pending(ssl) > 0 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0;
}

}  // namespace sluice::http
