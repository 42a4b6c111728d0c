// For the redis module's tests: an io_context on its own thread with the connections made on it,
// and waiting, bounded, for a Connection to reach a state.

#ifndef SLUICE_REDIS_CONNECTION_TESTING_H_
#define SLUICE_REDIS_CONNECTION_TESTING_H_

#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "redis/connection.h"

namespace sluice::redis::test {

// An io_context run by its own thread until destruction, which first closes the connections it
// keeps. Whatever those connections read (a clock, say) must outlive it.
class IoThread {
 public:
  IoThread() : guard_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~IoThread() {
    for (auto& c : connections_) c->Close();
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  boost::asio::io_context& io() { return io_; }
  // A connection on this context, closed with it.
  std::shared_ptr<Connection> Open(Connection::Options options) {
    return Keep(Connection::Create(io_, std::move(options)));
  }
  // Closes `c` with the others.
  std::shared_ptr<Connection> Keep(std::shared_ptr<Connection> c) {
    connections_.push_back(c);
    return c;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::vector<std::shared_ptr<Connection>> connections_;
};

// Whether `c` is in state `want` within `limit` (polled every 5 ms).
inline bool WaitState(const Connection& c, Connection::State want,
                      std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (c.state() == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return c.state() == want;
}

}  // namespace sluice::redis::test

#endif  // SLUICE_REDIS_CONNECTION_TESTING_H_
