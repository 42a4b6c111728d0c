#include "util/hex.h"

#include <iterator>

#include "fmt/format.h"

namespace sluice::util {

std::string Hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char c : bytes) fmt::format_to(std::back_inserter(out), "{:02x}", c);
  return out;
}

std::optional<std::string> Unhex(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out(text.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned value = 0;
    const char* at = text.data() + 2 * i;
    if (std::from_chars(at, at + 2, value, 16).ptr != at + 2) return std::nullopt;
    out[i] = static_cast<char>(value);
  }
  return out;
}

}  // namespace sluice::util
