// Who may use the admin API, as `serve` decides it at start and `check-config` checks it: the
// token read from `admin.token_file`, and the rule that an admin API listening beyond loopback
// needs one. Errors name the setting's place in the settings file (FILE:LINE:COL) when the
// settings file gave it.
//
// Thread safety: pure functions (AdminTokens reads one file).

#ifndef SLUICE_RULES_ADMIN_ACCESS_H_
#define SLUICE_RULES_ADMIN_ACCESS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/config.h"
#include "rules/loader.h"

namespace sluice::rules {

// Whether `address` ("host:port") is reachable only from this machine.
bool IsLoopbackAddress(std::string_view address);

// One admin token and the name changes made with it are logged under.
struct AdminToken {
  std::string name;
  std::string token;
  friend bool operator==(const AdminToken&, const AdminToken&) = default;
};

// The admin API's tokens for an admin API on `admin_listen` (the settings' own address, or the
// one a flag put in its place), from admin.token_file: one per line, `TOKEN` (named "admin") or
// `NAME TOKEN`, white space around them ignored, as are empty lines and lines starting with `#`;
// none when there is no token file. Errors: the token file cannot be read, holds no token, or a
// line has more than two words; no token while `admin_listen` is not loopback.
absl::StatusOr<std::vector<AdminToken>> AdminTokens(const Settings& settings,
                                                    std::string_view admin_listen);

// AdminTokens' errors for the settings' own admin address, as configuration errors with their
// positions (for check-config, which reports them beside the files' other errors).
std::vector<ConfigError> CheckAdminAccess(const Settings& settings);

}  // namespace sluice::rules

#endif  // SLUICE_RULES_ADMIN_ACCESS_H_
