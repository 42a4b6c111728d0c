// The environment's values in Go's syntax, as upstream's envconfig reads them: booleans
// (strconv.ParseBool) and durations (time.ParseDuration).
#include "cli/envoy_env_reader.h"

#include <cctype>
#include <cstdlib>
#include <string>

namespace sluice::cli {

// Go's strconv.ParseBool, as envconfig reads a bool.
std::optional<bool> ParseGoBool(std::string_view s) {
  if (s == "1" || s == "t" || s == "T" || s == "true" || s == "TRUE" || s == "True") return true;
  if (s == "0" || s == "f" || s == "F" || s == "false" || s == "FALSE" || s == "False") {
    return false;
  }
  return std::nullopt;
}

// Go's time.ParseDuration ("10s", "1.5s", "1m30s", "250ms", "0"), in microseconds; negative
// and sub-microsecond durations are refused (a timeout needs to be positive).
std::optional<int64_t> ParseGoDuration(std::string_view s) {
  if (s == "0") return 0;
  if (s.empty()) return std::nullopt;
  double total_us = 0;
  while (!s.empty()) {
    size_t digits = 0;
    while (digits < s.size() &&
           (std::isdigit(static_cast<unsigned char>(s[digits])) || s[digits] == '.')) {
      ++digits;
    }
    if (digits == 0) return std::nullopt;
    const std::string number(s.substr(0, digits));
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size()) return std::nullopt;
    s.remove_prefix(digits);
    size_t unit_len = 0;
    while (unit_len < s.size() && !std::isdigit(static_cast<unsigned char>(s[unit_len])) &&
           s[unit_len] != '.') {
      ++unit_len;
    }
    const std::string_view unit = s.substr(0, unit_len);
    s.remove_prefix(unit_len);
    double scale_us;
    if (unit == "ns") {
      scale_us = 1e-3;
    } else if (unit == "us" || unit == "\u00b5s" || unit == "\u03bcs") {
      scale_us = 1;
    } else if (unit == "ms") {
      scale_us = 1e3;
    } else if (unit == "s") {
      scale_us = 1e6;
    } else if (unit == "m") {
      scale_us = 60e6;
    } else if (unit == "h") {
      scale_us = 3600e6;
    } else {
      return std::nullopt;
    }
    total_us += value * scale_us;
  }
  // 2^53 µs is 285 years: past any sensible timeout, and still exact in a double.
  if (!(total_us >= 1) || total_us > 9007199254740992.0) return std::nullopt;
  return static_cast<int64_t>(total_us);
}

}  // namespace sluice::cli
