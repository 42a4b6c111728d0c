// The HTTP/1.1 wire format of the server's side of a connection (RFC 9112): what Beast's request
// parser leaves to the server to check, and the answer's status line and header fields, which
// the server serializes itself so that an answer goes out as one gather write with its body
// (session_answer.cc). Pure functions; safe from any thread.

#ifndef SLUICE_HTTP_TRANSPORT_WIRE_H_
#define SLUICE_HTTP_TRANSPORT_WIRE_H_

#include <cstdint>
#include <iterator>
#include <string>

#include "http/transport/server.h"

namespace sluice::http {

// `value` in decimal, appended to `*out`.
inline void AppendDecimal(uint64_t value, std::string* out) {
  char digits[20];
  char* begin = std::end(digits);
  do {
    *--begin = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  out->append(begin, static_cast<size_t>(std::end(digits) - begin));
}

// `value` in lowercase hexadecimal (a chunk size, RFC 9112 §7.1), appended to `*out`.
inline void AppendHex(uint64_t value, std::string* out) {
  char digits[16];
  char* begin = std::end(digits);
  do {
    *--begin = "0123456789abcdef"[value % 16];
    value /= 16;
  } while (value != 0);
  out->append(begin, static_cast<size_t>(std::end(digits) - begin));
}

// 1xx, 204 and 304 answers carry no content (RFC 9110 §15.2, §15.3.5, §15.4.5).
inline bool WithoutContent(unsigned code) { return code / 100 == 1 || code == 204 || code == 304; }

// How the end of an answer's body is known (RFC 9112 §6.3).
enum class Framing { kLength, kChunked, kClose };

// Writes the status line and header fields of `response` into `*out` (replacing what it held):
// its field set, then its appended fields. Content-Length, Transfer-Encoding and Connection are the
// server's: any the handler set are replaced. The body is announced by `framing` (kLength:
// `content_length` bytes). An answer without content gets neither field; the answer to HEAD
// announces the body it would have had (RFC 9110 §9.3.2).
void SerializeHeader(const HttpResponse& response, unsigned version, bool keep_alive,
                     Framing framing, uint64_t content_length, std::string* out);

// RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host field. (Beast keeps fields of one
// name next to each other, in their order: the one after the first Host tells a second.)
bool HasOneHost(const HttpRequest& request);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_TRANSPORT_WIRE_H_
