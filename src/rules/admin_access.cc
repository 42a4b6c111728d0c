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

// The tokens of `settings`' token file, or why it cannot be used.
std::variant<std::vector<AdminToken>, Refusal> ReadTokens(const Settings& settings) {
  const std::string& file = settings.admin_token_file;
  std::ifstream in(file);
  std::vector<AdminToken> tokens;
  std::string line;
  for (int number = 1; in && std::getline(in, line); ++number) {
    const std::string_view text = Trimmed(line);
    if (text.empty() || text.front() == '#') continue;
    const size_t space = text.find_first_of(" \t");
    if (space == std::string_view::npos) {
      tokens.push_back({"admin", std::string(text)});
      continue;
    }
    const std::string_view token = Trimmed(text.substr(space));
    if (token.find_first_of(" \t") != std::string_view::npos) {
      return Refusal{
          settings.admin_token_file_at,
          fmt::format("{}:{}: a token line is TOKEN or NAME TOKEN, not more words", file, number)};
    }
    tokens.push_back({std::string(text.substr(0, space)), std::string(token)});
  }
  if (tokens.empty()) {
    return Refusal{settings.admin_token_file_at, "cannot read an admin token from " + file +
                                                     " (one per line: TOKEN, or NAME TOKEN)"};
  }
  return tokens;
}

// The tokens, or why the admin API may not be served on `admin_listen`.
std::variant<std::vector<AdminToken>, Refusal> Decide(const Settings& settings,
                                                      std::string_view admin_listen) {
  std::vector<AdminToken> tokens;
  if (!settings.admin_token_file.empty()) {
    auto read = ReadTokens(settings);
    if (auto* refusal = std::get_if<Refusal>(&read)) return std::move(*refusal);
    tokens = std::get<std::vector<AdminToken>>(std::move(read));
  }
  if (tokens.empty() && !IsLoopbackAddress(admin_listen)) {
    return Refusal{settings.admin_listen_at,
                   fmt::format("refusing to serve the admin API on {} without a token: set "
                               "admin.token_file in the settings file, or bind it to 127.0.0.1",
                               admin_listen),
                   /*about_listen=*/true};
  }
  return tokens;
}

}  // namespace

bool IsLoopbackAddress(std::string_view address) {
  return address.starts_with("127.") || address.starts_with("[::1]") ||
         address.starts_with("localhost:");
}

absl::StatusOr<std::vector<AdminToken>> AdminTokens(const Settings& settings,
                                                    std::string_view admin_listen) {
  auto decided = Decide(settings, admin_listen);
  if (auto* refusal = std::get_if<Refusal>(&decided)) {
    // An address from a flag is not where the settings file says.
    const bool flag = refusal->about_listen && admin_listen != settings.admin_listen;
    return absl::InvalidArgumentError(At(flag ? Position{} : refusal->position, refusal->message));
  }
  return std::get<std::vector<AdminToken>>(std::move(decided));
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
