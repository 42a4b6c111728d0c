// UpstreamClient: the reverse proxy's HTTP/1.1 client, on Boost.Beast / Asio. Forward() sends one
// request and calls back once, when the answer's header has arrived (or with sluice's own 502 or
// 504); bodies are streamed both ways, and connections are pooled per io_context and target.
//
// Thread safety: safe for concurrent use. The callback runs on the thread of the io_context the
// request's executor belongs to. Lifetime: each exchange keeps its io_context's run() going until
// its timeout or CancelAll(); CloseIdle() must be called once no io_context runs any more and
// before they are destroyed.
//
// Design: docs/http-server.md#upstream-client (pooling, retries, streaming).

#ifndef SLUICE_HTTP_TRANSPORT_UPSTREAM_CLIENT_H_
#define SLUICE_HTTP_TRANSPORT_UPSTREAM_CLIENT_H_

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "http/transport/server.h"

namespace sluice::http {

struct UpstreamOptions {
  size_t max_idle_per_target = 32;  // idle keep-alive connections per (io_context, host:port)
  std::chrono::milliseconds max_idle_age{30000};
  size_t max_response_header_bytes = size_t{64} << 10;
  size_t body_piece_bytes = size_t{64} << 10;  // the most an UpstreamBody::Read hands over
  // Where the timeouts (Forward's) and max_idle_age take the time from (MonoTime); not owned,
  // must outlive the client.
  const Clock* clock = SystemClock::Get();
};

struct UpstreamTarget {
  std::string host;  // a name or an IP address (IPv6 without brackets)
  uint16_t port = 80;
  std::string Describe() const;  // "http://host:port", for messages
};

enum class UpstreamOutcome {
  kOk,            // the upstream answered (any status)
  kConnectError,  // no connection (refused, unresolvable, unreachable): 502
  kTimeout,       // no answer header within the timeout: 504
  kError,         // the connection broke, or the answer's header was malformed: 502
  kCancelled,     // CancelAll() (shutting down), or Forward's canceller, came before the
                  // answer's header: 503
};

// The body of an upstream's answer (kOk), read piece by piece, at most body_piece_bytes at a
// time, on the io_context's thread. kEnd: the connection went back to the pool; kError: the
// upstream closed, broke the framing or was silent for the timeout. Dropping it before kEnd
// closes the connection.
using UpstreamBody = BodyReader;

struct UpstreamResult {
  UpstreamOutcome outcome = UpstreamOutcome::kError;
  HttpResponse response;  // kOk: the status and fields, its body empty; else sluice's answer
  std::shared_ptr<UpstreamBody> body = {};  // kOk only
};

class UpstreamClient {
 public:
  explicit UpstreamClient(UpstreamOptions options = {});
  ~UpstreamClient();
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Sends `request` (see PrepareUpstreamRequest) to `target` on `executor`'s io_context;
  // connecting, sending and receiving the answer's header must finish within `timeout`, and
  // while the body is read, no silence between two pieces may last longer. Calls `done` once.
  // With `request_body`, the request's body is read from it (on the same io_context's thread)
  // and sent as it comes, until the answer's header arrives; the timeout for
  // that header then starts once the body is all sent, and a request whose body was partly read
  // is never retried.
  // Returns what ends this exchange alone, as CancelAll ends them all (from any thread, at any
  // time: after the exchange ended it does nothing), e.g. when its client went away.
  std::function<void()> Forward(boost::asio::any_io_executor executor, UpstreamTarget target,
                                HttpRequest request, std::chrono::milliseconds timeout,
                                std::function<void(UpstreamResult)> done,
                                std::shared_ptr<BodyReader> request_body = nullptr);

  // Closes every idle connection (when: see the top of this file and docs/http-server.md).
  void CloseIdle();

  // Ends every exchange in flight, and every later one at once, for a shutdown that cannot wait
  // for the upstream: one still connecting, sending or waiting for the answer's header calls
  // back with kCancelled (sluice's 503); one whose body is being read has its connection closed
  // (its UpstreamBody reads kError, which cuts the client's answer short). From any thread; the
  // exchanges end on their io_contexts' threads, soon after.
  void CancelAll();

  // Connections opened so far and idle ones held now (for tests and metrics).
  uint64_t connections_opened() const;
  size_t idle_connections() const;

 private:
  class Exchange;
  struct Connection;
  using PoolKey = std::pair<const void*, std::string>;  // (io_context, "host:port")

  // Adds `exchange` to those CancelAll() ends; false once CancelAll() was called.
  bool Track(const std::shared_ptr<Exchange>& exchange);
  std::unique_ptr<Connection> TakeIdle(const PoolKey& key);
  void ReturnIdle(const PoolKey& key, std::unique_ptr<Connection> connection);

  const UpstreamOptions options_;
  mutable absl::Mutex mu_;
  std::map<PoolKey, std::vector<std::unique_ptr<Connection>>> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t opened_ ABSL_GUARDED_BY(mu_) = 0;
  // Every exchange started, for CancelAll(); expired entries are dropped every so often.
  std::vector<std::weak_ptr<Exchange>> live_ ABSL_GUARDED_BY(mu_);
  size_t tracked_since_prune_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// Turns a request received from `peer` into the one to send upstream: hop-by-hop fields removed
// (RFC 9110 §7.6.1), Expect dropped (sluice answers it itself), `peer` appended to
// X-Forwarded-For (the values received are kept, joined into one field), X-Forwarded-Proto and
// X-Forwarded-Host set unless present. The Host field and the target are kept as received.
void PrepareUpstreamRequest(HttpRequest& request, std::string_view peer);

// Removes the hop-by-hop fields of a message: Connection and every field it names,
// Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade. For a request's fields
// (HttpFields) and for an answer's (beast_http::fields).
template <class Allocator>
void StripHopByHop(beast_http::basic_fields<Allocator>& fields);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_TRANSPORT_UPSTREAM_CLIENT_H_
