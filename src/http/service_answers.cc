#include "http/service_answers.h"

#include "fmt/format.h"

namespace sluice::http {

void SetJson(HttpResponse& response, beast_http::status status, std::string body) {
  response.result(status);
  response.set(beast_http::field::content_type, "application/json");
  response.body() = std::move(body);
}

void SetText(HttpResponse& response, beast_http::status status, std::string body) {
  response.result(status);
  response.set(beast_http::field::content_type, "text/plain; charset=utf-8");
  response.body() = std::move(body);
}

std::string_view PathOf(const HttpRequest& request) {
  const std::string_view target(request.target().data(), request.target().size());
  return target.substr(0, target.find('?'));
}

void MethodNotAllowed(HttpResponse& response, const char* allowed) {
  response.set(beast_http::field::allow, allowed);
  SetJson(response, beast_http::status::method_not_allowed,
          fmt::format("{{\"error\":\"method not allowed; use {}\"}}", allowed));
}

}  // namespace sluice::http
