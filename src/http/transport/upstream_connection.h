// UpstreamClient's pooled connection, shared by the exchanges (upstream_client.cc) and the pool
// (upstream_pool.cc). Not part of UpstreamClient's interface: only those include it.
//
// A connection is used by one exchange at a time, on its io_context's thread, or held idle in the
// pool (under the client's mutex); whoever holds its unique_ptr owns it.

#ifndef SLUICE_HTTP_TRANSPORT_UPSTREAM_CONNECTION_H_
#define SLUICE_HTTP_TRANSPORT_UPSTREAM_CONNECTION_H_

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>

#include "http/transport/upstream_client.h"

namespace sluice::http {

namespace asio = boost::asio;
namespace beast = boost::beast;

struct UpstreamClient::Connection {
  explicit Connection(const asio::any_io_executor& executor) : stream(executor) {}
  beast::tcp_stream stream;  // without Beast's timeouts: the exchange bounds its operations
  beast::flat_buffer buffer;
  MonoTime idle_since;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_TRANSPORT_UPSTREAM_CONNECTION_H_
