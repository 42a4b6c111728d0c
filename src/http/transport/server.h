// HttpServer: the HTTP/1.1 listeners (data plane and admin) on Boost.Beast / Asio.
//
// Thread safety: one io_context per worker thread; each connection is a self-owning Session on
// one of them. Handlers run on the connection's thread and must not block: one that has to wait
// takes the response (Deferral::Take()) and answers later through the Responder, from any thread.
// Bounded: header block, body, header and idle timeouts, and a connection cap per listener.
// A listener may speak TLS (Listen's `tls`); its connections then read and write through an
// Asio SSL stream, the others through the bare socket.
// Stop() drains gracefully up to ServerOptions::shutdown_timeout; Run() returns once every
// connection is closed.
//
// Design: docs/http-server.md#listeners (limits, timeouts, caps, streaming, shutdown).

#ifndef SLUICE_HTTP_TRANSPORT_SERVER_H_
#define SLUICE_HTTP_TRANSPORT_SERVER_H_

#include <algorithm>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "http/transport/pooled_allocator.h"
#include "sluice/clock.h"

namespace sluice::http {

namespace beast_http = boost::beast::http;

class ListenerTls;  // listener_tls.h

// A time in the HTTP module (the server's and the upstream client's deadlines): a clock's
// monotonic reading (Clock::MonotonicMicros) as a std::chrono time point. With the system's clock
// it is std::chrono::steady_clock's own time. The timers that enforce such deadlines wait, in
// real time, for what is left by the clock, and look at the clock again when they fire: a clock
// that jumps ahead (ManualClock) is noticed when the timer next fires.
using MonoTime = std::chrono::steady_clock::time_point;
inline MonoTime MonotonicNow(const Clock& clock) {
  return MonoTime(std::chrono::microseconds(clock.MonotonicMicros()));
}
// A request's field set (and its target) lives in blocks from the threads' free lists, not from
// malloc: see pooled_allocator.h.
using HttpFields = beast_http::basic_fields<PooledAllocator<char>>;
using HttpRequest = beast_http::request<beast_http::string_body, HttpFields>;

// An answer: Beast's response (status, fields, body) plus header fields the handler has already
// written out as text, which the server sends after the other fields. The written-out fields
// cost one append each instead of one allocation and one tree insertion in Beast's field set,
// which counts on the request path (the rate-limit fields of every decision). They are not in
// the field set: find()/operator[] do not see them and set() does not replace them. Do not
// append Content-Length, Transfer-Encoding or Connection (the server's own, see WriteAnswer).
class HttpResponse : public beast_http::response<beast_http::string_body> {
 public:
  using Base = beast_http::response<beast_http::string_body>;
  using Base::Base;
  HttpResponse() = default;

  // Adds "name: value" (a field name and value as RFC 9110 §5 allows: no CR or LF).
  void AppendField(std::string_view name, std::string_view value) {
    if (appended_fields_.empty()) ReserveFields();
    const size_t at = appended_fields_.size();
    appended_fields_.resize(at + name.size() + value.size() + 4);  // one size check, not four
    char* out = appended_fields_.data() + at;
    out = std::copy(name.begin(), name.end(), out);
    *out++ = ':';
    *out++ = ' ';
    out = std::copy(value.begin(), value.end(), out);
    *out++ = '\r';
    *out = '\n';
  }
  // The appended fields, each with its CRLF, in the order they were appended.
  std::string_view appended_fields() const { return appended_fields_; }
  // For a writer of whole field lines ("Name: value\r\n" each, under the rules of AppendField)
  // that appends them itself.
  std::string* mutable_appended_fields() { return &appended_fields_; }

  // Back to a default-constructed answer, keeping the room of the appended fields and of the
  // body (each up to 1 KiB) for the next answer on the same connection: one allocation per
  // connection, not per answer.
  // Reset member by member: assigning a fresh Base would build, move and destroy a whole field
  // set on every answer, while most answers have no Beast fields and no reason phrase of their own.
  void Clear() {
    if (this->reason() != beast_http::obsolete_reason(this->result())) this->reason({});
    this->result(beast_http::status::ok);
    this->version(11);
    if (this->begin() != this->end()) this->clear();
    if (this->body().capacity() <= 1024) {  // a short body's room too (a denial's JSON)
      this->body().clear();
    } else {
      this->body() = std::string();
    }
    if (appended_fields_.capacity() > 1024) {
      appended_fields_ = std::string();
    } else {
      appended_fields_.clear();
    }
  }

