// The admin API's access (admin_access.h).

#include "rules/admin_access.h"

#include <cctype>
#include <fstream>
#include <variant>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace sluice::rules {
namespace {

// The message for `position` (none when unknown) as ConfigError::ToString writes it.
std::string At(const Position& position, std::string message) {
  if (position.file.empty()) return message;
  return ConfigError{.position = position, .message = std::move(message)}.ToString();
}

std::string_view Trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

struct Refusal {
  Position position;
  std::string message;
  bool about_listen = false;  // the address, not the token file
};

// The token, or why the admin API may not be served on `admin_listen`.
std::variant<std::string, Refusal> Decide(const Settings& settings, std::string_view admin_listen) {
  std::string token;
  if (!settings.admin_token_file.empty()) {
    std::ifstream in(settings.admin_token_file);
    std::string line;
    if (!in || !std::getline(in, line) || Trimmed(line).empty()) {
      return Refusal{settings.admin_token_file_at, "cannot read an admin token from " +
                                                       settings.admin_token_file +
                                                       " (its first line is the token)"};
    }
    token = std::string(Trimmed(line));
  }
  if (token.empty() && !IsLoopbackAddress(admin_listen)) {
    return Refusal{settings.admin_listen_at,
                   fmt::format("refusing to serve the admin API on {} without a token: set "
                               "admin.token_file in the settings file, or bind it to 127.0.0.1",
                               admin_listen),
                   /*about_listen=*/true};
  }
  return token;
}

}  // namespace

bool IsLoopbackAddress(std::string_view address) {
  return address.starts_with("127.") || address.starts_with("[::1]") ||
         address.starts_with("localhost:");
}

absl::StatusOr<std::string> AdminToken(const Settings& settings, std::string_view admin_listen) {
  auto decided = Decide(settings, admin_listen);
  if (auto* refusal = std::get_if<Refusal>(&decided)) {
    // An address from a flag is not where the settings file says.
    const bool flag = refusal->about_listen && admin_listen != settings.admin_listen;
    return absl::InvalidArgumentError(At(flag ? Position{} : refusal->position, refusal->message));
  }
  return std::get<std::string>(std::move(decided));
}

std::vector<ConfigError> CheckAdminAccess(const Settings& settings) {
  auto decided = Decide(settings, settings.admin_listen);
  std::vector<ConfigError> errors;
  if (auto* refusal = std::get_if<Refusal>(&decided)) {
    errors.push_back({.position = refusal->position, .message = refusal->message});
  }
  return errors;
}

}  // namespace sluice::rules
