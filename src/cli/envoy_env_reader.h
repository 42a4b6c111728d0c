// Internal to `serve --envoy-env` (envoy_env.cc, envoy_env_reader.cc, envoy_env_names.cc): the
// reader of the environment, which remembers the variables handled and collects the messages,
// and the values in Go's syntax as upstream's envconfig reads them. Not part of envoy_env.h's
// interface. An EnvReader borrows the environment and the EnvoyEnv it writes its messages to; it
// is used on one thread.

#ifndef SLUICE_CLI_ENVOY_ENV_READER_H_
#define SLUICE_CLI_ENVOY_ENV_READER_H_

#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "cli/envoy_env.h"
#include "fmt/format.h"

namespace sluice::cli {

using Level = EnvoyEnvMessage::Level;

// Go's strconv.ParseBool, as envconfig reads a bool.
std::optional<bool> ParseGoBool(std::string_view s);

// Go's time.ParseDuration ("10s", "1.5s", "1m30s", "250ms", "0"), in microseconds; negative
// and sub-microsecond durations are refused (a timeout needs to be positive).
std::optional<int64_t> ParseGoDuration(std::string_view s);

class EnvReader {
 public:
  EnvReader(const std::map<std::string, std::string>& env, EnvoyEnv& out) : env_(env), out_(out) {}

  // The value when set (and not empty); the name counts as handled either way.
  std::optional<std::string> Get(const std::string& name) {
    handled_.insert(name);
    auto it = env_.find(name);
    if (it == env_.end() || it->second.empty()) return std::nullopt;
    return it->second;
  }

  std::string GetOr(const std::string& name, const std::string& def) {
    return Get(name).value_or(def);
  }

  bool Bool(const std::string& name, bool def) {
    const auto value = Get(name);
    if (!value) return def;
    if (auto b = ParseGoBool(*value)) return *b;
    Say(Level::kError, name, fmt::format("'{}' is not a boolean (true or false)", *value));
    return def;
  }

  // A Go duration of at least `min_us` microseconds, in microseconds; `def` when unset, and after
  // an error "'VALUE' is not WHAT" when it is not one.
  int64_t Duration(const std::string& name, int64_t def, int64_t min_us, std::string_view what) {
    const auto value = Get(name);
    if (!value) return def;
    if (auto us = ParseGoDuration(*value); us && *us >= min_us) return *us;
    Say(Level::kError, name, fmt::format("'{}' is not {}", *value, what));
    return def;
  }

  int Port(const std::string& name, int def) {
    const auto value = Get(name);
    if (!value) return def;
    int port = -1;
    const auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), port);
    if (ec != std::errc() || end != value->data() + value->size() || port < 0 || port > 65535) {
      Say(Level::kError, name, fmt::format("'{}' is not a port (0 to 65535)", *value));
      return def;
    }
    return port;
  }

  void Say(Level level, const std::string& name, std::string text) {
    out_.messages.push_back({level, name, std::move(text)});
  }

  // A feature switch that sluice does not have: `level` when it is set and on (a switch on by
  // default, USE_STATSD, is named only when set).
  void Unsupported(const std::string& name, bool def, Level level, const std::string& why) {
    if (Bool(name, def) && Get(name)) Say(level, name, why);
  }

  // Every other variable upstream reads, set here: named, as the tables of envoy_env_names.cc
  // say, or as read by upstream and not by sluice.
  void NameTheRest();

 private:
  const std::map<std::string, std::string>& env_;
  EnvoyEnv& out_;
  std::set<std::string> handled_;
};

}  // namespace sluice::cli

#endif  // SLUICE_CLI_ENVOY_ENV_READER_H_
