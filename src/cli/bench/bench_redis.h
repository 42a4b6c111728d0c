// `sluice bench redis`: decisions per second, latency and Redis commands per decision against
// a Redis server (or cluster), for sluice's own script and, side by side on the same server, for
// the seed design's per-request sliding-window counter and the common ZSET sliding log.

#ifndef SLUICE_CLI_BENCH_BENCH_REDIS_H_
#define SLUICE_CLI_BENCH_BENCH_REDIS_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "sluice/limit.h"

namespace sluice::tools {

struct BenchRedisOptions {
  std::string redis;  // redis://host:port, or rediss:// (TLS, with the files below)
  // rediss://: the CA file (empty: the system's store) and, for mutual TLS, the client's
  // certificate and key.
  std::string tls_ca_file, tls_cert_file, tls_key_file;
  bool cluster = false;
  Limit limit;
  uint64_t keys = 100000;
  int connections = 2;
  int inflight = 64;          // requests kept in flight at once (closed loop)
  uint32_t buckets = 0;       // sluice: RedisStore::Options::buckets (0: a key per state)
  bool cluster_batch = true;  // sluice: RedisStore::Options::batch_cluster
  double seconds = 5;
  // sluice: RedisStore and decide.lua. seed: the seed design's script (EVALSHA key limit
  // window_s now_ms, the caller's clock). zset: a ZSET sliding log (EVALSHA key limit window_ms).
  std::string mode = "sluice";
  std::string script;  // the Lua file for seed and zset
};

// Prints one JSON line to `out`. Returns the exit status.
int RunBenchRedis(const BenchRedisOptions& options, std::ostream& out, std::ostream& err);

}  // namespace sluice::tools

#endif  // SLUICE_CLI_BENCH_BENCH_REDIS_H_
