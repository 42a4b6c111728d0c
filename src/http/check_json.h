// The JSON codec of sluice's check API, `POST /v1/check`: request bodies to engine::Request,
// engine::Response to response bodies, and the `{"error": ...}` body of a 400.
//
// Thread safety: pure functions (no I/O, no clock, no exceptions), safe for concurrent use.
// Memory: simdjson's DOM parser, one kept per thread for bodies up to 64 KiB; a larger body gets
// a fresh one whose buffers are freed on return.
// Errors: InvalidArgument "<where>: <problem>", <where> a path into the body or "body".
// Units: counts are uint32; the response's times are milliseconds, rounded up.
//
// Design: docs/http-api.md#check-api-json (every field, bound and error of both bodies).

#ifndef SLUICE_HTTP_CHECK_JSON_H_
#define SLUICE_HTTP_CHECK_JSON_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "util/json_string.h"

namespace sluice::http {

// Parses a `/v1/check` body (see above). Never reads outside `body`; any input, however
// malformed, gives either a Request or an InvalidArgument naming the problem.
absl::StatusOr<engine::Request> ParseCheckRequest(std::string_view body, size_t max_key_bytes);
// A `/v1/reserve` body: a `/v1/check` body that may also say "for": a duration ("90s", "5m"),
// read into `*for_us` (left alone when absent).
absl::StatusOr<engine::Request> ParseReserveRequest(std::string_view body, size_t max_key_bytes,
                                                    std::optional<int64_t>* for_us);

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
