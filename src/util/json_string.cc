#include "util/json_string.h"

#include <iterator>

#include "fmt/format.h"

namespace sluice::util {
namespace {

// Length of the valid UTF-8 sequence (RFC 3629: no overlongs, no surrogates, at most U+10FFFF)
// at the start of `s`, or 0 if there is none.
size_t Utf8SequenceLength(std::string_view s) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto in = [&](size_t i, unsigned char lo, unsigned char hi) {
    return i < s.size() && at(i) >= lo && at(i) <= hi;
  };
  const unsigned char c = at(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return in(1, 0x80, 0xBF) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
    const unsigned char hi = c == 0xED ? 0x9F : 0xBF;
    return in(1, lo, hi) && in(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
    return in(1, lo, hi) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

}  // namespace

size_t PlainJsonRunEnd(std::string_view text, size_t from) {
  size_t end = from;
  while (end < text.size()) {
    const auto c = static_cast<unsigned char>(text[end]);
    if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80) break;
    ++end;
  }
  return end;
}

void AppendJsonString(std::string* out, std::string_view text) {
  out->reserve(out->size() + text.size() + 2);
  *out += '"';
  size_t i = 0;
  while (i < text.size()) {
    // Copy the run of bytes that need no attention in one go.
    const size_t run = PlainJsonRunEnd(text, i);
    out->append(text.data() + i, run - i);
    i = run;
    if (i == text.size()) break;

    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(text.substr(i));
      if (length == 0) {
        *out += "\\ufffd";
        ++i;
      } else {
        out->append(text.data() + i, length);
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        fmt::format_to(std::back_inserter(*out), "\\u{:04x}", c);
    }
    ++i;
  }
  *out += '"';
}

}  // namespace sluice::util
