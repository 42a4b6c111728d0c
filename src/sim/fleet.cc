// sim's fleet: the instances of a run and the connections that watch Redis, their warm-up
// before the trace, and Redis's clock as seen from here.
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "sim/sim_internal.h"

namespace sluice::sim {

using namespace std::chrono_literals;

// Redis's clock minus this machine's wall clock (µs), from TIME; 0 if it cannot be read.
int64_t RedisClockOffset(redis::Client& client) {
  const int64_t before = SystemClock::Get()->NowMicros();
  auto reply = tools::CallRedis(client, "", {"TIME"});
  const int64_t after = SystemClock::Get()->NowMicros();
  if (!reply.ok() || reply->elements.size() != 2) return 0;
  int64_t seconds = 0, micros = 0;
  const std::string& s = reply->elements[0].str;
  const std::string& u = reply->elements[1].str;
  std::from_chars(s.data(), s.data() + s.size(), seconds);
  std::from_chars(u.data(), u.data() + u.size(), micros);
  return seconds * 1000000 + micros - (before + after) / 2;
}

// One look (cost 0) on each instance, awaited, so that every instance has its connections and
// Redis has the script before the run: a cold first call (NOSCRIPT, then the script loaded)
// would be decided late, in Redis's next window.
void WarmUp(const std::vector<std::unique_ptr<stack::Stack>>& instances, const Limit& limit,
            int64_t timeout_us) {
  struct Look {
    backend::Item item;
    Decision answer;
    std::atomic<bool> done{false};
  };
  // Shared with the completion, which may come after the wait below gave up.
  std::vector<std::shared_ptr<Look>> looks;
  for (const auto& instance : instances) {
    auto look = std::make_shared<Look>();
    look->item = {.limit = &limit, .limit_id = LimitId(limit), .key = "sim-warm-up", .cost = 0};
    instance->backend().Decide(
        std::span(&look->item, 1), SystemClock::Get()->NowMicros(), std::span(&look->answer, 1),
        [look](const backend::Outcome&) { look->done.store(true, std::memory_order_release); });
    looks.push_back(std::move(look));
  }
  const auto deadline = SteadyClock::now() + std::chrono::microseconds(timeout_us) + 1s;
  for (const auto& look : looks) {
    while (!look->done.load(std::memory_order_acquire) && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
  }
}

// Builds the instances (sets config.key_prefix) and the watching connections: 0, or RunSim's exit
// status with a message on `err`.
int StartFleet(const SimOptions& o, InstanceConfig& config, Fleet& fleet, std::ostream& err) {
  // The instances, all on the same states: one key prefix for the run, new for every run.
  config.key_prefix =
      fmt::format("sluice-sim:{}:{}:", getpid(), SystemClock::Get()->MonotonicMicros());
  for (int i = 0; i < o.instances; ++i) {
    auto instance = BuildInstance(config, SystemClock::Get());
    if (!instance.ok()) {
      err << "sim: " << instance.status().message() << "\n";
      return absl::IsUnimplemented(instance.status()) ? 2 : 1;
    }
    fleet.instances.push_back(*std::move(instance));
  }
  // A connection of its own to each server for INFO and TIME.
  redis::Client::Options client_options;
  client_options.cluster = config.cluster;
  for (const std::string& url : config.redis_urls) {
    auto endpoint = redis::ParseUrl(url);
    if (!endpoint.ok()) {
      err << "sim: " << endpoint.status().message() << "\n";
      return 2;
    }
    client_options.seeds.push_back(*endpoint);
  }
  auto probe = redis::Client::Create(client_options);
  if (!probe.ok()) {
    err << "sim: " << probe.status().message() << "\n";
    return 1;
  }
  for (int i = 0; i < 500 && !(*probe)->Ready(); ++i) std::this_thread::sleep_for(10ms);
  if (!(*probe)->Ready()) {
    err << "sim: cannot reach " << config.redis_urls.front() << ": " << (*probe)->last_error()
        << "\n";
    return 1;
  }
  fleet.stats_clients = tools::RedisStatsClients(**probe, client_options);
  fleet.probe = *std::move(probe);
  return 0;
}

}  // namespace sluice::sim
