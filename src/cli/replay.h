// `sluice replay`: runs one limit over a trace of requests and prints every decision.

#ifndef SLUICE_CLI_REPLAY_H_
#define SLUICE_CLI_REPLAY_H_

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "sluice/limit.h"
#include "util/trace_line.h"

namespace sluice::cli {

// One request line of a trace: `T_MS KEY [COST]` (util/trace_line.h, shared with `sluice sim`).
using TraceRequest = util::TraceLine;

// Decides one trace request; nullopt (with *error set) stops the replay at that line.
using TraceDecider =
    std::function<std::optional<Decision>(const TraceRequest&, std::string* error)>;

// The replay loop shared by `replay` and `replay --config`: parses lines, skips blanks and
// comments, prints one output line per request, stops at the first bad line with
// "line N: <reason>" on `err` and returns 2; returns 0 at the end of input.
int ReplayTrace(std::istream& in, std::ostream& out, std::ostream& err, const TraceDecider& decide);

// Reads `T_MS KEY [COST]` lines from `in` and writes one tab-separated line per request to `out`:
//   t_ms  key  allow|deny  remaining  retry_after_ms  reset_ms  delay_ms
// Blank lines and lines starting with '#' are skipped. On a malformed line it writes
// "line N: <reason>" to `err`, stops, and returns 2; otherwise returns 0.
int RunReplay(const Limit& limit, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_REPLAY_H_