 private:
  // Room for the usual set at once (the five rate-limit fields take about 200 bytes) rather
  // than growing through 30, 60, 120...
  void ReserveFields() { appended_fields_.reserve(256); }

  std::string appended_fields_;
};

// A body read piece by piece: a request's, handed to its handler before it was read (see
// Deferral::body()), or an upstream's answer. Used on one thread (the connection's), one Read at
// a time.
class BodyReader {
 public:
  enum class Status {
    kPiece,  // `piece` holds the next bytes (never empty)
    kEnd,    // the body is complete (`piece` empty)
    kError,  // the peer went away, broke the framing or was silent too long (connection closed)
  };
  virtual ~BodyReader() = default;
  // Calls `got` once, on that thread, with the next piece of the body (valid until the next
  // Read or until the reader is dropped), or its end.
  virtual void Read(std::function<void(Status status, std::string_view piece)> got) = 0;
  // The body's length as announced (Content-Length), if it was.
  virtual std::optional<uint64_t> content_length() const = 0;
};

// The body of a streamed answer (Responder::Stream), written piece by piece. Used on the
// connection's thread only (Deferral::executor()), with one Write in flight at a time: the next
// piece waits for the previous one's `done`, which is how a slow client pushes back on the
// source. Keeps the connection alive while held.
class BodyWriter {
 public:
  virtual ~BodyWriter() = default;
  // Sends `piece` (which must stay valid until `done`). `done(true)` runs on the connection's
  // thread once it is written; `done(false)` if the client is gone (the connection is closed;
  // stop sending). An answer without content (to HEAD, or 1xx/204/304) discards the pieces.
  virtual void Write(boost::asio::const_buffer piece, std::function<void(bool written)> done) = 0;
  // The body is complete: the connection goes on with its next request. If the answer announced
  // a Content-Length and a different number of bytes was written, the connection is closed.
  virtual void End() = 0;
  // The body cannot be completed (its source failed): the connection is closed, which is how
  // the client learns that the answer is cut short.
  virtual void Abort() = 0;
};

// Answers one deferred request (see Deferral). Move-only; Send() or Stream() at most once, from
// any thread. Dropped unsent, it answers 500, so a lost callback cannot hang the connection.
class Responder {
 public:
  // Runs on the connection's thread once a streamed answer's status and fields are written, with
  // the writer for its body, or with nullptr if the client is gone.
  using StreamStarted = std::function<void(std::shared_ptr<BodyWriter> body)>;

  class Target {  // the connection waiting for the answer (session.h)
   public:
    virtual ~Target() = default;
    virtual void Deliver(HttpResponse response) = 0;
    virtual void DeliverStream(HttpResponse head, std::optional<uint64_t> content_length,
                               StreamStarted started) = 0;
    virtual void WatchClose(std::function<void()> gone) = 0;  // see OnClientGone
  };

  Responder() = default;
  Responder(std::shared_ptr<Target> target, boost::asio::any_io_executor work);
  Responder(Responder&&) noexcept = default;
  Responder& operator=(Responder&&) noexcept;
  ~Responder();

  // Writes `response` on the connection (its version and keep-alive are the server's business).
  void Send(HttpResponse response);
  // Streams the answer: `head`'s status and fields (its body is ignored), then a body written
  // through the BodyWriter given to `started`. With `content_length` the body is sent with that
  // Content-Length (and must be that long); without, chunked (RFC 9112 §7.1), or delimited by
  // closing the connection for an HTTP/1.0 client. To HEAD, only the fields are sent (with the
  // Content-Length, if known).
  void Stream(HttpResponse head, std::optional<uint64_t> content_length, StreamStarted started);
  // Runs `gone` on the connection's thread if the client closes the connection (or it breaks)
  // while this answer is still to come, so that a handler that waits (a shaping delay) can give
  // up; the answer is still expected (dropping the Responder will do). Seen only while the
  // client sends nothing more: once more bytes are there (the body, a next request), the
  // connection is no longer watched. Call on the connection's thread, before reading the body.
  void OnClientGone(std::function<void()> gone);
  explicit operator bool() const { return target_ != nullptr; }

