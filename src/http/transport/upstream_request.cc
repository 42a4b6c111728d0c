// The request as sent upstream (hop-by-hop fields stripped, X-Forwarded-* set) and the upstream
// target's name in messages.

#include <boost/beast/core.hpp>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "http/transport/upstream_client.h"

namespace sluice::http {

namespace beast = boost::beast;

namespace {

std::string_view View(beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

std::string UpstreamTarget::Describe() const {
  return host.find(':') != std::string::npos ? fmt::format("http://[{}]:{}", host, port)
                                             : fmt::format("http://{}:{}", host, port);
}

template <class Allocator>
void StripHopByHop(beast_http::basic_fields<Allocator>& fields) {
  // Fields named by Connection are this hop's too (RFC 9110 §7.6.1).
  std::vector<std::string> named;
  auto range = fields.equal_range(beast_http::field::connection);
  for (auto it = range.first; it != range.second; ++it) {
    for (auto token : beast_http::token_list(it->value())) named.emplace_back(View(token));
  }
  for (const std::string& name : named) fields.erase(name);
  for (const char* name : {"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
                           "Transfer-Encoding", "Upgrade"}) {
    fields.erase(name);
  }
}

template void StripHopByHop(HttpFields& fields);
template void StripHopByHop(beast_http::fields& fields);

void PrepareUpstreamRequest(HttpRequest& request, std::string_view peer) {
  StripHopByHop(request.base());
  request.erase(beast_http::field::expect);
  request.erase(beast_http::field::content_length);  // set again from the body when sent
  // X-Forwarded-For: the hops so far, then the one this request came from.
  std::string forwarded;
  auto range = request.equal_range("X-Forwarded-For");
  for (auto it = range.first; it != range.second; ++it) {
    const std::string_view value = View(it->value());
    if (value.empty()) continue;
    if (!forwarded.empty()) forwarded += ", ";
    forwarded += value;
  }
  if (!forwarded.empty()) forwarded += ", ";
  forwarded += peer;
  request.set("X-Forwarded-For", forwarded);
  if (request.find("X-Forwarded-Proto") == request.end()) request.set("X-Forwarded-Proto", "http");
  if (request.find("X-Forwarded-Host") == request.end()) {
    if (auto host = request.find(beast_http::field::host); host != request.end()) {
      request.set("X-Forwarded-Host", host->value());
    }
  }
}

}  // namespace sluice::http
