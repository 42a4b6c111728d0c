// `sluice serve --envoy-env`: envoyproxy/ratelimit's environment variables read as sluice's
// settings, so that a deployment of upstream (its ports, its runtime directory, its Redis) runs
// sluice unchanged. docs/integration/envoy.md, "Same deployment", has the table of every variable.
//
// ReadEnvoyEnv is a pure function of the variables it is given: it reads no process state, so
// every mapping is tested without starting anything. Each variable is one of
//   * mapped to a sluice setting;
//   * accepted and irrelevant to sluice (a pool size): an info message when it is set;
//   * unsupported where ignoring it changes no decision (statsd, tracing): a warning;
//   * unsupported where ignoring it would change decisions or break the deployment (memcache,
//     a per-second Redis, sentinel, a unix socket): an error, and serve refuses to start.
// Variables that upstream does not read are not looked at (the environment holds many others).

#ifndef SLUICE_CLI_ENVOY_ENV_H_
#define SLUICE_CLI_ENVOY_ENV_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rules/config.h"
#include "rules/loader.h"

namespace sluice::cli {

struct EnvoyEnvMessage {
  enum class Level { kInfo, kWarning, kError };
  Level level = Level::kInfo;
  std::string variable;  // the variable it is about; empty for a general note
  std::string text;

  // "error: REDIS_TYPE=sentinel: ...", as serve prints it.
  std::string ToString() const;
};

struct EnvoyEnv {
  // The runtime directory upstream loads:
  // $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY.
  std::string rules_path;
  // How to read it; `load.settings` holds every server-wide setting (listen addresses, Redis, the
  // global modes), and the runtime tree holds domain files only.
  rules::LoadOptions load;
  // USE_PROMETHEUS=true: sluice's /metrics served besides on its own listener at
  // `prometheus_listen` ("HOST:PORT", from PROMETHEUS_ADDR, upstream's default ":9090"), under
  // `prometheus_path` (PROMETHEUS_PATH, "/metrics"), where upstream's Prometheus sink serves.
  // Empty: on the admin port (DEBUG_PORT) alone.
  std::string prometheus_listen;
  std::string prometheus_path;
  // spdlog's name of the level for LOG_LEVEL ("warn" by default, as upstream).
  std::string log_level = "warn";
  std::vector<EnvoyEnvMessage> messages;

  bool ok() const;  // no message is an error
};

// Reads upstream's variables from `env` (name -> value). An empty value counts as unset: the
// default applies.
EnvoyEnv ReadEnvoyEnv(const std::map<std::string, std::string>& env);

// Every variable name that upstream's settings read (src/settings/settings.go), for the docs
// test and for messages.
const std::vector<std::string>& EnvoyEnvVariableNames();

}  // namespace sluice::cli

#endif  // SLUICE_CLI_ENVOY_ENV_H_
