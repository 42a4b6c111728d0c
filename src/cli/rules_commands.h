// The commands that work on a rules configuration: check-config, replay --config, explain.

#ifndef SLUICE_CLI_RULES_COMMANDS_H_
#define SLUICE_CLI_RULES_COMMANDS_H_

#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "rules/config.h"

namespace sluice::cli {

// `sluice check-config PATH...`: "ok: D domains, L limits" and 0, or one FILE:LINE:COL line per
// error and 1.
int RunCheckConfig(const std::vector<std::string>& paths, std::ostream& out);

// `sluice replay --config PATH --domain D`: lines `T_MS DESCRIPTORS [COST]`; output as the
// algorithm replay, the key column echoing DESCRIPTORS; remaining -1 when no limit applies.
int RunRulesReplay(const rules::Config& config, const std::string& domain, std::istream& in,
                   std::ostream& out, std::ostream& err);

// `sluice explain --config PATH --domain D DESCRIPTORS`: which rules and limits apply and why.
int RunExplain(const rules::Config& config, const std::string& domain, std::string_view descriptors,
               std::ostream& out, std::ostream& err);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_RULES_COMMANDS_H_
