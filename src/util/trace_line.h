// One line of a recorded trace, `T_MS KEY [COST]`: what `sluice replay` and `sluice sim` read.
//
// Fields are separated by runs of spaces or tabs; T_MS is a non-negative integer (milliseconds),
// KEY any token without white space, COST a positive integer (default 1). Blank lines and lines
// that start with '#' are not requests. Pure functions, no state.

#ifndef SLUICE_UTIL_TRACE_LINE_H_
#define SLUICE_UTIL_TRACE_LINE_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::util {

// One request line. The views point into the parsed line.
struct TraceLine {
  std::string_view t_ms_text;  // as written
  int64_t t_ms = 0;
  std::string_view key;
  uint64_t cost = 1;
};

// The line without leading and trailing white space (including a CR from CRLF files). A request
// iff the result is not empty and does not start with '#'.
std::string_view StripTraceLine(std::string_view line);

// Parses a stripped request line into *out; times above `max_t_ms` are out of range. Returns an
// empty string on success, else the reason ("missing key (expected: T_MS KEY [COST])", ...).
std::string ParseTraceLine(std::string_view line, int64_t max_t_ms, TraceLine* out);

}  // namespace sluice::util

#endif  // SLUICE_UTIL_TRACE_LINE_H_
