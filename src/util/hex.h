// Bytes as hex digits and back, and whole numbers from text: for the tokens sluice hands out and
// reads back (a concurrency lease, a reservation), whose keys may hold any byte.

#ifndef SLUICE_UTIL_HEX_H_
#define SLUICE_UTIL_HEX_H_

#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace sluice::util {

// Two lower-case hex digits per byte.
std::string Hex(std::string_view bytes);
// The bytes of `text` (an even number of hex digits, either case), or nullopt.
std::optional<std::string> Unhex(std::string_view text);

// `text`, all of it, as a whole number in `base`; nullopt for empty text, anything else in it,
// or a value out of T's range.
template <typename T>
std::optional<T> ParseWhole(std::string_view text, int base = 10) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace sluice::util

#endif  // SLUICE_UTIL_HEX_H_
