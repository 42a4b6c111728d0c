// Paced: work that the Redis clients run on their I/O thread soon after it is asked for, never
// twice at once and at most once per `gap` however often it is asked for (the cluster client's
// slot-map refreshes, the Sentinel client's rounds of asking where the master is).
//
// Thread safety: Request() from any thread; Started() and Cancel() on the I/O thread.
// Ownership: `io` and `clock` are not owned and must outlive it. Units: the clock's time.

#ifndef SLUICE_REDIS_PACED_H_
#define SLUICE_REDIS_PACED_H_

#include <functional>
#include <utility>

#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "redis/connection.h"

namespace sluice::redis {

class Paced {
 public:
  // `busy`: true while the work runs (or must not start: stopping); `work`: the work, which
  // calls Started() when it begins.
  Paced(boost::asio::io_context& io, const Clock& clock, MonoTime::duration gap,
        std::function<bool()> busy, std::function<void()> work)
      : io_(io),
        clock_(clock),
        gap_(gap),
        busy_(std::move(busy)),
        work_(std::move(work)),
        timer_(io) {}

  // Runs the work soon: not while a run is scheduled or `busy`, and no sooner than `gap` after
  // the last one started.
  void Request() {
    boost::asio::post(io_, [this] {
      if (scheduled_ || busy_()) return;
      scheduled_ = true;
      const auto since = MonotonicNow(clock_) - last_;
      timer_.expires_after(since >= gap_ ? MonoTime::duration::zero() : gap_ - since);
      timer_.async_wait([this](boost::system::error_code ec) {
        scheduled_ = false;
        if (!ec) work_();
      });
    });
  }
  // The work began now: the gap counts from here.
  void Started() { last_ = MonotonicNow(clock_); }
  // A run scheduled is not made.
  void Cancel() { timer_.cancel(); }

 private:
  boost::asio::io_context& io_;
  const Clock& clock_;
  const MonoTime::duration gap_;
  const std::function<bool()> busy_;
  const std::function<void()> work_;
  boost::asio::steady_timer timer_;
  bool scheduled_ = false;
  MonoTime last_{};
};

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_PACED_H_
