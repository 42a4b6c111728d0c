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

// The value of query parameter `name`, percent-decoded ('+' is a space); nullopt if absent.
std::optional<std::string> QueryParam(const HttpRequest& request, std::string_view name) {
  const std::string_view target(request.target().data(), request.target().size());
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest.remove_prefix(amp == std::string_view::npos ? rest.size() : amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    const std::string_view raw = eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    std::string value;
    for (size_t i = 0; i < raw.size(); ++i) {
      const auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
        value += static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
        i += 2;
      } else {
        value += raw[i] == '+' ? ' ' : raw[i];
      }
    }
    return value;
  }
  return std::nullopt;
}

void SpanAnswered(trace::Span& span, const HttpResponse& response) {
  span.Set("http.response.status_code", static_cast<int64_t>(response.result_int()));
  if (response.result_int() >= 500) span.SetError(std::string(response.reason()));
}

}  // namespace sluice::http
