#include "http/transport/wire.h"

#include <string_view>

namespace sluice::http {

void SerializeHeader(const HttpResponse& response, unsigned version, bool keep_alive,
                     Framing framing, uint64_t content_length, std::string* out) {
  using namespace std::string_view_literals;  // literals without a strlen per append (per answer)
  out->clear();
  const unsigned code = response.result_int();
  out->append(version == 10 ? "HTTP/1.0 "sv : "HTTP/1.1 "sv);
  AppendDecimal(code, out);
  out->push_back(' ');
  const auto reason = response.reason();
  out->append(reason.data(), reason.size());
  out->append("\r\n"sv);
  for (const auto& field : response) {
    const beast_http::field name = field.name();
    if (name == beast_http::field::content_length || name == beast_http::field::connection ||
        name == beast_http::field::transfer_encoding) {
      continue;
    }
    const auto name_text = field.name_string();
    const auto value = field.value();
    out->append(name_text.data(), name_text.size());
    out->append(": "sv);
    out->append(value.data(), value.size());
    out->append("\r\n"sv);
  }
  out->append(response.appended_fields());
  if (!WithoutContent(code)) {
    if (framing == Framing::kLength) {
      out->append("Content-Length: "sv);
      AppendDecimal(content_length, out);
      out->append("\r\n"sv);
    } else if (framing == Framing::kChunked) {
      out->append("Transfer-Encoding: chunked\r\n"sv);
    }
  }
  if (!keep_alive) {
    out->append("Connection: close\r\n"sv);
  } else if (version == 10) {
    out->append("Connection: keep-alive\r\n"sv);
  }
  out->append("\r\n"sv);
}

bool HasOneHost(const HttpRequest& request) {
  // One walk over the fields' list comparing their known-name codes: cheaper than find(), which
  // looks the name up as text with a case-insensitive comparison at every step.
  int hosts = 0;
  for (const auto& field : request) hosts += field.name() == beast_http::field::host ? 1 : 0;
  return hosts == 1;
}

}  // namespace sluice::http
