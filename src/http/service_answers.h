// Small pieces of the HTTP service's answers, shared by its files (service*.cc).

#ifndef SLUICE_HTTP_SERVICE_ANSWERS_H_
#define SLUICE_HTTP_SERVICE_ANSWERS_H_

#include <optional>
#include <string>
#include <string_view>

#include "http/transport/server.h"
#include "trace/tracer.h"

namespace sluice::http {

// The answer `status` with `body`, as JSON or as plain text.
void SetJson(HttpResponse& response, beast_http::status status, std::string body);
void SetText(HttpResponse& response, beast_http::status status, std::string body);

// The path of a request target, without the query.
std::string_view PathOf(const HttpRequest& request);

// The value of query parameter `name`, percent-decoded ('+' is a space); nullopt if absent.
std::optional<std::string> QueryParam(const HttpRequest& request, std::string_view name);

// 405 naming the methods `allowed` ("GET, DELETE").
void MethodNotAllowed(HttpResponse& response, const char* allowed);

// The answer's status on its request's span (a 5xx is the span's error; a 4xx is the client's).
void SpanAnswered(trace::Span& span, const HttpResponse& response);

}  // namespace sluice::http

#endif  // SLUICE_HTTP_SERVICE_ANSWERS_H_
