// The key a descriptor's state is kept under, as the engine writes it for every request: each
// entry's key and value (a shared wildcard's pattern in place of the value) length-prefixed, so
// no two entry lists give the same key whatever bytes they hold. Written by hand into one
// buffer per batch, sized exactly first: no string per key, no format string to parse.
//
// Thread safety: pure functions. Units: bytes.

#ifndef SLUICE_ENGINE_STATE_KEY_H_
#define SLUICE_ENGINE_STATE_KEY_H_

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "absl/container/inlined_vector.h"
#include "engine/engine.h"
#include "rules/config.h"

namespace sluice::engine {

// A batch's state keys, written one after another into one buffer; a key is its place there.
// Inline room for the usual request (a descriptor or two), so that building keys allocates
// nothing.
using KeyBytes = absl::InlinedVector<char, 256>;
struct KeyPlace {
  size_t offset = 0;
  size_t size = 0;
};

inline size_t DecimalDigits(size_t n) {
  size_t digits = 1;
  for (; n >= 10; n /= 10) ++digits;
  return digits;
}

// Copies `part` to `out`, returns the end of the copy: std::copy, with the short parts most keys
// are made of (a few bytes) copied here in one or two moves rather than by a call to memmove.
inline char* CopyPart(const std::string& part, char* out) {
  const size_t n = part.size();
  const char* in = part.data();
  if (n > 16) return std::copy(in, in + n, out);
  const auto move_ends = [in, out, n](auto word) {  // two words, overlapping when n < 2 words
    constexpr size_t w = sizeof word;
    decltype(word) first, last;
    std::memcpy(&first, in, w);
    std::memcpy(&last, in + n - w, w);
    std::memcpy(out, &first, w);
    std::memcpy(out + n - w, &last, w);
  };
  if (n >= 8) {
    move_ends(uint64_t{});
  } else if (n >= 4) {
    move_ends(uint32_t{});
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = in[i];
  }
  return out + n;
}

// Appends to `out` the key a descriptor's state is kept under: its entries, with a shared
// wildcard's pattern in place of the value (share_threshold); `path` holds the node matched at
// each level (empty for a limit override). Each part is length-prefixed, so no two different
// entry lists give the same key whatever bytes the values hold.
// Written by hand into the batch's buffer, sized exactly first (no string per key, no format
// string to parse): it is made for every request.
inline KeyPlace AppendStateKey(std::span<const Entry> entries,
                               std::span<const rules::RuleNode* const> path, KeyBytes& out) {
  const auto value_of = [&](size_t i) -> const std::string& {
    const bool shared = i < path.size() && path[i]->share_threshold;
    return shared ? path[i]->value : entries[i].value;
  };
  const auto part_size = [](const std::string& part) {
    return DecimalDigits(part.size()) + 1 + part.size();  // "<length>:<part>"
  };
  size_t size = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    size += part_size(entries[i].key) + part_size(value_of(i));
  }
  const size_t offset = out.size();
  out.resize(offset + size);
  char* cursor = out.data() + offset;
  char* const end = cursor + size;
  const auto append_part = [&cursor, end](const std::string& part) {
    cursor = std::to_chars(cursor, end, part.size()).ptr;
    *cursor++ = ':';
    cursor = CopyPart(part, cursor);
  };
  for (size_t i = 0; i < entries.size(); ++i) {
    append_part(entries[i].key);
    append_part(value_of(i));
  }
  return {offset, size};
}

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_STATE_KEY_H_
