// A throwaway Redis Sentinel for tests: redis-server --sentinel on a free loopback port with its
// own config file (in a TempDir, which Sentinel rewrites), monitoring one master on 127.0.0.1.
// Stopped (TERM, then KILL) by pid. Header-only.

#ifndef SLUICE_TESTS_SUPPORT_REDIS_SENTINEL_H_
#define SLUICE_TESTS_SUPPORT_REDIS_SENTINEL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace sluice::testing {

class RedisSentinel {
 public:
  // Watches the master at 127.0.0.1:`master_port` as `name`; `quorum` sentinels agree it is
  // down after `down_after_ms` without an answer. `extra` and `port` as RedisServer's (TLS:
  // TlsCerts::RedisArgs with --tls-replication yes, to reach a TLS master).
  RedisSentinel(const std::string& name, int master_port, int quorum = 1, int down_after_ms = 1000,
                std::vector<std::string> extra = {}, int port = 0) {
    const std::string conf =
        dir_.Write("sentinel.conf",
                   "sentinel monitor " + name + " 127.0.0.1 " + std::to_string(master_port) + " " +
                       std::to_string(quorum) + "\nsentinel down-after-milliseconds " + name + " " +
                       std::to_string(down_after_ms) + "\nsentinel failover-timeout " + name +
                       " 5000\nsentinel resolve-hostnames no\n");
    extra.insert(extra.begin(), "--sentinel");
    server_ = std::make_unique<RedisServer>(std::move(extra), port, conf);
  }

  int port() const { return server_->port(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port()); }
  RedisServer& server() { return *server_; }

 private:
  TempDir dir_;
  std::unique_ptr<RedisServer> server_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_REDIS_SENTINEL_H_
