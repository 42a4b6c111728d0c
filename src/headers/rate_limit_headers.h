// Rate-limit response headers: an engine::Response rendered as HTTP header fields
// (X-RateLimit-*, the IETF RateLimit-Policy / RateLimit fields, Retry-After).
//
// Both frontends send them (HTTP on its answers, RLS in response_headers_to_add), so they live
// below both, in src/headers, and neither frontend includes the other.
//
// Thread safety: pure functions of their arguments; safe to call from any thread.
// Units: times are whole seconds, rounded up; integers are clamped to the sf-integer range.
//
// Design: docs/http-api.md#header-rules (each field's exact rule, names, order, clamping).

#ifndef SLUICE_HEADERS_RATE_LIMIT_HEADERS_H_
#define SLUICE_HEADERS_RATE_LIMIT_HEADERS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace sluice::render {

// Which header families to send (the `headers:` setting). Retry-After does not depend on them.
struct HeaderStyles {
  bool x_ratelimit = true;  // X-RateLimit-Limit/-Remaining/-Reset
  bool ietf = true;         // RateLimit-Policy and RateLimit

  friend bool operator==(const HeaderStyles&, const HeaderStyles&) = default;
};

// Parses the `headers:` list: any of "x_ratelimit" and "ietf", or just "none". An empty list is
// the same as "none"; repeats are harmless. Unknown names and "none" combined with another style
// are InvalidArgument.
absl::StatusOr<HeaderStyles> ParseHeaderStyles(std::span<const std::string> names);

// Retry-After and `t` for a limit that can never admit the request (Decision::kNever): retrying
// cannot help until the configuration changes, so ask well-behaved clients to stay away for a day
// rather than retry every window.
inline constexpr int64_t kNeverRetryAfterSeconds = 86400;

// The largest value sent in any field (RFC 9651 §3.3.1 sf-integer: at most 15 digits).
inline constexpr int64_t kMaxFieldInteger = 999'999'999'999'999;

struct Header {
  std::string name;
  std::string value;

  friend bool operator==(const Header&, const Header&) = default;
};

// Calls `emit(name, value)` once per header field, in the order X-RateLimit-Limit,
// X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit-Policy, RateLimit, Retry-After (each only
// when due, see above). The views are valid only during the call. No heap allocation for up to
// 8 applied limits whose IETF fields fit in 500 bytes (inline buffers), which is the usual case.
void ForEachRateLimitHeader(
    const engine::Response& response, const HeaderStyles& styles,
    absl::FunctionRef<void(std::string_view name, std::string_view value)> emit);

// The same fields as text, "Name: value\r\n" each, appended to `*out` (not owned; must not be
// null): what the HTTP server writes.
void AppendRateLimitFieldLines(const engine::Response& response, const HeaderStyles& styles,
                               std::string* out);

// The same fields appended to `*out` (not owned; must not be null).
void AppendRateLimitHeaders(const engine::Response& response, const HeaderStyles& styles,
                            std::vector<Header>* out);

}  // namespace sluice::render

#endif  // SLUICE_HEADERS_RATE_LIMIT_HEADERS_H_
