#include "http/server.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
// Sessions and their timers are bound to one io_context (one thread): no type-erased executor.
using Executor = asio::io_context::executor_type;
using Socket = asio::basic_stream_socket<tcp, Executor>;
using Timer = asio::basic_waitable_timer<std::chrono::steady_clock,
                                         asio::wait_traits<std::chrono::steady_clock>, Executor>;

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

void AppendDecimal(uint64_t value, std::string* out) {
  char digits[20];
  char* begin = std::end(digits);
  do {
    *--begin = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  out->append(begin, static_cast<size_t>(std::end(digits) - begin));
}

// 1xx, 204 and 304 answers carry no content (RFC 9110 §15.2, §15.3.5, §15.4.5).
bool WithoutContent(unsigned code) { return code / 100 == 1 || code == 204 || code == 304; }

// How the end of an answer's body is known (RFC 9112 §6.3).
enum class Framing { kLength, kChunked, kClose };

// Writes the status line and header fields of `response` into `*out` (replacing what it held):
// its field set, then its appended fields. Content-Length, Transfer-Encoding and Connection are the
// server's: any the handler set are replaced. The body is announced by `framing` (kLength:
// `content_length` bytes). An answer without content gets neither field; the answer to HEAD
// announces the body it would have had (RFC 9110 §9.3.2).
void SerializeHeader(const HttpResponse& response, unsigned version, bool keep_alive,
                     Framing framing, uint64_t content_length, std::string* out) {
  using namespace std::string_view_literals;  // literals without a strlen per append (per answer)
  out->clear();
  const unsigned code = response.result_int();
  out->append(version == 10 ? "HTTP/1.0 "sv : "HTTP/1.1 "sv);
  AppendDecimal(code, out);
  out->push_back(' ');
  const auto reason = response.reason();
  out->append(reason.data(), reason.size());
  out->append("\r\n"sv);
  for (const auto& field : response) {
    const beast_http::field name = field.name();
    if (name == beast_http::field::content_length || name == beast_http::field::connection ||
        name == beast_http::field::transfer_encoding) {
      continue;
    }
    const auto name_text = field.name_string();
    const auto value = field.value();
    out->append(name_text.data(), name_text.size());
    out->append(": "sv);
    out->append(value.data(), value.size());
    out->append("\r\n"sv);
  }
  out->append(response.appended_fields());
  if (!WithoutContent(code)) {
    if (framing == Framing::kLength) {
      out->append("Content-Length: "sv);
      AppendDecimal(content_length, out);
      out->append("\r\n"sv);
    } else if (framing == Framing::kChunked) {
      out->append("Transfer-Encoding: chunked\r\n"sv);
    }
  }
  if (!keep_alive) {
    out->append("Connection: close\r\n"sv);
  } else if (version == 10) {
    out->append("Connection: keep-alive\r\n"sv);
  }
  out->append("\r\n"sv);
}

// RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host field. (Beast keeps fields of one
// name next to each other, in their order: the one after the first Host tells a second.)
bool HasOneHost(const HttpRequest& request) {
  // One walk over the fields' list comparing their known-name codes: cheaper than find(), which
  // looks the name up as text with a case-insensitive comparison at every step.
  int hosts = 0;
  for (const auto& field : request) hosts += field.name() == beast_http::field::host ? 1 : 0;
  return hosts == 1;
}

void AppendHex(uint64_t value, std::string* out) {
  char digits[16];
  char* begin = std::end(digits);
  do {
    *--begin = "0123456789abcdef"[value % 16];
    value /= 16;
  } while (value != 0);
  out->append(begin, static_cast<size_t>(std::end(digits) - begin));
}

}  // namespace

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
    std::atomic<int64_t> oldest_idle_since{kNone};  // head's, steady clock ticks; kNone if empty
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
  std::mutex sessions_mu;
  std::vector<std::weak_ptr<Session>> sessions;  // guarded by sessions_mu
  size_t tracked_since_prune = 0;                // guarded by sessions_mu
  std::vector<std::weak_ptr<Session>> draining;  // still busy when Stop() came; sessions_mu

  // After Stop(): closes what is still open at the shutdown deadline, unless Run() is over.
  std::function<void()> at_deadline;  // OnShutdownDeadline's, run by the watchdog first
  std::thread watchdog;
  std::mutex finished_mu;
  std::condition_variable finished_cv;
  bool finished = false;  // guarded by finished_mu
  void Finish() {
    {
      std::lock_guard<std::mutex> lock(finished_mu);
      finished = true;
    }
    finished_cv.notify_all();
    if (watchdog.joinable() && watchdog.get_id() != std::this_thread::get_id()) watchdog.join();
  }
};