 private:
  std::shared_ptr<Target> target_;
  boost::asio::any_io_executor work_;  // keeps the connection's event loop running meanwhile
};

// Given to every handler call: lets the handler answer later instead of filling `response` now.
class Deferral {
 public:
  using Factory = std::function<Responder()>;
  explicit Deferral(boost::asio::any_io_executor executor, Factory factory,
                    std::shared_ptr<BodyReader> body = nullptr)
      : executor_(std::move(executor)), factory_(std::move(factory)), body_(std::move(body)) {}

  // Takes the response over: the server writes nothing for this request until the Responder
  // sends it (or is dropped). At most once per request.
  Responder Take() {
    taken_ = true;
    return factory_();
  }
  bool taken() const { return taken_; }
  // The connection's executor, for timers and I/O that should run on its thread.
  const boost::asio::any_io_executor& executor() const { return executor_; }
  // The request's body still to be read, when the listener's `stream_body` chose to stream it
  // (the request then holds only the header); null otherwise. Read it on the connection's
  // thread. An answer sent before it was read to the end closes the connection afterwards: the
  // server's side at once, then, after reading and dropping what the client still sends (for at
  // most 5 s, so that a client busy sending gets to read the answer), the whole connection.
  const std::shared_ptr<BodyReader>& body() const { return body_; }

 private:
  boost::asio::any_io_executor executor_;
  Factory factory_;
  std::shared_ptr<BodyReader> body_;
  bool taken_ = false;
};

// Fills `response` for `request`, or takes it over through `deferral` (then `request` may be
// moved from: it is destroyed when the handler returns). `peer` is the client's address.
using Handler = std::function<void(HttpRequest& request, const std::string& peer,
                                   HttpResponse& response, Deferral& deferral)>;
// Told, on the connection's thread, of each answer the server writes itself instead of the
// handler (a request it could not read or accept: 400, 413, 431), with its status code.
using ServerAnswered = std::function<void(unsigned status)>;
// Asked, on the connection's thread, about each request that has a body, once its header is in:
// true hands the request to the handler at once with the body to read (Deferral::body()); false
// reads the body whole first (bounded by max_body_bytes) as for every other request.
using StreamBodyIf = std::function<bool(const HttpRequest& header)>;

struct ServerOptions {
  int threads = 1;
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  size_t max_connections = 10000;  // per listener, unless Listen() says otherwise
  // After Stop(), connections still busy this long (a long streamed answer) are closed.
  std::chrono::milliseconds shutdown_timeout{30000};
  // Where the timeouts above take the time from (MonoTime); not owned, must outlive the server.
  const Clock* clock = SystemClock::Get();
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
  // once (0: ServerOptions::max_connections). With `stream_body`, the requests it picks get
  // their body streamed (max_body_bytes still bounds it: a larger Content-Length is a 413).
  // `server_answered` is told of the answers that never reach `handler` (to count them). With
  // `tls`, connections speak TLS (listener_tls.h): each begins with the handshake, which must be
  // done within the header timeout together with the first request, on the context that `tls`
  // has when the connection arrives.
  absl::StatusOr<int> Listen(const std::string& address, Handler handler,
                             size_t max_connections = 0, StreamBodyIf stream_body = nullptr,
                             ServerAnswered server_answered = nullptr,
                             std::shared_ptr<ListenerTls> tls = nullptr);

  // Called once, from a thread of the server's own, when the shutdown deadline passes with
  // Run() not done: for what the handlers wait on (an upstream) to give up and answer now. The
  // connections still busy get kShutdownGrace more to write those answers before they are
  // closed. Set before Run().
  void OnShutdownDeadline(std::function<void()> at_deadline);
  static constexpr std::chrono::milliseconds kShutdownGrace{250};

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

#endif  // SLUICE_HTTP_TRANSPORT_SERVER_H_
