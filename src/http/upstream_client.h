// UpstreamClient: the reverse proxy's HTTP/1.1 client, on Boost.Beast / Asio.
//
// Forward() sends one request to an upstream (host:port) and calls back once with the answer:
// the upstream's response (hop-by-hop header fields removed), or sluice's own 502 (cannot
// connect, broken or oversized answer) or 504 (no whole answer within the timeout), each with a
// JSON body naming the upstream. Connections are kept alive and pooled per io_context and
// target: a bounded number of idle connections each, dropped when older than max_idle_age. A
// pooled connection the upstream closed while it sat idle is detected by the exchange failing
// before any byte of the answer came back; the request is then sent once more on a fresh
// connection if that is safe: always when writing failed, otherwise only for idempotent methods
// (RFC 9110 §9.2.2), since the upstream may have acted on it.
//
// Bodies are buffered, not streamed: the request's (already read whole by HttpServer, bounded
// by max_body_bytes) and the upstream's answer, up to max_response_bytes (larger: 502).
//
// Safe for concurrent use. The callback runs on the thread of the io_context the request's
// executor belongs to. Every exchange in flight keeps that io_context's run() going; CloseIdle()
// must be called once no io_context runs any more and before they are destroyed.

#ifndef SLUICE_HTTP_UPSTREAM_CLIENT_H_
#define SLUICE_HTTP_UPSTREAM_CLIENT_H_

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "http/server.h"

namespace sluice::http {

struct UpstreamOptions {
  size_t max_idle_per_target = 32;  // idle keep-alive connections per (io_context, host:port)
  std::chrono::milliseconds max_idle_age{30000};
  size_t max_response_bytes = size_t{64} << 20;
  size_t max_response_header_bytes = size_t{64} << 10;
};

struct UpstreamTarget {
  std::string host;  // a name or an IP address (IPv6 without brackets)
  uint16_t port = 80;
  std::string Describe() const;  // "http://host:port", for messages
};

enum class UpstreamOutcome {
  kOk,            // the upstream answered (any status)
  kConnectError,  // no connection (refused, unresolvable, unreachable): 502
  kTimeout,       // no whole answer within the timeout: 504
  kError,         // the connection broke, or the answer was malformed or too large: 502
};

struct UpstreamResult {
  UpstreamOutcome outcome = UpstreamOutcome::kError;
  HttpResponse response;
};

class UpstreamClient {
 public:
  explicit UpstreamClient(UpstreamOptions options = {});
  ~UpstreamClient();
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Sends `request` (see PrepareUpstreamRequest) to `target` on `executor`'s io_context; the
  // whole exchange (connect, send, answer) must finish within `timeout`. Calls `done` once.
  void Forward(boost::asio::any_io_executor executor, UpstreamTarget target, HttpRequest request,
               std::chrono::milliseconds timeout, std::function<void(UpstreamResult)> done);

  // Closes every idle connection (see the banner for when).
  void CloseIdle();

  // Connections opened so far and idle ones held now (for tests and metrics).
  uint64_t connections_opened() const;
  size_t idle_connections() const;

 private:
  class Exchange;
  struct Connection;
  using PoolKey = std::pair<const void*, std::string>;  // (io_context, "host:port")

  std::unique_ptr<Connection> TakeIdle(const PoolKey& key);
  void ReturnIdle(const PoolKey& key, std::unique_ptr<Connection> connection);

  const UpstreamOptions options_;
  mutable std::mutex mu_;
  std::map<PoolKey, std::vector<std::unique_ptr<Connection>>> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
};

// Turns a request received from `peer` into the one to send upstream: hop-by-hop fields removed
// (RFC 9110 §7.6.1), Expect dropped (the body is already here), `peer` appended to
// X-Forwarded-For (the values received are kept, joined into one field), X-Forwarded-Proto and
// X-Forwarded-Host set unless present. The Host field and the target are kept as received.
void PrepareUpstreamRequest(HttpRequest& request, std::string_view peer);

// Removes the hop-by-hop fields of a message: Connection and every field it names,
// Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade.
void StripHopByHop(beast_http::fields& fields);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_UPSTREAM_CLIENT_H_
