#include "sim/instance.h"

#include <optional>

#include "fmt/format.h"
#include "rules/config.h"

namespace sluice::sim {

absl::StatusOr<Mode> ParseMode(std::string_view name) {
  if (name == "exact") return Mode::kExact;
  if (name == "leased") return Mode::kLeased;
  if (name == "eventual") return Mode::kEventual;
  return absl::InvalidArgumentError(
      fmt::format("--mode: unknown mode '{}' (exact, leased, eventual)", name));
}

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kExact:
      return "exact";
    case Mode::kLeased:
      return "leased";
    case Mode::kEventual:
      return "eventual";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<stack::Stack>> BuildInstance(const InstanceConfig& config,
                                                            const Clock* clock) {
  rules::Settings settings;
  settings.backend = "redis";
  settings.redis_cluster = config.cluster;
  settings.redis_nodes = config.redis_urls;
  settings.redis_key_prefix = config.key_prefix;
  settings.redis_timeout_us = config.timeout_us;
  settings.redis_over_limit_cache = config.over_limit_cache ? settings.redis_over_limit_cache : 0;
  // The local store only answers failure_mode local, which the sim does not use.
  settings.max_entries = size_t{1} << 16;
  settings.redis_lease_interval_us = config.lease_interval_us;
  settings.redis_window_lease_life_us = config.window_lease_life_us;
  settings.redis_sync_interval_us = config.sync_interval_us;
  // One stack for every mode: the sim's items say which consistency decides them.
  return stack::Stack::Build(settings, std::nullopt, clock);
}

}  // namespace sluice::sim
