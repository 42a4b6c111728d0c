// The Redis client sluice decides with: one server, a Redis Cluster, or the master that Redis
// Sentinel names (sentinel.h).
//
// Commands are routed by key: every key of a command must hash to the same slot (sluice tags
// the keys of one request with the limiter key, `{...}`, so they do). A standalone server takes
// every command. For a cluster the client keeps the slot map (CLUSTER SLOTS, CRC16 hash slots,
// hash tags), follows `MOVED` (and refreshes the map) and `ASK` (ASKING, once, on the named
// node), and refreshes the map when a node fails. Each node gets a few pipelined connections
// (connection.h), all on the client's own I/O thread; no caller ever blocks.
//
// Callbacks run on the client's I/O thread. Safe for concurrent use.

#ifndef SLUICE_REDIS_CLIENT_H_
#define SLUICE_REDIS_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "redis/connection.h"
#include "redis/resp.h"
#include "redis/tls.h"

namespace sluice::redis {

// The hash slot of a key: CRC16 (XMODEM) of the key, or of its first non-empty `{tag}`,
// modulo 16384.
uint16_t KeySlot(std::string_view key);

// Redis Sentinel: where to ask for the master (sentinel.h).
struct SentinelOptions {
  std::string master;               // the name the sentinels monitor it by
  std::vector<Endpoint> sentinels;  // each with the sentinels' own login; tls: over TLS
  std::chrono::milliseconds check_interval{1000};  // how often the master is asked for anyway
};

class Client {
 public:
  struct Options {
    // One server, or a cluster's seed nodes; with `sentinel`, one: the master's login, database
    // and TLS (its host and port are the sentinels' answer, not this).
    std::vector<Endpoint> seeds;
    bool cluster = false;
    std::optional<SentinelOptions> sentinel;
    // How to talk TLS to seeds that are rediss:// (all or none of them); the defaults (the
    // system's CAs, the host name verified) when not given. A cluster's other nodes are reached
    // over TLS too, by the names or addresses the cluster announces.
    std::optional<TlsOptions> tls;
    // Timeouts, backoff, bounds, clock; the endpoint is set per node, and the TLS context made
    // from `tls` (when not set here already).
    Connection::Options connection;
    int connections_per_node = 2;
    int max_redirects = 5;
  };

  // Starts connecting (and, for a cluster, loading the slot map; with Sentinel, asking for the
  // master) in the background. InvalidArgument without a seed, with rediss:// and redis:// seeds
  // mixed, with `tls` for redis:// seeds and sentinels, without a sentinel or master name, or
  // when a TLS file cannot be used (MakeTlsContext).
  static absl::StatusOr<std::unique_ptr<Client>> Create(Options options);
  virtual ~Client() = default;

  // Sends `command` (one RESP command, see AppendCommand) to the node that serves `key`'s slot.
  // `deadline` holds for the whole call, redirections and waits for a node's connection included
  // (and, with Deadline::redis_time_at, each node it goes to is told it in its own clock).
  virtual void Send(std::string_view key, std::string command, Callback done,
                    Deadline deadline = {}) = 0;
  // Options::connection.timeout: how long a call may take when its caller gives no deadline.
  virtual std::chrono::microseconds timeout() const = 0;
  // Options::connection.clock: the time deadlines (Deadline::at) are in.
  virtual const Clock& clock() const = 0;

  // True when commands can be sent: the server (with Sentinel, the master) is connected, or the
  // cluster's slot map is loaded, covers every slot, and every node serving a slot is connected.
  virtual bool Ready() const = 0;
  // Why not, when not.
  virtual std::string last_error() const = 0;
  // The node "host:port" that serves `key` now ("" if unknown); for tests and diagnostics.
  virtual std::string NodeFor(std::string_view key) const = 0;
  virtual bool cluster() const = 0;
  // Counters, for metrics and tests.
  virtual uint64_t redirects() const = 0;
  virtual uint64_t map_refreshes() const = 0;
};

// For messages: "redis HOST:PORT", or "redis cluster via HOST:PORT" (the seed); " (TLS)" after
// it for rediss://.
std::string DescribeRedis(bool cluster, const Endpoint& seed);
// "redis sentinel master NAME via HOST:PORT" (the first sentinel), " (TLS)" for a TLS master.
std::string DescribeRedis(const SentinelOptions& sentinel, const Endpoint& master);

// Waits up to `wait` for the client's first connection, so that a refused login is the
// caller's error: PermissionDenied (prefixed with `where`) when Redis refused it. Otherwise OK,
// connected or not (then client.Ready() is false and last_error() says why).
absl::Status AwaitFirstConnection(const Client& client, std::chrono::microseconds wait,
                                  std::string_view where);

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_CLIENT_H_
