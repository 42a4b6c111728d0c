// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and `tracestate`
// fields that carry a distributed trace across HTTP requests and gRPC calls (Envoy sends both),
// parsed as the recommendation's receivers must and written back for the next hop.
//
//   traceparent: VERSION-TRACEID-PARENTID-FLAGS, lowercase hex of 2, 32, 16 and 2 digits, e.g.
//                00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
//   tracestate:  up to 32 `key=value` list members, comma-separated, passed on as received
//
// Thread safety: pure functions of their arguments. Nothing here allocates but the strings it
// returns.

#ifndef SLUICE_UTIL_TRACE_CONTEXT_H_
#define SLUICE_UTIL_TRACE_CONTEXT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::util {

struct TraceParent {
  std::array<uint8_t, 16> trace_id{};  // never all zero in a parsed one
  std::array<uint8_t, 8> parent_id{};  // the caller's span; never all zero in a parsed one
  uint8_t flags = 0;                   // bit 0: sampled

  bool sampled() const { return (flags & 1) != 0; }
  friend bool operator==(const TraceParent&, const TraceParent&) = default;
};

// A `traceparent` value, or nullopt when it is not one: not lowercase hex in the right places,
// an all-zero trace or parent id, version ff, or a version-00 value of other than 55 characters.
// A later version is read by version 00's layout, with anything after its 55 characters
// ignored when it starts with '-' (the recommendation's rule for versions it does not know).
std::optional<TraceParent> ParseTraceParent(std::string_view value);

// The version-00 value of `parent` (55 characters).
std::string FormatTraceParent(const TraceParent& parent);

// A `tracestate` value checked against the recommendation's grammar: at most 32 list members,
// each `key=value` with a key of lowercase letters, digits and _-*/ (or tenant@system) and a
// value of printable ASCII but ',' and '=' (no trailing space), none twice; empty members and
// the blanks around members are dropped. The value as it is to be passed on (members joined by
// ','), or nullopt when any member is invalid: the whole field is then discarded.
std::optional<std::string> ParseTraceState(std::string_view value);

}  // namespace sluice::util

#endif  // SLUICE_UTIL_TRACE_CONTEXT_H_
