#include "util/trace_context.h"

#include <algorithm>
#include <vector>

namespace sluice::util {
namespace {

constexpr size_t kVersion00Size = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
constexpr size_t kMaxMembers = 32;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is not a traceparent digit
}

// `text` (2 x out.size() lowercase hex digits) into `out`; false on any other character.
template <size_t N>
bool DecodeHex(std::string_view text, std::array<uint8_t, N>& out) {
  for (size_t i = 0; i < N; ++i) {
    const int hi = HexDigit(text[2 * i]), lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

void AppendHex(const uint8_t* bytes, size_t n, std::string& out) {
  constexpr char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
}

bool LowerAlpha(char c) { return c >= 'a' && c <= 'z'; }
bool Digit(char c) { return c >= '0' && c <= '9'; }
bool KeyChar(char c) {
  return LowerAlpha(c) || Digit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

// simple-key = lcalpha 0*255(keychar); multi-tenant-key = tenant-id "@" system-id, tenant-id =
// (lcalpha / DIGIT) 0*240(keychar), system-id = lcalpha 0*13(keychar).
bool ValidKey(std::string_view key) {
  const auto rest_ok = [](std::string_view s) { return std::all_of(s.begin(), s.end(), KeyChar); };
  const size_t at = key.find('@');
  if (at == std::string_view::npos) {
    return !key.empty() && key.size() <= 256 && LowerAlpha(key[0]) && rest_ok(key.substr(1));
  }
  const std::string_view tenant = key.substr(0, at), system = key.substr(at + 1);
  return !tenant.empty() && tenant.size() <= 241 && (LowerAlpha(tenant[0]) || Digit(tenant[0])) &&
         rest_ok(tenant.substr(1)) && !system.empty() && system.size() <= 14 &&
         LowerAlpha(system[0]) && rest_ok(system.substr(1));
}

// value = 0*255(chr) nblk-chr; chr = %x20 / nblk-chr; nblk-chr = %x21-2B / %x2D-3C / %x3E-7E.
bool ValidValue(std::string_view value) {
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7e && c != ',' && c != '='; });
}

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<TraceParent> ParseTraceParent(std::string_view value) {
  if (value.size() < kVersion00Size || value[2] != '-' || value[35] != '-' || value[52] != '-') {
    return std::nullopt;
  }
  std::array<uint8_t, 1> version{}, flags{};
  TraceParent parent;
  if (!DecodeHex(value.substr(0, 2), version) || version[0] == 0xff ||
      !DecodeHex(value.substr(3, 32), parent.trace_id) ||
      !DecodeHex(value.substr(36, 16), parent.parent_id) ||
      !DecodeHex(value.substr(53, 2), flags) || AllZero(parent.trace_id) ||
      AllZero(parent.parent_id)) {
    return std::nullopt;
  }
  if (value.size() > kVersion00Size && (version[0] == 0 || value[kVersion00Size] != '-')) {
    return std::nullopt;
  }
  parent.flags = flags[0];
  return parent;
}

std::string FormatTraceParent(const TraceParent& parent) {
  std::string out = "00-";
  out.reserve(kVersion00Size);
  AppendHex(parent.trace_id.data(), parent.trace_id.size(), out);
  out += '-';
  AppendHex(parent.parent_id.data(), parent.parent_id.size(), out);
  out += '-';
  AppendHex(&parent.flags, 1, out);
  return out;
}

std::optional<std::string> ParseTraceState(std::string_view value) {
  std::vector<std::string_view> keys;
  std::string out;
  while (true) {
    const size_t comma = value.find(',');
    const std::string_view member = TrimBlanks(value.substr(0, comma));
    if (!member.empty()) {
      const size_t eq = member.find('=');
      if (eq == std::string_view::npos) return std::nullopt;
      const std::string_view key = member.substr(0, eq);
      if (!ValidKey(key) || !ValidValue(member.substr(eq + 1)) ||
          std::find(keys.begin(), keys.end(), key) != keys.end() || keys.size() == kMaxMembers) {
        return std::nullopt;
      }
      keys.push_back(key);
      if (!out.empty()) out += ',';
      out.append(member);
    }
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace sluice::util
