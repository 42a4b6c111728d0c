// HttpServer: the HTTP/1.1 listeners (data plane and admin) on Boost.Beast / Asio.
//
// One io_context per worker thread; accepted connections are spread over them. Each connection
// is one self-owning Session (see server.cc) with every limit in one place: a header block limit
// (431), a body limit decided from Content-Length before the body is read (413), a header read
// timeout and an idle keep-alive timeout (slowloris cannot hold a connection), malformed requests
// (400, connection closed). Keep-alive and pipelined requests are served in order. Each listener
// has its own cap on open connections (so a flood on one cannot lock out another, e.g. admin);
// connections over it are closed at once.
//
// Handlers run on the connection's thread and must not block. Stop() stops accepting, lets
// requests in flight finish and closes idle connections, then returns; Run() returns after that.

#ifndef SLUICE_HTTP_SERVER_H_
#define SLUICE_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/beast/http.hpp>

#include "absl/status/statusor.h"

namespace sluice::http {

namespace beast_http = boost::beast::http;
using HttpRequest = beast_http::request<beast_http::string_body>;
using HttpResponse = beast_http::response<beast_http::string_body>;

// Fills `response` for `request`. `peer` is the client's address ("127.0.0.1").
using Handler =
    std::function<void(const HttpRequest& request, const std::string& peer, HttpResponse& response)>;

struct ServerOptions {
  int threads = 1;
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  size_t max_connections = 10000;  // per listener, unless Listen() says otherwise
};

struct ServerStats {
  std::atomic<uint64_t> connections_open{0};
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> connections_rejected{0};
};

class HttpServer {
 public:
  explicit HttpServer(const ServerOptions& options);
  ~HttpServer();

  // Listens on "HOST:PORT" (IPv6 as "[::1]:PORT"; port 0 picks a free one). Call before Run().
  // Returns the bound port. At most `max_connections` connections of this listener are open at
  // once (0: ServerOptions::max_connections).
  absl::StatusOr<int> Listen(const std::string& address, Handler handler,
                             size_t max_connections = 0);

  // Serves until Stop(); runs the worker threads and returns when they are done.
  void Run();
  // Safe from any thread and from a signal-handling thread.
  void Stop();

  const ServerStats& stats() const { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ServerStats stats_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVER_H_
