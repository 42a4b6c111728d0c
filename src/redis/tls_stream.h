// Internal to the redis module (tls.cc, connection.cc): the OpenSSL context behind TlsContext,
// a connection's TLS stream over its TCP socket, and the errors of a TLS connection in words.
// Not for other modules, which see tls.h only.

#ifndef SLUICE_REDIS_TLS_STREAM_H_
#define SLUICE_REDIS_TLS_STREAM_H_

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <string>

#include "redis/tls.h"

namespace sluice::redis {

class TlsContext {
 public:
  explicit TlsContext(TlsOptions options);

  const TlsOptions& options() const { return options_; }
  // What each connection's stream is made with. (OpenSSL makes a connection's state from a
  // context under its own lock; the context itself no longer changes.)
  boost::asio::ssl::context& native() const { return context_; }

 private:
  const TlsOptions options_;
  mutable boost::asio::ssl::context context_;
};

using TlsStream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;

// Sets up `stream`, not yet handshaken, for the server at `host` (the endpoint's): SNI and the
// name its certificate must carry, as context.options() say.
void PrepareTlsStream(TlsStream& stream, const TlsContext& context, const std::string& host);

// Why a TLS handshake failed with `ec`: OpenSSL's verification result when the server's
// certificate was refused ("certificate verify failed: certificate has expired"), else the
// error ("tlsv1 alert protocol version").
std::string TlsHandshakeError(const boost::system::error_code& ec, TlsStream& stream);

// A read or write error in words; over TLS, a refusal the server sends after the handshake (TLS
// 1.3 servers check the client's certificate then) names the client certificate.
std::string TlsIoError(const boost::system::error_code& ec);

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_TLS_STREAM_H_
