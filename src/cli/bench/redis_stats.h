// What Redis servers have executed, read from their INFO: for `sluice bench redis` and `sluice
// sim`, which measure Redis's work per decision. A measurement is two snapshots and their
// difference.

#ifndef SLUICE_CLI_BENCH_REDIS_STATS_H_
#define SLUICE_CLI_BENCH_REDIS_STATS_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "redis/client.h"

namespace sluice::tools {

// Sends one command and waits for its reply (at most 10 s).
absl::StatusOr<redis::Reply> CallRedis(redis::Client& client, std::string_view key,
                                       std::initializer_list<std::string_view> args);

// What Redis has executed of one command, from INFO commandstats
// ("cmdstat_get:calls=12,usec=34,...").
struct CommandStat {
  std::string name;
  uint64_t calls = 0;
  uint64_t usec = 0;  // time Redis spent in it (for a script: everything the script ran)
};

// What the servers have done so far: INFO commandstats summed by command, and the CPU time
// (used_cpu_sys + used_cpu_user, INFO cpu) of their processes.
struct RedisSnapshot {
  std::vector<CommandStat> commands;
  double cpu_seconds = 0;
  std::string error;  // the first INFO that failed ("" when every server answered both)
};

// Reads every server's INFO commandstats and INFO cpu.
RedisSnapshot TakeRedisSnapshot(const std::vector<std::unique_ptr<redis::Client>>& servers);

// One connection to each server `options` reach, for INFO (so that the measurement does not
// queue behind the load): the server, or every master of the cluster (CLUSTER NODES, asked
// through `client`). Servers that cannot be reached in 5 s are left out.
std::vector<std::unique_ptr<redis::Client>> RedisStatsClients(redis::Client& client,
                                                              redis::Client::Options options);

struct RedisExecuted {
  uint64_t commands = 0;      // every command, those the scripts ran included
  uint64_t script_calls = 0;  // EVALSHA / EVAL
  uint64_t script_usec = 0;   // Redis's time in them (wall clock, so a preempted call counts long)
  double cpu_seconds = 0;     // the servers' processes' CPU time: commands, networking, event loop
};

// Commands executed between two snapshots: those of the load (script calls and what the scripts
// ran, and any other data command), not the harness's own (info, script load, ping, auth,
// select, cluster).
RedisExecuted RedisExecutedBetween(const RedisSnapshot& before, const RedisSnapshot& after);

}  // namespace sluice::tools

#endif  // SLUICE_CLI_BENCH_REDIS_STATS_H_