// One connection. Owns itself through shared_from_this while an operation is pending.
//
// Reads into its own buffer and feeds Beast's parser directly (no composed read), bounds every
// phase with one deadline checked by one timer (see SetDeadline), and writes each answer as
// one gather write: the status line and header fields it serializes itself, then the body.
// A connection runs on one io_context with one thread, so it needs no strand; the only
// cross-thread entries (Start, Deliver, DeliverStream, CloseIfIdle, ForceClose) post to it. Its
// socket must never be used from another thread: the contexts run without Asio's per-socket
// lock (BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO).
class HttpServer::Impl::Session : public std::enable_shared_from_this<Session>,
                                  public Responder::Target,
                                  public BodyReader,
                                  public BodyWriter {
 public:
  Session(Socket socket, Impl* server, Listener* listener, IdleList* idle)
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
  }

  ~Session() {
    LeaveIdle();
    server_->stats->connections_open.fetch_sub(1, std::memory_order_relaxed);
    listener_->open.fetch_sub(1, std::memory_order_relaxed);
  }

  Executor executor() { return socket_.get_executor(); }

  // On the connection's thread.
  void Start() {
    // The first request must arrive whole within the header timeout from now; a client that
    // sends nothing is not let wait longer than an idle one either.
    const SteadyClock::time_point now = SteadyClock::now();
    first_request_deadline_ = now + server_->options.header_timeout;
    deadline_ = std::min(first_request_deadline_, now + server_->options.idle_timeout);
    ArmTimer();
    WaitForRequest();
  }

  // Closes the connection if it is idle (IdleList), on its own thread, to make room for a new
  // one; false if none of this list was idle.
  static bool CloseOldestIdle(IdleList& idle) {
    Session* const oldest = idle.head;
    if (oldest == nullptr) return false;
    oldest->Close();  // unlinks it; its pending read completes with operation_aborted
    return true;
  }

  // Stop(): closes the connection if it is idle, but not over a request that has already
  // arrived (closing a socket with bytes unread would reset the connection, and lose the
  // request): the wait for the next request is cancelled and WaitForRequest looks again. A
  // connection answering finishes first (see WriteAnswer); one lingering lingers briefly.
  void CloseIfIdle() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (self->waiting_) {
        self->socket_.cancel();  // the read ends (or has ended with a request's first bytes)
      } else if (self->lingering_ && self->deadline_ > SteadyClock::now() + kStopLingerTime) {
        self->SetDeadline(kStopLingerTime);
      }
    });
  }
  // Closes the connection whatever it is doing (the shutdown deadline passed): a streamed answer
  // is cut short, an answer still to come finds the connection gone.
  void ForceClose() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }

 private:
  using SteadyClock = std::chrono::steady_clock;

  // The current phase must end by now + `timeout`. Only moves the timer when the deadline comes
  // earlier than the timer's expiry; a later deadline is picked up when the timer fires, so a
  // busy connection re-arms its timer about once per timeout instead of once per operation.
  void SetDeadline(std::chrono::milliseconds timeout) {
    SetDeadlineAt(SteadyClock::now() + timeout);
  }
  void SetDeadlineAt(SteadyClock::time_point deadline) {
    deadline_ = deadline;
    if (deadline_ < timer_.expiry()) ArmTimer();
  }

  // Waiting for the first byte of a request: last in the idle list of its listener and context.
  void EnterIdle(SteadyClock::time_point now) {
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

  void LeaveIdle() {
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

  void PublishOldestIdle() {
    idle_->oldest_idle_since.store(idle_->head != nullptr
                                       ? idle_->head->idle_since_.time_since_epoch().count()
                                       : IdleList::kNone,
                                   std::memory_order_relaxed);
  }

  void ArmTimer() {
    timer_.expires_at(deadline_);  // a wait pending before completes with operation_aborted
    timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->OnTimer();
    });
  }

  void OnTimer() {
    if (!socket_.is_open()) return;
    if (SteadyClock::now() < deadline_) return ArmTimer();
    Close();  // pending reads and writes complete with operation_aborted
  }

  // Between requests: wait up to the idle timeout for the first byte of the next one (the first
  // request's wait is bounded in Start). Idle meanwhile: closed if room is needed. Once
  // stopping, only a request already received (in the buffer or the socket) is still read.
  void WaitForRequest() {
    if (buffer_.size() > 0) return ReadRequest();
    if (server_->stopping.load() && !BytesWaiting()) return Close();
    const SteadyClock::time_point now = SteadyClock::now();
    if (!first_request_) SetDeadlineAt(now + server_->options.idle_timeout);
    EnterIdle(now);
    waiting_ = true;
    socket_.async_read_some(buffer_.prepare(kReadSize),
                            [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                              self->LeaveIdle();
                              self->waiting_ = false;
                              // Cancelled by Stop() (CloseIfIdle): look again.
                              if (ec == asio::error::operation_aborted && self->socket_.is_open()) {
                                return self->WaitForRequest();
                              }
                              if (ec) return self->Close();
                              self->buffer_.commit(n);
                              self->ReadRequest();
                            });
  }

  // A request has begun: the whole of it must arrive within the header timeout (the first one:
  // counted from the accept).
  void ReadRequest() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_->options.max_header_bytes));
    parser_->body_limit(server_->options.max_body_bytes);
    // To be asked whether to stream a body, the parser must stop after the header.
    parser_->eager(!listener_->stream_body);
    if (first_request_) {
      SetDeadlineAt(first_request_deadline_);
    } else {
      SetDeadline(server_->options.header_timeout);
    }
    Parse();
  }

  // Parses what the buffer holds; reads more while the request is incomplete.
  void Parse() {
    if (buffer_.size() > 0) {
      beast::error_code ec;
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec && ec != beast_http::error::need_more) return OnRead(ec);
      if (parser_->is_done()) return OnRead({});
      if (!parser_->eager() && parser_->is_header_done()) {
        if (listener_->stream_body(parser_->get())) return OnHeader();
        parser_->eager(true);
      }
      if (!ec && used > 0 && buffer_.size() > 0) return Parse();
    }
    socket_.async_read_some(
        buffer_.prepare(kReadSize),
        [self = shared_from_this()](boost::system::error_code ec, size_t n) {
          if (ec == asio::error::eof && self->parser_->got_some()) {
            self->parser_->put_eof(ec);  // a request cut short: partial_message (400)
            return self->OnRead(ec ? ec : beast_http::error::partial_message);
          }
          if (ec) return self->Close();  // closed before a byte, reset, timed out, stopped
          self->buffer_.commit(n);
          self->Parse();
        });
  }

  void OnRead(beast::error_code ec) {  // response_ is empty here (see Answered)
    if (ec == beast_http::error::header_limit) {
      return Fail(beast_http::status::request_header_fields_too_large,
                  "request header block too large");
    }
    if (ec == beast_http::error::body_limit) {
      return Fail(beast_http::status::payload_too_large, "request body too large");
    }
    if (ec)
      return Fail(beast_http::status::bad_request, fmt::format("bad request: {}", ec.message()));
    HttpRequest request = parser_->release();
    Handle(request, nullptr);
  }

  // A request whose body is streamed (the listener's stream_body): the handler gets the header,
  // and the body is read as the handler asks for it (Read).
  void OnHeader() {
    body_parser_.emplace(std::move(*parser_));
    body_parser_->eager(true);
    parser_.reset();
    HttpRequest request(HttpRequest::header_type(body_parser_->get().base()));
    const auto expect = request[beast_http::field::expect];
    expect_continue_ = beast::iequals(expect, "100-continue");
    Handle(request, shared_from_this());
  }

  void Handle(HttpRequest& request, std::shared_ptr<BodyReader> body) {
    if (request.version() >= 11 && !HasOneHost(request)) {
      return Fail(beast_http::status::bad_request,
                  "an HTTP/1.1 request needs exactly one Host field (RFC 9112 3.2)");
    }
    version_ = request.version();
    keep_alive_ = request.keep_alive();
    head_ = request.method() == beast_http::verb::head;
    response_.result(beast_http::status::ok);
    Deferral deferral(
        socket_.get_executor(),
        [this] {
          return Responder(
              shared_from_this(),
              asio::prefer(socket_.get_executor(), asio::execution::outstanding_work.tracked));
        },
        std::move(body));
    (*handler_)(request, peer_, response_, deferral);
    if (deferral.taken()) {
      deadline_ = SteadyClock::time_point::max();  // the handler's own deadlines bound the wait
      return;
    }
    WriteAnswer();
  }

  // From any thread: the deferred answer.
  void Deliver(HttpResponse response) override {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), response = std::move(response)]() mutable {
                 self->client_gone_ = nullptr;  // answered: nobody waits for the close any more
                 self->response_ = std::move(response);
                 self->WriteAnswer();
               });
  }

  // Answers `status` itself (the handler never sees the request) and closes the connection.
  void Fail(beast_http::status status, std::string message) {
    if (listener_->server_answered) listener_->server_answered(static_cast<unsigned>(status));
    version_ = 11;
    keep_alive_ = false;
    head_ = false;
    response_.result(status);
    response_.set(beast_http::field::content_type, "application/json");
    response_.body() = fmt::format("{{\"error\":\"{}\"}}", message);
    WriteAnswer();
  }

  // A streamed request body not read to its end: the connection cannot go on to the next one.
  bool BodyUnread() const { return body_parser_ && !body_parser_->is_done(); }

  // Whether the client's next bytes are in already, unread: a pipelined request, or one sent
  // right after the last answer.
  bool NextRequestArrived() { return buffer_.size() > 0 || BytesWaiting(); }

  // Whether the socket holds bytes not read yet. Looks without waiting or consuming.
  bool BytesWaiting() {
    char byte;
    boost::system::error_code ec;
    const size_t n = socket_.receive(asio::buffer(&byte, 1), Socket::message_peek, ec);
    return !ec && n > 0;
  }

  // Once stopping, the connection ends after this answer, unless the client's next request has
  // arrived already: that one is answered too (requests received before the shutdown are not
  // lost), and the last answer says Connection: close.
  bool CloseAfterThisAnswer() {
    return !keep_alive_ || BodyUnread() || (server_->stopping.load() && !NextRequestArrived());
  }

  void WriteAnswer() {
    close_after_write_ = CloseAfterThisAnswer();
    const bool without_content = WithoutContent(response_.result_int());
    SerializeHeader(response_, version_, !close_after_write_, Framing::kLength,
                    response_.body().size(), &header_);
    const size_t body_size = without_content || head_ ? 0 : response_.body().size();
    std::array<asio::const_buffer, 2> buffers{asio::buffer(header_),
                                              asio::buffer(response_.body().data(), body_size)};
    SetDeadline(server_->options.idle_timeout);
    // Sent at once, as nginx does, when no pipelined request waits in the buffer: the usual short
    // answer then needs no asynchronous operation started, queued and completed. (With a request
    // waiting, Answered would go on to it from here, and a long pipeline would nest that deep.)
    // Whatever the socket does not take now is written asynchronously.
    if (buffer_.size() == 0) {
      boost::system::error_code ec;
      const size_t sent = socket_.send(buffers, 0, ec);
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return Close();
      if (!ec && sent == asio::buffer_size(buffers)) return Answered();
      if (!ec) {
        const size_t from_header = std::min(sent, buffers[0].size());
        buffers[0] += from_header;
        buffers[1] += sent - from_header;
      }
    }
    asio::async_write(socket_, buffers,
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        if (ec) return self->Close();
                        self->Answered();
                      });
  }

  // The answer is out: the next request, or the end of the connection.
  void Answered() {
    first_request_ = false;
    // Stopping, a request the client sent before it read this Connection: close would reset the
    // connection if it came before the close, which may destroy this answer: so it lingers.
    if (close_after_write_) return BodyUnread() || server_->stopping.load() ? Linger() : Close();
    response_.Clear();
    if (body_parser_) {  // the room a streamed body took is not kept for the next request
      body_parser_.reset();
      body_piece_ = std::string();
      buffer_.shrink_to_fit();
    }
    WaitForRequest();
  }

  // From any thread: a streamed answer's status and fields.
  void DeliverStream(HttpResponse head, std::optional<uint64_t> content_length,
                     Responder::StreamStarted started) override {
    asio::post(socket_.get_executor(), [self = shared_from_this(), head = std::move(head),
                                        content_length, started = std::move(started)]() mutable {
      self->client_gone_ = nullptr;
      self->response_ = std::move(head);
      self->WriteStreamHead(content_length, std::move(started));
    });
  }

  // Responder::OnClientGone, on the connection's thread: waits until the socket is readable
  // (without reading) and looks: the client's close or a reset calls `gone`; bytes (a body, a
  // next request) end the watch, since what follows them cannot be seen without reading them.
  void WatchClose(std::function<void()> gone) override {
    if (!socket_.is_open()) return asio::post(socket_.get_executor(), std::move(gone));
    client_gone_ = std::move(gone);
    socket_.async_wait(Socket::wait_read, [weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (self == nullptr || !self->client_gone_) return;  // answered meanwhile
      auto gone = std::move(self->client_gone_);
      self->client_gone_ = nullptr;
      if (ec) return gone();  // closed here (a deadline, the shutdown)
      boost::system::error_code peek;
      char byte;
      self->socket_.receive(asio::buffer(&byte, 1), Socket::message_peek, peek);
      if (peek == asio::error::would_block) return self->WatchClose(std::move(gone));
      if (peek) gone();  // eof (the client closed) or a reset; else bytes: watch no more
    });
  }

  void WriteStreamHead(std::optional<uint64_t> content_length, Responder::StreamStarted started) {
    close_after_write_ = CloseAfterThisAnswer();
    const bool without_content = WithoutContent(response_.result_int());
    stream_ = Stream{};  // not emplace(): clang-14 sees Stream as not default-constructible here
    stream_->discard = without_content || head_;
    stream_->chunked = !without_content && !content_length && version_ != 10;
    stream_->content_length = stream_->discard ? std::optional<uint64_t>(0) : content_length;
    // Without a length or chunked framing, only the connection's end can end the body.
    if (!without_content && !content_length && version_ == 10) close_after_write_ = true;
    const Framing framing = content_length     ? Framing::kLength
                            : stream_->chunked ? Framing::kChunked
                                               : Framing::kClose;
    SerializeHeader(response_, version_, !close_after_write_, framing, content_length.value_or(0),
                    &header_);
    response_.body().clear();
    SetDeadline(server_->options.idle_timeout);
    asio::async_write(socket_, asio::buffer(header_),
                      [self = shared_from_this(), started = std::move(started)](
                          boost::system::error_code ec, size_t) {
                        self->deadline_ = SteadyClock::time_point::max();  // the source's pace
                        if (ec) {
                          self->Close();
                          return started(nullptr);
                        }
                        started(self);
                      });
  }

  // BodyReader (the streamed request body), on the connection's thread.
  void Read(std::function<void(Status, std::string_view)> got) override {
    if (!body_parser_ || !socket_.is_open() || lingering_) return got(Status::kError, {});
    if (body_parser_->is_done()) return got(Status::kEnd, {});
    // The client waits for this before it sends the body (RFC 9110 §10.1.1).
    if (expect_continue_) {
      expect_continue_ = false;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      SetDeadline(server_->options.idle_timeout);
      return asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                               [self = shared_from_this(), got = std::move(got)](
                                   boost::system::error_code ec, size_t) mutable {
                                 self->deadline_ = SteadyClock::time_point::max();
                                 if (ec) {
                                   self->Close();
                                   return got(Status::kError, {});
                                 }
                                 self->Read(std::move(got));
                               });
    }
    body_piece_.resize(kPieceBytes);
    auto& body = body_parser_->get().body();
    body.data = body_piece_.data();
    body.size = body_piece_.size();
    body.more = true;
    ParseBody(std::move(got));
  }

  std::optional<uint64_t> content_length() const override {
    if (!body_parser_) return std::nullopt;
    const auto length = body_parser_->content_length();
    if (!length) return std::nullopt;
    return *length;
  }

  // Parses what the buffer holds into the piece; reads more until some body bytes are there.
  void ParseBody(std::function<void(Status, std::string_view)> got) {
    if (buffer_.size() > 0) {
      beast::error_code ec;
      const size_t used = body_parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == beast_http::error::need_buffer) ec = {};  // the piece is full
      if (ec && ec != beast_http::error::need_more) return BodyFailed(std::move(got));
      const size_t n = body_piece_.size() - body_parser_->get().body().size;
      if (n > 0) return got(Status::kPiece, std::string_view(body_piece_.data(), n));
      if (body_parser_->is_done()) return got(Status::kEnd, {});
      if (!ec && used > 0 && buffer_.size() > 0) return ParseBody(std::move(got));
    }
    SetDeadline(server_->options.idle_timeout);  // the longest silence while the body streams
    body_read_pending_ = true;
    socket_.async_read_some(
        buffer_.prepare(kPieceBytes), [self = shared_from_this(), got = std::move(got)](
                                          boost::system::error_code ec, size_t n) mutable {
          self->body_read_pending_ = false;
          if (self->lingering_) {  // answered meanwhile: the body is dropped from now on
            got(Status::kError, {});
            return ec ? self->Close() : self->Drain();
          }
          self->deadline_ = SteadyClock::time_point::max();
          if (ec) return self->BodyFailed(std::move(got));  // cut short, reset, timed out
          self->buffer_.commit(n);
          self->ParseBody(std::move(got));
        });
  }

  // The answer went out before the request's body was read, and the client may still be sending
  // it: closing now would reset the connection (bytes unread), which can destroy the answer
  // before the client has read it. So the sending side is shut (the client sees the end), and
  // what still comes is read and dropped until the client closes, for at most kLingerTime
  // (RFC 9112 §9.6).
  void Linger() {
    lingering_ = true;
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    SetDeadline(std::min(server_->stopping.load() ? kStopLingerTime : kLingerTime,
                         server_->options.idle_timeout));
    if (!body_read_pending_) Drain();  // else the pending read goes on with it
  }

  void Drain() {
    buffer_.clear();
    socket_.async_read_some(buffer_.prepare(kReadSize),
                            [self = shared_from_this()](boost::system::error_code ec, size_t) {
                              if (ec) return self->Close();  // closed, or the time is up
                              self->Drain();
                            });
  }

  void BodyFailed(std::function<void(Status, std::string_view)> got) {
    Close();
    got(Status::kError, {});
  }

  // BodyWriter, on the connection's thread.
  void Write(asio::const_buffer piece, std::function<void(bool)> done) override {
    if (!stream_ || !socket_.is_open()) {
      return asio::post(socket_.get_executor(), [done = std::move(done)] { done(false); });
    }
    if (stream_->discard || piece.size() == 0) {
      return asio::post(socket_.get_executor(), [done = std::move(done)] { done(true); });
    }
    stream_->written += piece.size();
    std::array<asio::const_buffer, 3> buffers{asio::const_buffer(), piece, asio::const_buffer()};
    if (stream_->chunked) {
      header_.clear();
      AppendHex(piece.size(), &header_);
      header_.append("\r\n");
      buffers[0] = asio::buffer(header_);
      buffers[2] = asio::buffer("\r\n", 2);
    }
    SetDeadline(server_->options.idle_timeout);
    asio::async_write(
        socket_, buffers,
        [self = shared_from_this(), done = std::move(done)](boost::system::error_code ec, size_t) {
          self->deadline_ = SteadyClock::time_point::max();
          if (ec) self->Close();
          done(!ec);
        });
  }

  void End() override {
    if (!stream_ || !socket_.is_open()) return;
    const bool complete = !stream_->content_length || stream_->discard ||
                          stream_->written == *stream_->content_length;
    if (!complete) return Abort();
    if (!stream_->chunked || stream_->discard) {
      stream_.reset();
      return Answered();
    }
    SetDeadline(server_->options.idle_timeout);
    asio::async_write(socket_, asio::buffer("0\r\n\r\n", 5),
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        self->stream_.reset();
                        if (ec) return self->Close();
                        self->Answered();
                      });
  }

  void Abort() override {
    stream_.reset();
    Close();
  }

  void Close() {
    LeaveIdle();
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    timer_.cancel();
  }

  static constexpr size_t kReadSize = 8192;
  static constexpr size_t kPieceBytes = 64 << 10;                    // of a streamed request body
  static constexpr std::chrono::milliseconds kLingerTime{5000};      // see Linger
  static constexpr std::chrono::milliseconds kStopLingerTime{1000};  // (once stopping)

  Socket socket_;
  Timer timer_;
  SteadyClock::time_point deadline_;  // of the current phase; max() while a handler defers
  beast::flat_buffer buffer_;
  template <class Body>
  using RequestParser = beast_http::parser<true, Body, PooledAllocator<char>>;  // of an HttpRequest
  std::optional<RequestParser<beast_http::string_body>> parser_;
  // A streamed request body (OnHeader): its parser, and the piece it is read into.
  std::optional<RequestParser<beast_http::buffer_body>> body_parser_;
  std::string body_piece_;
  bool expect_continue_ = false;       // the client waits for "100 Continue" before the body
  std::function<void()> client_gone_;  // Responder::OnClientGone's, while watching
  bool body_read_pending_ = false;     // a read for the streamed body is under way
  bool lingering_ = false;             // answered, the body unread: dropping it until the close
  HttpResponse response_;
  std::string header_;  // the serialized status line and fields of response_, reused
  struct Stream {       // the answer being streamed, if any
    std::optional<uint64_t> content_length;  // announced (0 when discarding)
    uint64_t written = 0;
    bool chunked = false;
    bool discard = false;  // no content (HEAD, 1xx, 204, 304): pieces are dropped
  };
  std::optional<Stream> stream_;
  Impl* server_;
  Listener* listener_;
  IdleList* idle_;  // the listener's, of this context
  // Linked into *idle_ while idle_linked_ (see EnterIdle); idle_since_: when it became idle.
  Session* idle_prev_ = nullptr;
  Session* idle_next_ = nullptr;
  bool idle_linked_ = false;
  SteadyClock::time_point idle_since_;
  bool first_request_ = true;                       // none answered yet
  SteadyClock::time_point first_request_deadline_;  // the accept + header_timeout
  const Handler* handler_;
  std::string peer_;
  unsigned version_ = 11;    // of the request being answered
  bool keep_alive_ = false;  // what the request asked for
  bool head_ = false;        // a HEAD request: fields only, no body
  bool close_after_write_ = false;
  bool waiting_ = false;  // for the next request (WaitForRequest's read is pending)
};

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
        spdlog::warn("accept: {}", ec.message());
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
  std::lock_guard<std::mutex> lock(sessions_mu);
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
                                       ServerAnswered server_answered) {
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
    std::unique_lock<std::mutex> lock(impl->finished_mu);
    const auto over = [impl] { return impl->finished; };
    if (impl->finished_cv.wait_for(lock, impl->options.shutdown_timeout, over)) return;
    if (impl->at_deadline) {
      // What the handlers wait on ends now; their answers (a 503) need a moment to go out.
      lock.unlock();
      impl->at_deadline();
      lock.lock();
      if (impl->finished_cv.wait_for(lock, kShutdownGrace, over)) return;
    }
    lock.unlock();
    std::vector<std::shared_ptr<Impl::Session>> left;
    {
      std::lock_guard<std::mutex> sessions_lock(impl->sessions_mu);
      for (auto* list : {&impl->draining, &impl->sessions}) {
        for (auto& w : *list) {
          if (auto s = w.lock()) left.push_back(std::move(s));
        }
      }
    }
    if (!left.empty()) {
      spdlog::warn("shutdown: {} connection(s) still busy after {} ms, closing them", left.size(),
                   impl->options.shutdown_timeout.count());
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
      std::lock_guard<std::mutex> lock(impl->sessions_mu);
      for (auto& w : impl->sessions) {
        if (auto s = w.lock()) open.push_back(std::move(s));
      }
      impl->sessions.clear();
    }
    for (auto& s : open) s->CloseIfIdle();
    {
      std::lock_guard<std::mutex> lock(impl->sessions_mu);
      for (auto& s : open) impl->draining.push_back(s);
    }
    // Busy sessions finish their response and then close (keep-alive is off while stopping);
    // once no work is left, every io_context's run() returns.
    impl->guards.clear();
  });
}

}  // namespace sluice::http
