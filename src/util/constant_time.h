// Comparing secrets (the admin token) in a time that does not depend on where they differ, so
// that timing the answers to guesses cannot reveal a secret byte by byte.

#ifndef SLUICE_UTIL_CONSTANT_TIME_H_
#define SLUICE_UTIL_CONSTANT_TIME_H_

#include <cstddef>
#include <string_view>

namespace sluice::util {

// Whether `given` equals `secret`. Reads every byte of `given` whatever they hold: the time
// depends on the lengths only (the secret's length is not hidden from a caller who can vary
// the given one's).
inline bool ConstantTimeEquals(std::string_view given, std::string_view secret) {
  unsigned diff = given.size() == secret.size() ? 0U : 1U;
  if (secret.empty()) return given.empty();
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i]) ^
            static_cast<unsigned char>(secret[i % secret.size()]);
  }
  return diff == 0;
}

}  // namespace sluice::util

#endif  // SLUICE_UTIL_CONSTANT_TIME_H_
