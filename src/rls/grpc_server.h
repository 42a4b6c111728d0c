// The gRPC port of `sluice serve`: Envoy's Rate Limit Service (ShouldRateLimit, through
// rls::ShouldRateLimit in codec.h, as /json does) and gRPC health checking.
//
// Plaintext, or TLS and mutual TLS (Options::tls) with the certificates re-read from their files.
//
// Thread safety: safe for concurrent use. Handlers never block: a decision is made inline
// (memory store) or finished later from the Redis client's thread. Options::threads picks
// gRPC's callback API (0) or N completion-queue threads of this server.
//
// Design: docs/http-api.md#grpc-server (errors, health names, threads); the protocol:
// docs/rls.md.

#ifndef SLUICE_RLS_GRPC_SERVER_H_
#define SLUICE_RLS_GRPC_SERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"
#include "trace/tracer.h"

namespace sluice::rls {

class GrpcServer {
 public:
  struct Options {
    // HOST:PORT as gRPC parses it ("127.0.0.1:8081", "[::1]:8081"); port 0 picks a free port.
    std::string address;
    // Larger requests are refused with RESOURCE_EXHAUSTED (gRPC's own check).
    int max_message_bytes = 1 << 20;
    // Health answers SERVING only while this says the backend can serve (or its failure policy
    // lets requests be answered); unset: always.
    std::function<bool()> backend_serving = {};
    // Told of every decision and how long it took (for metrics); unset: nothing.
    std::function<void(std::string_view domain, const engine::Response&, int64_t elapsed_us)>
        on_decision = {};
    // 0: ShouldRateLimit on the callback API (gRPC's threads). N > 0: on the async API, N
    // completion queues with one thread each (settings `grpc: {threads: N}`).
    int threads = 0;
    // TLS: the certificate chain, its key and (mutual TLS; empty: none asked for) the clients'
    // CAs, PEM files that gRPC reads at start and again every second, so that new connections
    // get what they hold then. With a client CA, a client must show a certificate it signed.
    // Unset: plaintext.
    struct Tls {
      std::string cert_file, key_file, client_ca_file;
    };
    std::optional<Tls> tls = {};
    // Traces ShouldRateLimit calls (a span per call, a child of the `traceparent` metadata Envoy
    // sends, and the decision's below it); null: none. Not owned; must outlive the server.
    trace::Tracer* tracer = nullptr;
  };

  // Binds and starts serving. Nothing is owned; `config`, `engine` (the process's one engine,
  // shared with the other frontends) and `clock` must outlive the server. Unavailable when the
  // address cannot be bound (SO_REUSEPORT is off, so a port in use is an error rather than a
  // silently shared port).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const Options& options,
                                                           rules::ConfigManager* config,
                                                           engine::Engine* engine,
                                                           const Clock* clock);

  // Shuts down with no grace if Shutdown was not called.
  ~GrpcServer();

  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // The bound port (the chosen one when the address asked for port 0).
  int port() const { return port_; }

  // Health turns NOT_SERVING; calls are still answered. Safe from any thread, at any time
  // before destruction (e.g. from the thread that receives SIGTERM).
  void StartDraining();

  // Stops accepting calls, lets the calls in flight finish for up to `grace`, then cancels the
  // rest and returns, once the decisions still with the backend are answered (at most the
  // backend's timeout later). Idempotent; call from one thread.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Impl;
  GrpcServer(std::unique_ptr<Impl> impl, int port);

  std::unique_ptr<Impl> impl_;
  int port_;
};

}  // namespace sluice::rls

#endif  // SLUICE_RLS_GRPC_SERVER_H_
