#include "stack/redis_tls.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace sluice::stack {
namespace {

// The context of `settings`' redis.tls, or the configuration error that refuses it.
absl::StatusOr<std::shared_ptr<const redis::TlsContext>> MakeContext(
    const rules::Settings& settings, rules::ConfigError* error) {
  if (!settings.redis_tls) return nullptr;
  const rules::RedisTlsSettings& tls = *settings.redis_tls;
  std::string field;
  auto context = redis::MakeTlsContext(RedisTlsOptions(tls), &field);
  if (context.ok()) return context;
  error->position = field == "ca_file"     ? tls.ca_file_at
                    : field == "cert_file" ? tls.cert_file_at
                    : field == "key_file"  ? tls.key_file_at
                                           : tls.at;
  error->message = fmt::format("redis.tls: {}", std::string(context.status().message()));
  return context.status();
}

}  // namespace

redis::TlsOptions RedisTlsOptions(const rules::RedisTlsSettings& tls) {
  return redis::TlsOptions{.ca_file = tls.ca_file,
                           .cert_file = tls.cert_file,
                           .key_file = tls.key_file,
                           .server_name = tls.server_name,
                           .verify_hostname = !tls.skip_hostname_verification};
}

absl::StatusOr<std::shared_ptr<const redis::TlsContext>> RedisTlsContext(
    const rules::Settings& settings) {
  rules::ConfigError error;
  auto context = MakeContext(settings, &error);
  if (!context.ok()) {
    // (Settings not from a file, --envoy-env's, have no place to name.)
    return absl::InvalidArgumentError(error.position.file.empty() ? error.message
                                                                  : error.ToString());
  }
  return context;
}

std::vector<rules::ConfigError> CheckRedisTls(const rules::Settings& settings) {
  if (settings.backend != "redis") return {};
  rules::ConfigError error;
  if (MakeContext(settings, &error).ok()) return {};
  return {error};
}

}  // namespace sluice::stack
