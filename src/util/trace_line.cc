#include "util/trace_line.h"

#include <charconv>
#include <system_error>
#include <vector>

namespace sluice::util {
namespace {

// Splits on runs of spaces and tabs.
std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

enum class NumberError { kNone, kNegative, kOutOfRange, kNotInteger };

// Parses a whole token as a non-negative decimal integer.
template <typename T>
NumberError ParseNumber(std::string_view token, T* value) {
  if (!token.empty() && token[0] == '-') return NumberError::kNegative;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), *value);
  if (ec == std::errc::result_out_of_range) return NumberError::kOutOfRange;
  if (ec != std::errc() || ptr != token.data() + token.size()) return NumberError::kNotInteger;
  return NumberError::kNone;
}

}  // namespace

std::string_view StripTraceLine(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string ParseTraceLine(std::string_view line, int64_t max_t_ms, TraceLine* out) {
  std::vector<std::string_view> fields = SplitFields(line);
  if (fields.size() < 2) return "missing key (expected: T_MS KEY [COST])";
  if (fields.size() > 3) return "too many fields (expected: T_MS KEY [COST])";
  out->t_ms_text = fields[0];
  switch (ParseNumber(fields[0], &out->t_ms)) {
    case NumberError::kNone:
      break;
    case NumberError::kNegative:
      return "negative time";
    case NumberError::kOutOfRange:
      return "time out of range";
    case NumberError::kNotInteger:
      return "time is not an integer";
  }
  if (out->t_ms > max_t_ms) return "time out of range";
  out->key = fields[1];
  out->cost = 1;
  if (fields.size() == 3) {
    switch (ParseNumber(fields[2], &out->cost)) {
      case NumberError::kNone:
        break;
      case NumberError::kNegative:
        return "negative cost (cost is a positive integer)";
      case NumberError::kOutOfRange:
        return "cost too large";
      case NumberError::kNotInteger:
        return "cost is not an integer";
    }
    if (out->cost == 0) return "cost must be positive";
  }
  return {};
}

}  // namespace sluice::util
