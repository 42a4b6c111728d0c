// The server's side of one connection: reads requests, hands them to the listener's handler,
// writes the answers, and bounds every phase of it (see the class comment and server.h).

#ifndef SLUICE_HTTP_TRANSPORT_SESSION_H_
#define SLUICE_HTTP_TRANSPORT_SESSION_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "http/transport/server.h"
#include "http/transport/server_impl.h"

namespace sluice::http {

// One connection. Owns itself through shared_from_this while an operation is pending.
//
// Reads into its own buffer and feeds Beast's parser directly (no composed read), bounds every
// phase with one deadline checked by one timer (see SetDeadline; deadlines are in the server's
// clock, ServerOptions::clock, see MonoTime), and writes each answer as
// one gather write: the status line and header fields it serializes itself, then the body.
// On a TLS listener it first does the server's handshake (within the first request's deadline)
// and then reads and writes through its TlsStream; every read and write goes through
// AsyncReadSome and AsyncWrite, which pick the stream.
// A connection runs on one io_context with one thread, so it needs no strand; the only
// cross-thread entries (Start, Deliver, DeliverStream, CloseIfIdle, ForceClose) post to it. Its
// socket must never be used from another thread: the contexts run without Asio's per-socket
// lock (BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO).
class HttpServer::Impl::Session : public std::enable_shared_from_this<Session>,
                                  public Responder::Target,
                                  public BodyReader,
                                  public BodyWriter {
 public:
  Session(Socket socket, Impl* server, Listener* listener, IdleList* idle);
  ~Session() override;
  Executor executor() { return socket_.get_executor(); }

  // On the connection's thread.
  void Start();

  // Closes the connection if it is idle (IdleList), on its own thread, to make room for a new
  // one; false if none of this list was idle.
  static bool CloseOldestIdle(IdleList& idle);

  // Stop(): closes the connection if it is idle, but not over a request that has already
  // arrived (closing a socket with bytes unread would reset the connection, and lose the
  // request): the wait for the next request is cancelled and WaitForRequest looks again. A
  // connection answering finishes first (see WriteAnswer); one lingering lingers briefly.
  void CloseIfIdle();
  // Closes the connection whatever it is doing (the shutdown deadline passed): a streamed answer
  // is cut short, an answer still to come finds the connection gone.
  void ForceClose();

 private:
  // The server's clock (ServerOptions::clock): one reading, as cheap as steady_clock::now().
  MonoTime Now() const { return MonotonicNow(*server_->options.clock); }

  // The current phase must end by now + `timeout`. Only moves the timer when the deadline comes
  // earlier than the timer's expiry; a later deadline is picked up when the timer fires, so a
  // busy connection re-arms its timer about once per timeout instead of once per operation.
  void SetDeadline(std::chrono::milliseconds timeout);
  // `now`: the clock's reading when the caller has one (else it is read if the timer moves).
  void SetDeadlineAt(MonoTime deadline, std::optional<MonoTime> now = std::nullopt);

  // Waiting for the first byte of a request: last in the idle list of its listener and context.
  void EnterIdle(MonoTime now);
  void LeaveIdle();
  void PublishOldestIdle();
  // Sets the timer to wake when deadline_ is due by the clock, `now` being its reading: after
  // deadline_ - now in real time. When it wakes, OnTimer reads the clock again and closes the
  // connection if the deadline has passed, else sets it again.
  void ArmTimer(MonoTime now);
  void OnTimer();

  // A TLS connection, before its handshake: waits (idle) for the client's first byte, then
  // does the server's handshake.
  void WaitForHandshake();

  // The stream's reads and writes: the TLS stream's on a TLS listener, else the socket's. The
  // TLS side is session_tls.cc's, behind a std::function: the SSL stream's templates stay out
  // of the translation units of the plaintext path, whose code they would otherwise change.
  using IoDone = std::function<void(boost::system::error_code, size_t)>;
  template <class Done>
  void AsyncReadSome(asio::mutable_buffer buffer, Done&& done) {
    if (tls_) return TlsReadSome(buffer, IoDone(std::forward<Done>(done)));
    socket_.async_read_some(buffer, std::forward<Done>(done));
  }
  template <class Buffers, class Done>
  void AsyncWrite(const Buffers& buffers, Done&& done) {
    if (tls_) return TlsWrite(Gather(buffers), IoDone(std::forward<Done>(done)));
    asio::async_write(socket_, buffers, std::forward<Done>(done));
  }
  static std::array<asio::const_buffer, 3> Gather(asio::const_buffer buffer) {
    return {buffer, asio::const_buffer(), asio::const_buffer()};
  }
  template <size_t N>
  static std::array<asio::const_buffer, 3> Gather(const std::array<asio::const_buffer, N>& in) {
    static_assert(N <= 3);
    std::array<asio::const_buffer, 3> out{};
    for (size_t i = 0; i < N; ++i) out[i] = in[i];
    return out;
  }
  // session_tls.cc: the TLS stream made (in the constructor), its handshake, reads and writes,
  // and whether it holds bytes taken from the socket and not read yet.
  void MakeTlsStream();
  void Handshake();
  void TlsReadSome(asio::mutable_buffer buffer, IoDone done);
  void TlsWrite(std::array<asio::const_buffer, 3> buffers, IoDone done);
  bool TlsBytesPending();

  // Between requests: wait up to the idle timeout for the first byte of the next one (the first
  // request's wait is bounded in Start). Idle meanwhile: closed if room is needed. Once
  // stopping, only a request already received (in the buffer or the socket) is still read.
  void WaitForRequest();

  // A request has begun: the whole of it must arrive within the header timeout (the first one:
  // counted from the accept).
  void ReadRequest();

  // Parses what the buffer holds; reads more while the request is incomplete.
  void Parse();
  void OnRead(beast::error_code ec);  // response_ is empty here (see Answered)

  // A request whose body is streamed (the listener's stream_body): the handler gets the header,
  // and the body is read as the handler asks for it (Read).
  void OnHeader();
  void Handle(HttpRequest& request, std::shared_ptr<BodyReader> body);

  // From any thread: the deferred answer.
  void Deliver(HttpResponse response) override;

  // Answers `status` itself (the handler never sees the request) and closes the connection.
  void Fail(beast_http::status status, std::string message);

  // A streamed request body not read to its end: the connection cannot go on to the next one.
  bool BodyUnread() const { return body_parser_ && !body_parser_->is_done(); }

  // Whether the client's next bytes are in already, unread: a pipelined request, or one sent
  // right after the last answer.
  bool NextRequestArrived() { return buffer_.size() > 0 || BytesWaiting(); }

  // Whether the socket holds bytes not read yet (or, with TLS, the TLS stream has taken some in
  // that were not read). Looks without waiting or consuming.
  bool BytesWaiting();

  // Once stopping, the connection ends after this answer, unless the client's next request has
  // arrived already: that one is answered too (requests received before the shutdown are not
  // lost), and the last answer says Connection: close.
  bool CloseAfterThisAnswer();
  void WriteAnswer();

  // The answer is out: the next request, or the end of the connection.
  void Answered();

  // From any thread: a streamed answer's status and fields.
  void DeliverStream(HttpResponse head, std::optional<uint64_t> content_length,
                     Responder::StreamStarted started) override;

  // Responder::OnClientGone, on the connection's thread: waits until the socket is readable
  // (without reading) and looks: the client's close or a reset calls `gone`; bytes (a body, a
  // next request) end the watch, since what follows them cannot be seen without reading them.
  void WatchClose(std::function<void()> gone) override;
  void WriteStreamHead(std::optional<uint64_t> content_length, Responder::StreamStarted started);

  // BodyReader (the streamed request body), on the connection's thread.
  void Read(std::function<void(Status, std::string_view)> got) override;
  std::optional<uint64_t> content_length() const override;

  // Parses what the buffer holds into the piece; reads more until some body bytes are there.
  void ParseBody(std::function<void(Status, std::string_view)> got);

  // The answer went out before the request's body was read, and the client may still be sending
  // it: closing now would reset the connection (bytes unread), which can destroy the answer
  // before the client has read it. So the sending side is shut (the client sees the end), and
  // what still comes is read and dropped until the client closes, for at most kLingerTime
  // (RFC 9112 §9.6).
  void Linger();
  void Drain();
  void BodyFailed(std::function<void(Status, std::string_view)> got);

  // BodyWriter, on the connection's thread.
  void Write(asio::const_buffer piece, std::function<void(bool)> done) override;
  void End() override;
  void Abort() override;
  void Close();

  static constexpr size_t kReadSize = 8192;
  static constexpr size_t kPieceBytes = 64 << 10;                    // of a streamed request body
  static constexpr std::chrono::milliseconds kLingerTime{5000};      // see Linger
  static constexpr std::chrono::milliseconds kStopLingerTime{1000};  // (once stopping)

  Socket socket_;
  // TLS only: the context the connection started with (kept while the stream lives), and the
  // stream over socket_.
  std::shared_ptr<asio::ssl::context> tls_context_;
  std::unique_ptr<TlsStream> tls_;
  Timer timer_;                          // in real time; see ArmTimer
  MonoTime deadline_;                    // of the current phase; max() while a handler defers
  MonoTime armed_at_ = MonoTime::max();  // the deadline the timer is set for (max: none)
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
  MonoTime idle_since_;
  bool first_request_ = true;        // none answered yet
  MonoTime first_request_deadline_;  // the accept + header_timeout
  const Handler* handler_;
  std::string peer_;
  unsigned version_ = 11;    // of the request being answered
  bool keep_alive_ = false;  // what the request asked for
  bool head_ = false;        // a HEAD request: fields only, no body
  bool close_after_write_ = false;
  bool waiting_ = false;  // for the next request (WaitForRequest's read is pending)
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_TRANSPORT_SESSION_H_
