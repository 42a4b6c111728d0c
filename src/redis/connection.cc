#include "redis/connection.h"

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "redis/redis_clock.h"
#include "redis/tls_stream.h"
#include "spdlog/spdlog.h"
#include "util/log.h"

namespace sluice::redis {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class AsioConnection : public Connection, public std::enable_shared_from_this<AsioConnection> {
 public:
  AsioConnection(asio::io_context& io, Options options)
      : io_(io),
        options_(std::move(options)),
        socket_(io),
        resolver_(io),
        timer_(io),
        retry_timer_(io),
        backoff_(options_.min_backoff) {}

  void Begin() {
    asio::post(io_, [self = shared_from_this()] { self->Connect(); });
  }

  void Send(std::string command, Callback done, size_t replies, Deadline deadline) override {
    asio::post(io_, [self = shared_from_this(), command = std::move(command),
                     done = std::move(done), replies, deadline = std::move(deadline)]() mutable {
      self->Enqueue(std::move(command), std::move(done), replies, std::move(deadline));
    });
  }

  void Close() override {
    asio::post(io_, [self = shared_from_this()] {
      self->closed_ = true;
      self->retry_timer_.cancel();
      self->Drop("connection closed");
      self->SetState(State::kClosed, "closed");
    });
  }

  State state() const override { return state_.load(std::memory_order_acquire); }

  std::string last_error() const override {
    absl::MutexLock lock(&error_mu_);
    return last_error_;
  }

 private:
  struct Pending {
    Callback done;                           // null once answered (timed out)
    std::function<void(const Reply&)> late;  // Deadline::late
    size_t replies = 1;                      // how many replies this entry takes
    Reply collected;                         // the array of a multi-reply entry
    MonoTime deadline;
    bool carries_redis_time = false;  // its reply starts with Redis's time (Deadline)
  };

  void SetState(State s, std::string error) {
    state_.store(s, std::memory_order_release);
    absl::MutexLock lock(&error_mu_);
    last_error_ = std::move(error);
  }

  MonoTime Now() const { return MonotonicNow(*options_.clock); }

  // --- connecting

  void Connect() {
    if (closed_) return;
    SetState(State::kConnecting, last_error());
    ++generation_;
    resolver_.async_resolve(
        options_.endpoint.host, std::to_string(options_.endpoint.port),
        [self = shared_from_this(), gen = generation_](boost::system::error_code ec,
                                                       tcp::resolver::results_type results) {
          if (gen != self->generation_ || self->closed_) return;
          if (ec)
            return self->Fail(
                fmt::format("cannot resolve {}: {}", self->options_.endpoint.host, ec.message()));
          self->timer_.expires_after(self->options_.connect_timeout);
          self->timer_.async_wait([self, gen](boost::system::error_code ec) {
            if (!ec && gen == self->generation_ && self->state() == State::kConnecting) {
              self->Fail(self->handshaking_ ? fmt::format("TLS handshake with {} timed out",
                                                          self->options_.endpoint.Address())
                                            : std::string("connect timed out"));
            }
          });
          asio::async_connect(
              self->socket_, results,
              [self, gen](boost::system::error_code ec, const tcp::endpoint&) {
                if (gen != self->generation_ || self->closed_) return;
                if (ec)
                  return self->Fail(fmt::format("cannot connect to {}: {}",
                                                self->options_.endpoint.Address(), ec.message()));
                if (self->options_.tls) return self->Handshake();
                self->OnConnected();
              });
        });
  }

