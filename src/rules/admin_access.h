// Who may use the admin API, as `serve` decides it at start and `check-config` checks it: the
// token read from `admin.token_file`, and the rule that an admin API listening beyond loopback
// needs one. Errors name the setting's place in the settings file (FILE:LINE:COL) when the
// settings file gave it.
//
// Thread safety: pure functions (AdminToken reads one file).

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

// The admin API's token for an admin API on `admin_listen` (the settings' own address, or the
// one a flag put in its place): the first line of admin.token_file without surrounding white
// space, or empty when there is no token file. Errors: the token file cannot be read or is
// empty; no token while `admin_listen` is not loopback.
absl::StatusOr<std::string> AdminToken(const Settings& settings, std::string_view admin_listen);

// AdminToken's errors for the settings' own admin address, as configuration errors with their
// positions (for check-config, which reports them beside the files' other errors).
std::vector<ConfigError> CheckAdminAccess(const Settings& settings);

}  // namespace sluice::rules

#endif  // SLUICE_RULES_ADMIN_ACCESS_H_
