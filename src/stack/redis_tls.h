// The settings' TLS to Redis (redis.tls): its context, which `serve` makes at start (refusing
// files that cannot be used, named with their place in the settings file), and the same check for
// `check-config`. Apart from redis_connect.h, which the library's stack uses without rules.

#ifndef SLUICE_STACK_REDIS_TLS_H_
#define SLUICE_STACK_REDIS_TLS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "redis/tls.h"
#include "rules/config.h"
#include "rules/loader.h"

namespace sluice::stack {

// redis.tls as the client's options.
redis::TlsOptions RedisTlsOptions(const rules::RedisTlsSettings& tls);

// The TLS context of the settings' redis.tls (null without one), its files read. Errors:
// InvalidArgument naming the file, the cause and the file's place in the settings file.
absl::StatusOr<std::shared_ptr<const redis::TlsContext>> RedisTlsContext(
    const rules::Settings& settings);

// RedisTlsContext's error as a configuration error, for check-config, when the settings decide
// on Redis (backend: redis); none otherwise.
std::vector<rules::ConfigError> CheckRedisTls(const rules::Settings& settings);

}  // namespace sluice::stack

#endif  // SLUICE_STACK_REDIS_TLS_H_
