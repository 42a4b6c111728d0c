// One connection to one Redis server, on an Asio io_context: non-blocking and auto-pipelined.
//
// Thread safety: commands may be sent from any thread; every callback runs on the io_context's
// thread, in reply order. Bounded: every command has a deadline, at most Options::max_pending
// wait for replies, and while the connection is down commands fail at once (Unavailable); it
// reconnects with capped exponential backoff. Time: the injected clock's monotonic reading.
// Callbacks get an error Status for transport failures only; a Redis error reply is a Reply of
// type kError.
//
// Over TLS (Options::tls) the same, on a TLS stream made afresh for each connection.
//
// Design: docs/redis.md#the-connection-and-rediss-clock.

#ifndef SLUICE_REDIS_CONNECTION_H_
#define SLUICE_REDIS_CONNECTION_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "redis/resp.h"
#include "redis/tls.h"
#include "sluice/clock.h"

namespace sluice::redis {

// A time in the redis module: a clock's monotonic reading (Clock::MonotonicMicros) as a
// std::chrono time point. With the system's clock it is std::chrono::steady_clock's own time.
using MonoTime = std::chrono::steady_clock::time_point;
inline MonoTime MonotonicNow(const Clock& clock) {
  return MonoTime(std::chrono::microseconds(clock.MonotonicMicros()));
}

using Callback = std::function<void(absl::StatusOr<Reply>)>;

// When the caller stops waiting for a command's reply and, for a command that can check it
// itself (decide.lua), where the command carries that moment in the server's own clock.
struct Deadline {
  // In the connection's clock (Options::clock, MonotonicNow); the default (the epoch) means
  // now + Options::timeout. A later one is cut to that.
  MonoTime at{};
  // Byte offset in the command of a bulk string of kRedisTimeDigits digits that the connection
  // overwrites with the earliest Redis time (µs since the epoch, see RedisClock) at which it may
  // already have given up on the command: `at`, less a margin for the reply's way back
  // (Options::timeout / 8). npos: none. Such a command's reply must be an array whose first
  // element is Redis's time (µs) when it ran; the connection learns Redis's clock from it.
  size_t redis_time_at = std::string::npos;
  // When set: gets the reply of a command whose callback already got DeadlineExceeded, if that
  // reply still comes (not if the connection drops first), for a caller that must undo what the
  // command did after all (a decision that consumed quota for a request answered otherwise).
  std::function<void(const Reply&)> late = nullptr;
};
inline constexpr size_t kRedisTimeDigits = 16;

class Connection {
 public:
  struct Options {
    Endpoint endpoint;
    std::chrono::microseconds timeout{10000};  // per command
    std::chrono::milliseconds connect_timeout{1000};
    std::chrono::milliseconds min_backoff{10};
    std::chrono::milliseconds max_backoff{1000};
    size_t max_pending = 100000;
    // Where deadlines take the time from; not owned, must outlive the connection.
    const Clock* clock = SystemClock::Get();
    // Set: TLS (rediss://). Every (re)connection handshakes within connect_timeout, then logs in
    // as over TCP; everything else is the same.
    std::shared_ptr<const TlsContext> tls;
    // False: the login does not read the server's clock (TIME), which a Sentinel does not serve;
    // such a connection cannot carry Deadline::redis_time_at.
    bool read_server_time = true;
    // For a subscriber (SUBSCRIBE): gets, on the io_context's thread, each reply that arrives
    // with no command waiting for one, and every "message"/"pmessage" array; without it such a
    // reply fails the connection. Subscriptions do not survive a reconnection: see on_ready.
    std::function<void(Reply)> on_push;
    // Called on the io_context's thread each time the connection is (re)established and logged
    // in, before any other command is sent on it (a subscriber subscribes here).
    std::function<void()> on_ready;
  };

  // What the connection is doing now.
  enum class State { kConnecting, kReady, kDown, kClosed };

  // Starts connecting at once. The connection lives until Close() and the io_context has run
  // its last handler; the returned handle may be dropped before that.
  static std::shared_ptr<Connection> Create(boost::asio::io_context& io, Options options);
  virtual ~Connection() = default;

  // `command` is one or more RESP commands (AppendCommand); `replies` of them are expected and
  // delivered as one array reply when more than one (a pipeline), else the single reply. A
  // deadline already past fails the command at once, unsent.
  virtual void Send(std::string command, Callback done, size_t replies = 1,
                    Deadline deadline = {}) = 0;

  // Fails what is pending with Unavailable and stops reconnecting. Safe from any thread.
  virtual void Close() = 0;

  virtual State state() const = 0;
  // Why the connection is not ready ("connection refused", "login to ... failed: WRONGPASS
  // ...", "TLS handshake with ... failed: certificate verify failed: certificate has expired"),
  // or empty.
  virtual std::string last_error() const = 0;
};

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_CONNECTION_H_