  // TLS: a fresh stream over the connected socket, handshaken within what is left of the connect
  // timeout (the timer still runs), then the login as over TCP.
  void Handshake() {
    boost::system::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    tls_ = std::make_shared<TlsStream>(std::move(socket_), options_.tls->native());
    PrepareTlsStream(*tls_, *options_.tls, options_.endpoint.host);
    handshaking_ = true;
    tls_->async_handshake(TlsStream::client, [self = shared_from_this(), stream = tls_,
                                              gen = generation_](boost::system::error_code ec) {
      if (gen != self->generation_ || self->closed_) return;
      self->handshaking_ = false;
      if (ec)
        return self->Fail(fmt::format("TLS handshake with {} failed: {}",
                                      self->options_.endpoint.Address(),
                                      TlsHandshakeError(ec, *stream)));
      self->OnConnected();
    });
  }

  void OnConnected() {
    if (!tls_) {
      boost::system::error_code ignored;
      socket_.set_option(tcp::no_delay(true), ignored);
    }
    timer_.cancel();
    ReadMore();
    // Log in and pick the database before anything else is written; commands sent meanwhile
    // fail fast (state is still kConnecting).
    const Endpoint& e = options_.endpoint;
    std::string hello;
    size_t replies = 0;
    if (!e.password.empty()) {
      if (e.user.empty()) {
        AppendCommand(&hello, {"AUTH", e.password});
      } else {
        AppendCommand(&hello, {"AUTH", e.user, e.password});
      }
      ++replies;
    }
    if (e.db != 0) {
      AppendCommand(&hello, {"SELECT", std::to_string(e.db)});
      ++replies;
    }
    AppendCommand(&hello, {"PING"});
    ++replies;
    // Redis's clock, before any command that carries a deadline in it (RedisClock).
    if (options_.read_server_time) {
      AppendCommand(&hello, {"TIME"});
      ++replies;
    }
    login_is_single_ = replies == 1;
    Push(
        std::move(hello), replies,
        [self = shared_from_this(), gen = generation_](absl::StatusOr<Reply> reply) {
          if (gen != self->generation_) return;
          if (!reply.ok()) return self->Fail(std::string(reply.status().message()));
          // One reply is not collected into an array (a Sentinel without a password: PING).
          std::vector<Reply> replies;
          if (reply->type == Reply::Type::kArray && !self->login_is_single_) {
            replies = std::move(reply->elements);
          } else {
            replies.push_back(*std::move(reply));
          }
          for (const Reply& r : replies) {
            if (r.IsError())
              return self->Fail(
                  fmt::format("login to {} failed: {}", self->options_.endpoint.Address(), r.str));
          }
          if (self->options_.read_server_time) {
            if (replies.empty() || replies.back().elements.size() != 2) {
              return self->Fail(fmt::format("login to {} failed: a malformed reply to TIME",
                                            self->options_.endpoint.Address()));
            }
            const Reply& time = replies.back();
            self->clock_.Sample(std::atoll(time.elements[0].str.c_str()) * 1000000 +
                                    std::atoll(time.elements[1].str.c_str()),
                                self->Now());
          }
          self->backoff_ = self->options_.min_backoff;
          // The login's deadline was the connect timeout; commands' deadlines are shorter.
          self->timer_.cancel();
          self->deadline_armed_ = false;
          self->SetState(State::kReady, "");
          util::Log().info("redis: connected to {}", self->options_.endpoint.Address());
          if (self->options_.on_ready) self->options_.on_ready();
        },
        /*internal=*/true);
  }

  // The connection failed: everything pending fails, and a new attempt is scheduled.
  void Fail(std::string why) {
    if (closed_) return;
    const bool was_ready = state() == State::kReady;
    if (was_ready || last_error() != why) util::Log().warn("redis: {}", why);
    Drop(why);
    SetState(State::kDown, why);
    retry_at_ = Now() + std::chrono::duration_cast<MonoTime::duration>(backoff_);
    backoff_ = std::min(backoff_ * 2, options_.max_backoff);
    WaitToRetry();
  }

