#include "http/transport/server.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "http/transport/server_impl.h"
#include "http/transport/session.h"
#include "spdlog/spdlog.h"
#include "util/log.h"

namespace sluice::http {
namespace {

// Splits "host:port" / "[v6]:port".
absl::StatusOr<tcp::endpoint> ParseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(fmt::format("bad address '{}' (HOST:PORT)", address));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = -1;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (...) {
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(fmt::format("bad port in '{}'", address));
  }
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        fmt::format("bad address '{}': give an IP address, e.g. 127.0.0.1:8080", address));
  }
  return tcp::endpoint(ip, static_cast<unsigned short>(port));
}

}  // namespace

// A connection's descriptor on its way to the context that serves it: closed if it never gets
// there (that context stopped first).
class PendingDescriptor {
 public:
  explicit PendingDescriptor(int fd) : fd_(fd) {}
  PendingDescriptor(PendingDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  PendingDescriptor& operator=(PendingDescriptor&&) = delete;
  ~PendingDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int Take() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Connections are accepted on the acceptor's context (contexts[0], this thread) and served on
// each context in turn. Under the contexts' concurrency hint a socket may be created, used and
// closed only on its own context's thread (registering it with another context's reactor from
// here raced with that context's thread: ThreadSanitizer saw it). So a connection for another
// context leaves this one as a bare descriptor and is wrapped in a socket over there.
void HttpServer::Impl::Accept(Listener& listener) {
  listener.acceptor->async_accept(*contexts[0], [this, &listener](beast::error_code ec,
                                                                  Socket socket) {
    if (ec) {
      if (!stopping.load() && ec != asio::error::operation_aborted) {
        util::Log().warn("accept: {}", ec.message());
        Accept(listener);
      }
      return;
    }
    stats->connections_total.fetch_add(1, std::memory_order_relaxed);
    const bool at_cap = listener.open.load(std::memory_order_relaxed) >= listener.max_connections;
    // At the cap, the new connection goes where the oldest idle one is, and replaces it
    // there (or is refused there, if that one got busy meanwhile).
    const size_t context = at_cap ? OldestIdleContext(listener) : NextContext();
    if (context == contexts.size()) {
      stats->connections_rejected.fetch_add(1, std::memory_order_relaxed);
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      stats->connections_open.fetch_add(1, std::memory_order_relaxed);
      listener.open.fetch_add(1, std::memory_order_relaxed);
      Dispatch(listener, context, std::move(socket), at_cap);
    }
    if (!stopping.load()) Accept(listener);
  });
}

size_t HttpServer::Impl::OldestIdleContext(const Listener& listener) const {
  size_t oldest = contexts.size();
  int64_t oldest_since = IdleList::kNone;
  for (size_t i = 0; i < contexts.size(); ++i) {
    const int64_t since = listener.idle[i].oldest_idle_since.load(std::memory_order_relaxed);
    if (since < oldest_since) {
      oldest = i;
      oldest_since = since;
    }
  }
  return oldest;
}

void HttpServer::Impl::Dispatch(Listener& listener, size_t context, Socket socket, bool make_room) {
  if (context == 0) return Serve(listener, 0, std::move(socket), make_room);
  beast::error_code released;
  PendingDescriptor fd(socket.release(released));
  asio::post(*contexts[context],
             [this, &listener, context, make_room, fd = std::move(fd)]() mutable {
               Socket adopted(contexts[context]->get_executor());
               beast::error_code assigned;
               adopted.assign(listener.protocol, fd.Take(), assigned);
               // (a socket that failed is closed at once)
               Serve(listener, context, std::move(adopted), make_room);
             });
}

// On the socket's own thread.
void HttpServer::Impl::Serve(Listener& listener, size_t context, Socket socket, bool make_room) {
  if (make_room && !Session::CloseOldestIdle(listener.idle[context])) {
    // The idle connections here got busy since the acceptor looked: refused after all.
    beast::error_code ignored;
    socket.close(ignored);
    listener.open.fetch_sub(1, std::memory_order_relaxed);
    stats->connections_open.fetch_sub(1, std::memory_order_relaxed);
    stats->connections_rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto session =
      std::make_shared<Session>(std::move(socket), this, &listener, &listener.idle[context]);
  Track(session);
  session->Start();
}

void HttpServer::Impl::Track(const std::shared_ptr<Session>& session) {
  absl::MutexLock lock(&sessions_mu);
  if (stopping.load()) {
    // Accepted just as Stop() began (or by AcceptBacklog): the shutdown deadline covers it.
    draining.push_back(session);
    return;
  }
  if (++tracked_since_prune >= sessions.size() / 2 + 64) {  // amortised O(1), bounded size
    tracked_since_prune = 0;
    std::erase_if(sessions, [](const std::weak_ptr<Session>& w) { return w.expired(); });
  }
  sessions.push_back(session);
}

void HttpServer::Impl::AcceptBacklog(Listener& listener, size_t max) {
  beast::error_code ec;
  listener.acceptor->non_blocking(true, ec);
  for (size_t i = 0; i < max && !ec; ++i) {
    Socket socket(contexts[0]->get_executor());
    listener.acceptor->accept(socket, ec);
    if (ec) break;  // would_block: the backlog is empty
    stats->connections_total.fetch_add(1, std::memory_order_relaxed);
    stats->connections_open.fetch_add(1, std::memory_order_relaxed);
    listener.open.fetch_add(1, std::memory_order_relaxed);
    Serve(listener, 0, std::move(socket), /*make_room=*/false);
  }
}

Responder::Responder(std::shared_ptr<Target> target, boost::asio::any_io_executor work)
    : target_(std::move(target)), work_(std::move(work)) {}

Responder& Responder::operator=(Responder&& other) noexcept {
  if (this != &other) {
    if (target_) Send(HttpResponse(beast_http::status::internal_server_error, 11));
    target_ = std::move(other.target_);
    work_ = std::move(other.work_);
  }
  return *this;
}

Responder::~Responder() {
  if (target_) {
    HttpResponse response(beast_http::status::internal_server_error, 11);
    response.set(beast_http::field::content_type, "application/json");
    response.body() = R"({"error":"the request was dropped without an answer"})";
    Send(std::move(response));
  }
}

void Responder::Stream(HttpResponse head, std::optional<uint64_t> content_length,
                       StreamStarted started) {
  if (!target_) return;
  std::shared_ptr<Target> target = std::move(target_);
  target_ = nullptr;
  target->DeliverStream(std::move(head), content_length, std::move(started));
  work_ = {};
}

void Responder::OnClientGone(std::function<void()> gone) {
  if (target_) target_->WatchClose(std::move(gone));
}

void Responder::Send(HttpResponse response) {
  if (!target_) return;
  std::shared_ptr<Target> target = std::move(target_);
  target_ = nullptr;
  target->Deliver(std::move(response));
  work_ = {};
}

HttpServer::HttpServer(const ServerOptions& options)
    : impl_(std::make_unique<Impl>(options, &stats_)) {}

HttpServer::~HttpServer() { impl_->Finish(); }

absl::StatusOr<int> HttpServer::Listen(const std::string& address, Handler handler,
                                       size_t max_connections, StreamBodyIf stream_body,
                                       ServerAnswered server_answered,
                                       std::shared_ptr<ListenerTls> tls) {
  auto endpoint = ParseAddress(address);
  if (!endpoint.ok()) return endpoint.status();
  auto acceptor = std::make_unique<tcp::acceptor>(*impl_->contexts[0]);
  boost::system::error_code ec;
  acceptor->open(endpoint->protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(*endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(fmt::format("cannot listen on {}: {}", address, ec.message()));
  }
  const int port = acceptor->local_endpoint().port();
  Impl::Listener& listener = impl_->listeners.emplace_back();
  listener.acceptor = std::move(acceptor);
  listener.handler = std::move(handler);
  listener.stream_body = std::move(stream_body);
  listener.server_answered = std::move(server_answered);
  listener.idle = std::make_unique<Impl::IdleList[]>(impl_->contexts.size());
  listener.max_connections = max_connections > 0 ? max_connections : impl_->options.max_connections;
  listener.protocol = endpoint->protocol();
  listener.tls = std::move(tls);
  impl_->Accept(impl_->listeners.back());
  return port;
}

void HttpServer::OnShutdownDeadline(std::function<void()> at_deadline) {
  impl_->at_deadline = std::move(at_deadline);
}

void HttpServer::Run() {
  std::vector<std::thread> threads;
  for (size_t i = 1; i < impl_->contexts.size(); ++i) {
    threads.emplace_back([this, i] { impl_->contexts[i]->run(); });
  }
  impl_->contexts[0]->run();
  for (auto& t : threads) t.join();
  impl_->Finish();
}

void HttpServer::Stop() {
  if (impl_->stopping.exchange(true)) return;
  // Those still busy at the deadline (a long streamed answer, a slow upstream) are closed. The
  // watchdog starts before the post below: only that post lets Run() return, so Finish() (after
  // Run) sees it and joins it. Started after, it could still be being assigned when Finish()
  // looked, and the server be destroyed with it running (std::terminate).
  impl_->watchdog = std::thread([impl = impl_.get()] {
    // Waits at most `timeout` by the server's clock for Finish(); whether it came. (The wait is
    // in real time, for what is left by the clock, which is read again when it ends.)
    const auto finished_within = [impl](std::chrono::milliseconds timeout) {
      const Clock& clock = *impl->options.clock;
      const MonoTime deadline = MonotonicNow(clock) + timeout;
      absl::MutexLock lock(&impl->finished_mu);
      for (MonoTime::duration left = timeout; left > left.zero();
           left = deadline - MonotonicNow(clock)) {
        if (impl->finished_mu.AwaitWithTimeout(absl::Condition(&impl->finished),
                                               absl::FromChrono(left))) {
          return true;
        }
      }
      return impl->finished;
    };
    if (finished_within(impl->options.shutdown_timeout)) return;
    if (impl->at_deadline) {
      // What the handlers wait on ends now; their answers (a 503) need a moment to go out.
      impl->at_deadline();
      if (finished_within(kShutdownGrace)) return;
    }
    std::vector<std::shared_ptr<Impl::Session>> left;
    {
      absl::MutexLock sessions_lock(&impl->sessions_mu);
      for (auto* list : {&impl->draining, &impl->sessions}) {
        for (auto& w : *list) {
          if (auto s = w.lock()) left.push_back(std::move(s));
        }
      }
    }
    if (!left.empty()) {
      util::Log().warn("shutdown: {} connection(s) still busy after {} ms, closing them",
                       left.size(), impl->options.shutdown_timeout.count());
    }
    for (auto& s : left) s->ForceClose();
  });
  asio::post(*impl_->contexts[0], [impl = impl_.get()] {
    for (auto& l : impl->listeners) {
      impl->AcceptBacklog(l, l.max_connections);
      beast::error_code ec;
      l.acceptor->close(ec);
    }
    std::vector<std::shared_ptr<Impl::Session>> open;
    {
      absl::MutexLock lock(&impl->sessions_mu);
      for (auto& w : impl->sessions) {
        if (auto s = w.lock()) open.push_back(std::move(s));
      }
      impl->sessions.clear();
    }
    for (auto& s : open) s->CloseIfIdle();
    {
      absl::MutexLock lock(&impl->sessions_mu);
      for (auto& s : open) impl->draining.push_back(s);
    }
    // Busy sessions finish their response and then close (keep-alive is off while stopping);
    // once no work is left, every io_context's run() returns.
    impl->guards.clear();
  });
}

}  // namespace sluice::http
