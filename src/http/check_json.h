// The JSON codec of sluice's own check API, `POST /v1/check`: request bodies to engine::Request,
// engine::Response to response bodies, and the `{"error": ...}` body of a 400. Pure functions:
// no I/O, no clock, no exceptions; safe for concurrent use. Parsing uses simdjson's DOM parser:
// one per thread for bodies up to 64 KiB (it keeps its buffers, about 15 bytes per body byte),
// a fresh one for a larger body (its buffers are freed on return).
//
// Request (every field there is; nothing else is accepted):
//
//   {"domain": "api",                                   required, non-empty string
//    "descriptors": [                                   required, non-empty array
//      {"entries": [{"key": "k", "value": "v"}, ...],   required, non-empty; key non-empty
//       "limit": {"requests_per_unit": 10,              optional: an override (RLS
//                 "unit": "minute"},                      RateLimitOverride), fixed window
//       "hits_addend": 2},                              optional: this descriptor's cost
//      ...],
//    "cost": 1}                                         optional, default 1
//
//  - Unknown fields are rejected (400), as envoyproxy/ratelimit's `/json` does, so a misspelt
//    field ("decsriptors", "hits_adend") is an error rather than a silently ignored option. There
//    is no top-level `hits_addend`: the request's cost is `cost` (see below for why).
//  - A field given twice in one object is rejected.
//  - `null` for an optional field (`limit`, `hits_addend`, `cost`) means "absent".
//  - Numbers (`cost`, `hits_addend`, `requests_per_unit`) are integers written without a fraction
//    or an exponent, 0 .. 4294967295 (uint32, as in RLS).
//  - `cost` 0 looks without consuming (a peek) on every descriptor without its own `hits_addend`;
//    a descriptor's `hits_addend` 0 peeks that descriptor. The same number means the same thing
//    at both levels. (RLS's request-level hits_addend counts 0 as 1; that is why this API does
//    not take it under that name.)
//  - `unit` is second, minute, hour, day, week, month (30 days) or year (365 days),
//    case-insensitive (RLS's "MINUTE" works); kept as received. `requests_per_unit` 0 is valid and
//    denies everything, as in RLS.
//  - Entry `value` is required but may be empty. Keys and values are opaque bytes: any valid
//    UTF-8, escapes decoded (simdjson rejects invalid UTF-8 and bad escapes).
//  - Size: the domain and each entry key and each entry value are at most `max_key_bytes` bytes
//    once decoded (http.max_key_bytes, default 4096), each on its own; at most 64 descriptors,
//    each of at most 32 entries (engine::kMaxRequestDescriptors, kMaxDescriptorEntries).
//
// Errors are InvalidArgument with a message "<where>: <problem>", where <where> is a path into
// the body ("descriptors[1].entries[0].key: missing") or "body" for the document as a whole
// ("body: not valid JSON: ..."). Client text quoted in a message (unknown field names, units) is
// cut to 64 bytes.
//
// Response (compact, fields in this order, every field always present):
//
//   {"allowed":true,"statuses":[{"name":"...","limit":10,"remaining":9,"reset_after_ms":6000,
//    "retry_after_ms":0}, ...]}
//
// One status per request descriptor, in request order, reporting that descriptor's most
// restrictive applied limit (DescriptorResult::headline):
//  - name: the limit's `name:` if set, else "<N>-per-<window>" from its definition ("10-per-1m",
//    FormatDuration spelling; also for a limit sent with the request): the same names as the
//    IETF RateLimit-Policy items of headers/rate_limit_headers.h, which reveal no descriptor value.
//    "" when the descriptor has no limit.
//  - limit: the limit's N (requests per window) as an integer; `null` when the descriptor has no
//    limit (no rule matched, an `unlimited` rule, no plan).
//  - remaining: the limit's remaining (never negative); -1 when there is no limit.
//  - reset_after_ms: time until the limit's state is back to its initial state, in milliseconds
//    rounded up; 0 when there is no limit.
//  - retry_after_ms: 0 when the limit allowed the request (or is in shadow mode, or there is no
//    limit); else the wait in milliseconds rounded up, at least 1; -1 when it can never be
//    admitted (cost above the capacity, N = 0).
// `allowed` is the engine's overall answer (the caller turns it into 200 / 429). An unknown
// domain, when the caller lets it through, is allowed with a no-limit status per descriptor.

#ifndef SLUICE_HTTP_CHECK_JSON_H_
#define SLUICE_HTTP_CHECK_JSON_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "util/json_string.h"

namespace sluice::http {

// Parses a `/v1/check` body (see above). Never reads outside `body`; any input, however
// malformed, gives either a Request or an InvalidArgument naming the problem.
absl::StatusOr<engine::Request> ParseCheckRequest(std::string_view body, size_t max_key_bytes);

// The response body for `response` (see above).
std::string RenderCheckResponse(const engine::Response& response);
// The same, appended to `*out` (not owned; must not be null).
void AppendCheckResponse(std::string* out, const engine::Response& response);

// `{"error":"<message>"}`, the body of a 400.
std::string RenderError(std::string_view message);

// The `name` of a descriptor's status (see above).
std::string StatusName(const engine::DescriptorResult& result);

// util::AppendJsonString, which this file's answers are written with.
using util::AppendJsonString;

}  // namespace sluice::http

#endif  // SLUICE_HTTP_CHECK_JSON_H_
