// NodeConnections: one Redis server's few pipelined connections and which to use next (the
// cluster client's nodes, the Sentinel client's master).
//
// Thread safety: `address` and `connections` are set before it is shared and not changed after;
// the methods may then be called from any thread.

#ifndef SLUICE_REDIS_NODE_CONNECTIONS_H_
#define SLUICE_REDIS_NODE_CONNECTIONS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "redis/connection.h"

namespace sluice::redis {

struct NodeConnections {
  std::string address;  // "host:port"
  std::vector<std::shared_ptr<Connection>> connections;
  std::atomic<uint32_t> next{0};

  bool HasReadyConnection() const {
    for (const auto& c : connections) {
      if (c->state() == Connection::State::kReady) return true;
    }
    return false;
  }

  // Not ready yet, but still making its first connection (e.g. a node first named by a MOVED
  // after a failover): worth a short wait rather than failing the command.
  bool StillConnecting() const {
    if (HasReadyConnection()) return false;
    for (const auto& c : connections) {
      if (c->state() == Connection::State::kConnecting) return true;
    }
    return false;
  }

  // The next connection in turn that is ready (else the next one, which fails fast).
  Connection* Pick() {
    const uint32_t start = next.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection* c = connections[(start + i) % connections.size()].get();
      if (c->state() == Connection::State::kReady) return c;
    }
    return connections[start % connections.size()].get();
  }
};

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_NODE_CONNECTIONS_H_
