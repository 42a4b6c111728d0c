// JSON strings: the one writer every JSON this project produces by hand goes through (/v1/check
// answers and errors, /json's protojson form, a rule's metadata as JSON).

#ifndef SLUICE_UTIL_JSON_STRING_H_
#define SLUICE_UTIL_JSON_STRING_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::util {

// Appends `text` to `out` as a JSON string, quotes included: `"` and `\` escaped, control
// characters as \n, \t, ... or \u00XX, valid UTF-8 passed through byte for byte, and each byte
// of an invalid UTF-8 sequence replaced by \ufffd, so the output is always valid JSON.
void AppendJsonString(std::string* out, std::string_view text);

// The end of the run of bytes from `from` on that go into a JSON string as they are (no control
// character, quote, backslash or non-ASCII byte): a writer that finds the whole text plain can
// copy it between quotes itself.
size_t PlainJsonRunEnd(std::string_view text, size_t from);

}  // namespace sluice::util

#endif  // SLUICE_UTIL_JSON_STRING_H_
