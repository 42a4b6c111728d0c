#include "cli/bench/redis_stats.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <sstream>
#include <thread>
#include <utility>

namespace sluice::tools {

using namespace std::chrono_literals;

absl::StatusOr<redis::Reply> CallRedis(redis::Client& client, std::string_view key,
                                       std::initializer_list<std::string_view> args) {
  std::string command;
  redis::AppendCommand(&command, args);
  // Shared with the callback, which may run after a timed-out wait has returned.
  auto promise = std::make_shared<std::promise<absl::StatusOr<redis::Reply>>>();
  auto future = promise->get_future();
  client.Send(key, std::move(command),
              [promise](absl::StatusOr<redis::Reply> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(10s) != std::future_status::ready)
    return absl::DeadlineExceededError("no reply");
  return future.get();
}

RedisSnapshot TakeRedisSnapshot(const std::vector<std::unique_ptr<redis::Client>>& servers) {
  RedisSnapshot out;
  for (const auto& server : servers) {
    auto info = CallRedis(*server, "", {"INFO", "commandstats"});
    auto cpu = CallRedis(*server, "", {"INFO", "cpu"});
    if (out.error.empty() && !(info.ok() && cpu.ok()))
      out.error = std::string((info.ok() ? cpu : info).status().message());
    std::istringstream lines((info.ok() ? info->str : "") + (cpu.ok() ? cpu->str : ""));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.starts_with("used_cpu_sys:") || line.starts_with("used_cpu_user:")) {
        out.cpu_seconds += std::strtod(line.c_str() + line.find(':') + 1, nullptr);
        continue;
      }
      if (!line.starts_with("cmdstat_")) continue;
      const size_t colon = line.find(':'), calls = line.find("calls="), usec = line.find("usec=");
      if (colon == std::string::npos || calls == std::string::npos || usec == std::string::npos)
        continue;
      const std::string name = line.substr(8, colon - 8);
      auto it = std::find_if(out.commands.begin(), out.commands.end(),
                             [&](const CommandStat& c) { return c.name == name; });
      if (it == out.commands.end())
        it = out.commands.insert(out.commands.end(), CommandStat{.name = name});
      it->calls += std::stoull(line.substr(calls + 6));
      it->usec += std::stoull(line.substr(usec + 5));
    }
  }
  return out;
}

std::vector<std::unique_ptr<redis::Client>> RedisStatsClients(redis::Client& client,
                                                              redis::Client::Options options) {
  options.connections_per_node = 1;
  std::vector<redis::Endpoint> servers = options.seeds;
  if (options.cluster) {
    servers.clear();
    auto nodes = CallRedis(client, "", {"CLUSTER", "NODES"});
    std::istringstream lines(nodes.ok() ? nodes->str : "");
    std::string id, address, flags;
    while (lines >> id >> address >> flags) {  // "<id> <ip:port@bus> <flags> ..." per line
      std::string rest;
      std::getline(lines, rest);
      if (flags.find("master") == std::string::npos) continue;
      auto endpoint = redis::ParseUrl("redis://" + address.substr(0, address.find('@')));
      if (!endpoint.ok()) continue;
      endpoint->user = options.seeds.front().user;
      endpoint->password = options.seeds.front().password;
      endpoint->tls = options.seeds.front().tls;  // a cluster over TLS: every node is
      servers.push_back(*endpoint);
    }
    options.cluster = false;
  }
  std::vector<std::unique_ptr<redis::Client>> out;
  for (const redis::Endpoint& server : servers) {
    options.seeds = {server};
    auto c = redis::Client::Create(options);
    if (!c.ok()) continue;
    for (int i = 0; i < 500 && !(*c)->Ready(); ++i) std::this_thread::sleep_for(10ms);
    out.push_back(std::move(*c));
  }
  return out;
}

RedisExecuted RedisExecutedBetween(const RedisSnapshot& before, const RedisSnapshot& after) {
  RedisExecuted e;
  e.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
  for (const CommandStat& now : after.commands) {
    const std::string& name = now.name;
    if (name == "info" || name.starts_with("script") || name == "ping" || name == "auth" ||
        name == "select" || name.starts_with("cluster")) {
      continue;
    }
    CommandStat was;
    for (const CommandStat& b : before.commands) {
      if (b.name == name) was = b;
    }
    e.commands += now.calls - was.calls;
    if (name == "evalsha" || name == "eval") {
      e.script_calls += now.calls - was.calls;
      e.script_usec += now.usec - was.usec;
    }
  }
  return e;
}

}  // namespace sluice::tools