  // The reconnect backoff, in the injected clock: the timer wakes in real time, and the next
  // attempt starts once the connection's clock has reached retry_at_.
  void WaitToRetry() {
    retry_timer_.expires_after(std::max(retry_at_ - Now(), MonoTime::duration(1000)));
    retry_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;
      if (self->Now() < self->retry_at_) return self->WaitToRetry();
      self->Connect();
    });
  }

  // Closes the socket and answers every pending command with Unavailable.
  void Drop(const std::string& why) {
    ++generation_;
    boost::system::error_code ignored;
    socket_.close(ignored);
    if (tls_) {
      // Its handlers still pending hold it (and quit: stale generation); the next connection
      // makes a new one.
      tls_->next_layer().close(ignored);
      tls_.reset();
    }
    handshaking_ = false;
    timer_.cancel();
    deadline_armed_ = false;
    resolver_.cancel();
    reader_ = std::make_unique<ReplyReader>();
    out_.clear();
    writing_ = false;
    std::deque<Pending> pending;
    pending.swap(pending_);
    for (Pending& p : pending) {
      if (p.done) p.done(absl::UnavailableError(fmt::format("redis: {}", why)));
    }
  }

  // --- sending

  void Enqueue(std::string command, Callback done, size_t replies, Deadline deadline) {
    if (state() != State::kReady) {
      const std::string why = last_error();
      return done(absl::UnavailableError(fmt::format("redis {} is not connected{}{}",
                                                     options_.endpoint.Address(),
                                                     why.empty() ? "" : ": ", why)));
    }
    if (pending_.size() >= options_.max_pending) {
      return done(absl::ResourceExhaustedError(fmt::format(
          "redis {}: {} commands already waiting", options_.endpoint.Address(), pending_.size())));
    }
    const auto now = Now();
    const auto latest = now + std::chrono::duration_cast<MonoTime::duration>(options_.timeout);
    const auto at = deadline.at == MonoTime{} ? latest : std::min(deadline.at, latest);
    if (at <= now) {
      return done(absl::DeadlineExceededError(fmt::format(
          "redis {}: the call's deadline passed before it was sent", options_.endpoint.Address())));
    }
    const bool carries_redis_time = deadline.redis_time_at != std::string::npos;
    if (carries_redis_time) WriteRedisDeadline(&command, deadline.redis_time_at, at);
    PushUntil(std::move(command), replies, std::move(done), at, carries_redis_time,
              std::move(deadline.late));
  }

  // Writes into `command` the earliest Redis time at which this connection may have given up on
  // it (`at`), less a margin for the reply's way back: a script that finds TIME past it
  // changes nothing, and one that does not is answered in time (see Deadline).
  void WriteRedisDeadline(std::string* command, size_t field, MonoTime at) {
    if (field + kRedisTimeDigits > command->size()) return;  // not a field of this command
    const auto margin = std::chrono::duration_cast<MonoTime::duration>(options_.timeout) / 8;
    // The login read TIME before the connection was ready, so there is always an estimate.
    const int64_t redis_us = clock_.EarliestRedisTime(at - margin).value_or(0);
    const std::string digits =
        fmt::format("{:0{}d}", std::max<int64_t>(0, redis_us), kRedisTimeDigits);
    if (digits.size() != kRedisTimeDigits) return;  // past the year 2286: no deadline
    command->replace(field, kRedisTimeDigits, digits);
  }

  void PushUntil(std::string command, size_t replies, Callback done, MonoTime deadline,
                 bool carries_redis_time, std::function<void(const Reply&)> late = nullptr) {
    Pending p;
    p.done = std::move(done);
    p.late = std::move(late);
    p.replies = std::max<size_t>(1, replies);
    if (p.replies > 1) p.collected.type = Reply::Type::kArray;
    p.deadline = deadline;
    p.carries_redis_time = carries_redis_time;
    pending_.push_back(std::move(p));
    if (!deadline_armed_ || deadline < armed_at_) ArmDeadline();
    out_.append(command);
    if (!writing_) WriteMore();
  }

  // `internal`: the connection's own login (AUTH, SELECT, PING, TIME), whose deadline is the
  // connect timeout; else Options::timeout.
  void Push(std::string command, size_t replies, Callback done, bool internal) {
    const auto timeout = std::chrono::duration_cast<MonoTime::duration>(
        internal ? options_.connect_timeout : options_.timeout);
    PushUntil(std::move(command), replies, std::move(done), Now() + timeout,
              /*carries_redis_time=*/false);
  }

  void WriteMore() {
    if (out_.empty()) return;
    writing_ = true;
    in_flight_.swap(out_);
    out_.clear();
    auto written = [self = shared_from_this(), gen = generation_](boost::system::error_code ec,
                                                                  size_t) {
      if (gen != self->generation_) return;
      self->writing_ = false;
      // Under TLS 1.3 the client's handshake ends before the server has checked the client's
      // certificate; a server that refuses it sends an alert and closes, and the login written
      // meanwhile may meet a reset. The read in flight then fails with the alert, which names
      // the cause (or with the reset): leave the failure to it (the login's deadline bounds it).
      if (ec && self->tls_ && self->state() != State::kReady) return;
      if (ec)
        return self->Fail(fmt::format("write to {}: {}", self->options_.endpoint.Address(),
                                      self->tls_ ? TlsIoError(ec) : ec.message()));
      self->WriteMore();
    };
    if (tls_) {
      asio::async_write(*tls_, asio::buffer(in_flight_),
                        [stream = tls_, written = std::move(written)](
                            boost::system::error_code ec, size_t n) { written(ec, n); });
    } else {
      asio::async_write(socket_, asio::buffer(in_flight_), std::move(written));
    }
  }

  // --- deadlines: one timer, set to the earliest deadline of a live command. (A caller's
  // deadline may be earlier than those of commands sent before it, so every live command is
  // looked at; the store keeps few in flight.) Replies do not touch it: when it fires early it
  // just moves on, so a healthy connection pays about one timer wake-up per timeout period, not
  // one per command; and it fires at most 16 times a period, however many deadlines there are
  // (a deadline may then be noticed up to timeout / 16 late).

  void ArmDeadline() {
    auto earliest = MonoTime::max();
    for (const Pending& p : pending_) {
      if (p.done != nullptr) earliest = std::min(earliest, p.deadline);
    }
    deadline_armed_ = earliest != MonoTime::max();
    if (!deadline_armed_) return;
    armed_at_ = std::max(earliest, last_expiry_ + std::chrono::duration_cast<MonoTime::duration>(
                                                      options_.timeout / 16));
    timer_.expires_after(armed_at_ - Now());  // armed_at_ is in the injected clock
    timer_.async_wait([self = shared_from_this(), gen = generation_](boost::system::error_code ec) {
      if (ec || gen != self->generation_) return;
      self->ExpireDeadlines();
    });
  }

  void ExpireDeadlines() {
    const auto now = Now();
    last_expiry_ = now;
    bool login_expired = false;
    // A callback may send more (appended to pending_, looked at next time) or fail the
    // connection (pending_ emptied): indexes, not iterators.
    const size_t count = pending_.size();
    for (size_t i = 0; i < count && i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      if (p.done == nullptr || p.deadline > now) continue;
      if (state() != State::kReady) login_expired = true;
      Callback done = std::move(p.done);
      p.done = nullptr;  // its reply, when it comes, goes to p.late or is dropped
      done(absl::DeadlineExceededError(fmt::format("redis {}: no reply in time (timeout {} µs)",
                                                   options_.endpoint.Address(),
                                                   options_.timeout.count())));
    }
    if (login_expired) return Fail("login timed out");
    ArmDeadline();
  }

  // --- reading

  void ReadMore() {
    auto read = [self = shared_from_this(), gen = generation_](boost::system::error_code ec,
                                                               size_t n) {
      if (gen != self->generation_) return;
      if (ec)
        return self->Fail(fmt::format("read from {}: {}", self->options_.endpoint.Address(),
                                      self->tls_               ? TlsIoError(ec)
                                      : ec == asio::error::eof ? "closed by the server"
                                                               : ec.message()));
      self->OnBytes(n);
    };
    if (tls_) {
      tls_->async_read_some(asio::buffer(buffer_),
                            [stream = tls_, read = std::move(read)](boost::system::error_code ec,
                                                                    size_t n) { read(ec, n); });
    } else {
      socket_.async_read_some(asio::buffer(buffer_), std::move(read));
    }
  }

  // A subscriber's message: ["message", channel, payload] or ["pmessage", pattern, channel,
  // payload].
  static bool IsPushMessage(const Reply& reply) {
    return reply.type == Reply::Type::kArray && !reply.elements.empty() &&
           reply.elements[0].type == Reply::Type::kString &&
           (reply.elements[0].str == "message" || reply.elements[0].str == "pmessage");
  }

  void OnBytes(size_t n) {
    reader_->Feed(buffer_.data(), n);
    const uint64_t gen = generation_;
    while (gen == generation_) {
      auto next = reader_->Next();
      if (!next.ok()) return Fail(std::string(next.status().message()));
      if (!next->has_value()) break;
      if (options_.on_push && (pending_.empty() || IsPushMessage(**next))) {
        options_.on_push(std::move(**next));
        continue;
      }
      if (pending_.empty()) return Fail("a reply nobody asked for");
      Pending& front = pending_.front();
      Reply reply = std::move(**next);
      if (front.replies > 1) {  // a pipeline: collect its replies into one array
        front.collected.elements.push_back(std::move(reply));
        if (front.collected.elements.size() < front.replies) continue;
        reply = std::move(front.collected);
      }
      if (front.carries_redis_time && reply.type == Reply::Type::kArray &&
          !reply.elements.empty() && reply.elements[0].type == Reply::Type::kInteger) {
        clock_.Sample(reply.elements[0].integer, Now());
      }
      Callback done = std::move(front.done);
      auto late = std::move(front.late);
      pending_.pop_front();
      if (done) {
        done(std::move(reply));
      } else if (late) {
        late(reply);
      }
    }
    if (gen == generation_) ReadMore();
  }

  asio::io_context& io_;
  const Options options_;
  tcp::socket socket_;              // connects; over TLS, moved into tls_ once connected
  std::shared_ptr<TlsStream> tls_;  // this connection's TLS stream, if TLS and connected
  tcp::resolver resolver_;
  asio::steady_timer timer_;        // connect timeout, then command deadlines
  asio::steady_timer retry_timer_;  // reconnect backoff
  std::chrono::milliseconds backoff_;
  uint64_t generation_ = 0;  // bumped on every (re)connect and drop: stale handlers quit
  bool closed_ = false;
  bool writing_ = false;
  bool handshaking_ = false;      // TLS handshake in progress
  bool login_is_single_ = false;  // the login is one command (its reply is not an array)
  bool deadline_armed_ = false;
  MonoTime armed_at_{};     // when the deadline timer fires, while armed
  MonoTime retry_at_{};     // when the next connection attempt may start (backoff)
  MonoTime last_expiry_{};  // when it last fired
  RedisClock clock_;        // Redis's clock: TIME at login, then script replies
  std::string out_;         // commands waiting for the next write
  std::string in_flight_;   // the write in progress
  std::deque<Pending> pending_;
  std::unique_ptr<ReplyReader> reader_ = std::make_unique<ReplyReader>();
  std::array<char, 16384> buffer_{};
  std::atomic<State> state_{State::kConnecting};
  mutable absl::Mutex error_mu_;
  std::string last_error_ ABSL_GUARDED_BY(error_mu_);
};

}  // namespace

std::shared_ptr<Connection> Connection::Create(boost::asio::io_context& io, Options options) {
  auto c = std::make_shared<AsioConnection>(io, std::move(options));
  c->Begin();
  return c;
}

}  // namespace sluice::redis
