// Rate-limit response headers: an engine::Response rendered as HTTP header fields.
//
// Both frontends send them: HTTP on its answers, RLS in response_headers_to_add. So they live
// below both (src/headers), and neither frontend includes the other.
//
// Two families, chosen by the `headers:` setting (docs/configuration.md), plus Retry-After:
//
//   X-RateLimit-Limit: 100          N of the most restrictive limit (Response::Headline())
//   X-RateLimit-Remaining: 0        Response::remaining, the lowest over every applied limit
//   X-RateLimit-Reset: 17           the headline limit's `t` (below): delta seconds, never epoch
//   RateLimit-Policy: "per-ip";q=100;w=1, "100-per-1d";q=100;w=86400
//   RateLimit: "per-ip";r=0;t=1, "100-per-1d";r=42;t=35000
//   Retry-After: 1                  on a deny only
//
// The IETF fields follow draft-ietf-httpapi-ratelimit-headers-08 … -10 (named policies, RFC 9651
// Structured Field Lists of sf-string Items with parameters q/w and r/t); this is the profile
// sluice's HTTP frontends send (docs/http-api.md, "Headers"). Exact rules:
//
// * `t` of one limit, in whole seconds rounded up: when its decision denied (enforced or shadow),
//   the wait until it would admit the request (Decision::retry_after_us); when it allowed, the
//   time until its state is back to the initial one (Decision::reset_after_us). A "never" denial
//   (Decision::kNever: cost above the capacity, or N == 0) reports kNeverRetryAfterSeconds.
//   X-RateLimit-Reset is the headline limit's `t`, so both families always agree.
// * Retry-After (RFC 9110 §10.2.3 delay-seconds) is sent on every deny (Response::allowed false),
//   whatever the styles: the largest `t` among the enforced denying limits, at least 1, so it
//   never points earlier than the `t` of a violated policy. Shadow-mode limits never deny: they
//   report r=0 as the engine does but do not lengthen Retry-After.
// * Policy names: the limit's `name`; for an unnamed limit "<N>-per-<window>" from its definition
//   ("100-per-1s", "10-per-250ms", FormatDuration spelling), which is stable across reloads and
//   reveals no descriptor value. Bytes outside printable ASCII become '?', `"` and `\` are
//   escaped (RFC 9651 §3.3.3), so a name can never break the field or inject a header.
// * Items are ordered most constrained first (the headline first, then enforced denials by
//   longest wait, then lowest remaining, then latest t). One item per name: a later item with the
//   same (sanitised) name, i.e. the same policy reached through another descriptor or plan, is
//   dropped, so the kept one is the most constrained and both fields list the same names.
// * `q` is the limit's N (requests per window; a token bucket's burst can make r exceed q);
//   `w` is the window in whole seconds rounded up, at least 1: a 250 ms window reports w=1, a
//   1.5 s window w=2 (the policy looks stricter than it is, never more permissive). No `qu`
//   (requests is the default) and no `pk` (privacy).
// * Integers are clamped to [0, 999999999999999] (the sf-integer range), in both families.
// * No applied limit (unknown domain, no rule matched, only `unlimited` rules): no header at all,
//   not even Retry-After.
//
// Pure functions of their arguments; safe to call from any thread.

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
