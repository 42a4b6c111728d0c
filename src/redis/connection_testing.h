// For the redis module's tests: waiting, bounded, for a Connection to reach a state.

#ifndef SLUICE_REDIS_CONNECTION_TESTING_H_
#define SLUICE_REDIS_CONNECTION_TESTING_H_

#include <chrono>
#include <thread>

#include "redis/connection.h"

namespace sluice::redis::test {

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
