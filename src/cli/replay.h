// `sluice replay`: runs one limit over a trace of requests and prints every decision.

#ifndef SLUICE_CLI_REPLAY_H_
#define SLUICE_CLI_REPLAY_H_

#include <istream>
#include <ostream>

#include "sluice/limit.h"

namespace sluice::cli {

// Reads `T_MS KEY [COST]` lines from `in` and writes one tab-separated line per request to `out`:
//   t_ms  key  allow|deny  remaining  retry_after_ms  reset_ms  delay_ms
// Blank lines and lines starting with '#' are skipped. On a malformed line it writes
// "line N: <reason>" to `err`, stops, and returns 2; otherwise returns 0.
int RunReplay(const Limit& limit, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_REPLAY_H_
