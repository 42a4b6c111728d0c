// HttpServer's insides, shared by the accept loop and the server's lifecycle (server.cc) and the
// connection (session.h; session.cc, session_request.cc, session_answer.cc). Not part of
// HttpServer's interface: only those include it.

#ifndef SLUICE_HTTP_TRANSPORT_SERVER_IMPL_H_
#define SLUICE_HTTP_TRANSPORT_SERVER_IMPL_H_

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "http/transport/listener_tls.h"
#include "http/transport/server.h"

namespace sluice::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
// Sessions and their timers are bound to one io_context (one thread): no type-erased executor.
using Executor = asio::io_context::executor_type;
using Socket = asio::basic_stream_socket<tcp, Executor>;
// A TLS connection's stream, over the session's own socket.
using TlsStream = asio::ssl::stream<Socket&>;
using Timer = asio::basic_waitable_timer<std::chrono::steady_clock,
                                         asio::wait_traits<std::chrono::steady_clock>, Executor>;

struct HttpServer::Impl {
  class Session;

  // A listener's idle connections on one context (those waiting for the first byte of a
  // request, new ones included), in the order they became idle: the candidates to close when a
  // connection arrives at the listener's cap. Linked through the sessions themselves, so a
  // request costs no allocation and no lock: the list is used on its context's thread only,
  // except `oldest_idle_since`, which the acceptor reads to find the context whose idle
  // connection has waited the longest.
  struct alignas(64) IdleList {
    static constexpr int64_t kNone = INT64_MAX;
    Session* head = nullptr;  // idle the longest
    Session* tail = nullptr;
    std::atomic<int64_t> oldest_idle_since{kNone};  // head's, MonoTime ticks; kNone if empty
  };

  struct Listener {
    std::unique_ptr<tcp::acceptor> acceptor;
    Handler handler;
    StreamBodyIf stream_body;        // may be empty: every body is read whole
    ServerAnswered server_answered;  // may be empty
    size_t max_connections = 0;
    std::atomic<size_t> open{0};       // this listener's connections
    tcp protocol = tcp::v4();          // of the address it listens on
    std::unique_ptr<IdleList[]> idle;  // one per context, by the context's index
    std::shared_ptr<ListenerTls> tls;  // null: plain TCP
  };

  Impl(const ServerOptions& o, ServerStats* s)
      : options(o), stats(s), contexts(static_cast<size_t>(std::max(1, o.threads))) {
    for (auto& c : contexts) {
      // One thread runs each context, and a socket is only ever created, used and closed on
      // its own context's thread (see Session and Accept), so Asio's per-socket lock is not
      // needed: it cost a lock and an unlock for every read, write and readiness event.
      // Posting to a context stays locked.
      c = std::make_unique<asio::io_context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO);
      guards.emplace_back(asio::make_work_guard(*c));
    }
  }

  size_t NextContext() {
    return next_context.fetch_add(1, std::memory_order_relaxed) % contexts.size();
  }

  void Accept(Listener& listener);
  // Hands an accepted connection to contexts[context]; with `make_room`, it takes the place of
  // the oldest idle connection there (see Serve).
  void Dispatch(Listener& listener, size_t context, Socket socket, bool make_room);
  void Serve(Listener& listener, size_t context, Socket socket, bool make_room);
  // The index of the context whose idle connection of `listener` has waited the longest, or
  // contexts.size() when none is idle.
  size_t OldestIdleContext(const Listener& listener) const;
  // Adds the session to those Stop() closes: while serving, to `sessions`; once Stop() has
  // begun, to `draining` (it answers what it has already received, then closes; see Start).
  void Track(const std::shared_ptr<Session>& session);
  // Stop(): accepts, without waiting, the connections the kernel has completed but nobody has
  // accepted yet (a request may already be in them), so that they are answered rather than
  // reset with the listener; at most `max` of them. On contexts[0].
  void AcceptBacklog(Listener& listener, size_t max);

  const ServerOptions options;
  ServerStats* stats;
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  std::atomic<size_t> next_context{0};
  std::list<Listener> listeners;
  std::atomic<bool> stopping{false};

  // Every open session, for Stop(); expired entries are dropped every so often.
  absl::Mutex sessions_mu;
  std::vector<std::weak_ptr<Session>> sessions ABSL_GUARDED_BY(sessions_mu);
  size_t tracked_since_prune ABSL_GUARDED_BY(sessions_mu) = 0;
  // Still busy when Stop() came.
  std::vector<std::weak_ptr<Session>> draining ABSL_GUARDED_BY(sessions_mu);

  // After Stop(): closes what is still open at the shutdown deadline, unless Run() is over.
  std::function<void()> at_deadline;  // OnShutdownDeadline's, run by the watchdog first
  std::thread watchdog;
  absl::Mutex finished_mu;
  bool finished ABSL_GUARDED_BY(finished_mu) = false;
  void Finish() {
    {
      absl::MutexLock lock(&finished_mu);  // wakes the watchdog's Await
      finished = true;
    }
    if (watchdog.joinable() && watchdog.get_id() != std::this_thread::get_id()) watchdog.join();
  }
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_TRANSPORT_SERVER_IMPL_H_
