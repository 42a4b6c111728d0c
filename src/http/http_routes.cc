#include "http/http_routes.h"

#include <algorithm>
#include <optional>

#include "absl/base/attributes.h"
#include "absl/utility/utility.h"
#include "fmt/format.h"
#include "http/costs.h"
#include "rules/parsers.h"

namespace sluice::http {
namespace {

using rules::HttpAction;

std::string_view View(boost::beast::string_view s) { return {s.data(), s.size()}; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool Contains(const rules::Cidr& cidr, const rules::Cidr& address) {
  const int full = cidr.prefix_bits / 8;
  if (!std::equal(cidr.address.begin(), cidr.address.begin() + full, address.address.begin())) {
    return false;
  }
  const int rest = cidr.prefix_bits % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<uint8_t>(0xFF << (8 - rest));
  return (cidr.address[full] & mask) == (address.address[full] & mask);
}

// A single address (no /prefix), as a /32 or /128; nullopt if it is not one.
std::optional<rules::Cidr> ParseAddress(std::string_view text) {
  if (text.find('/') != std::string_view::npos) return std::nullopt;
  return rules::ParseCidr(text);
}

bool Trusted(const rules::Cidr& address, const std::vector<rules::Cidr>& trusted) {
  return std::any_of(trusted.begin(), trusted.end(),
                     [&](const rules::Cidr& c) { return Contains(c, address); });
}

const rules::HttpRoute* FindRoute(const rules::HttpSection& http, std::string_view method,
                                  std::string_view path) {
  for (const rules::HttpRoute& route : http.routes) {
    const bool path_matches =
        !route.path.empty() ? path == route.path : path.starts_with(route.prefix);
    if (!path_matches) continue;
    if (!route.methods.empty() &&
        std::find(route.methods.begin(), route.methods.end(), method) == route.methods.end()) {
      continue;
    }
    return &route;
  }
  return nullptr;
}

// A rate_limits entry's cost for the descriptor just built (the last of `request`, the `r`-th
// request): its reserve read from the request as its hits_addend (at least 1: 0 would look
// without consuming, and leave nothing to settle), and the descriptor listed in `checks`.
ABSL_ATTRIBUTE_NOINLINE void ApplyCost(const rules::RouteCost& cost, const HttpRequest* original,
                                       size_t r, engine::Request& request, RouteChecks& checks) {
  std::optional<std::string_view> header;
  std::string_view body;
  if (original != nullptr) {
    if (cost.reserve.kind == rules::CostSource::Kind::kHeader)
      header = FieldOf(*original, cost.reserve.name);
    body = original->body();
  }
  const uint64_t reserve = ReadCost(cost.reserve, header, body).value_or(cost.reserve.fallback);
  request.descriptors.back().hits_addend = std::max<uint64_t>(1, reserve);
  checks.costed.push_back(
      {.request = r, .descriptor = request.descriptors.size() - 1, .cost = &cost});
}

}  // namespace

bool ReadsRequestBody(const rules::Config& config, std::string_view method, std::string_view path) {
  if (!config.routes_read_bodies) return false;
  for (const auto& domain : config.domains) {
    if (!domain->http) continue;
    const rules::HttpRoute* route = FindRoute(*domain->http, method, path);
    if (route != nullptr && route->reads_body) return true;
  }
  return false;
}

std::string ClientAddress(std::string_view peer, const std::vector<std::string_view>& forwarded,
                          const std::vector<rules::Cidr>& trusted) {
  if (trusted.empty()) return std::string(peer);
  const std::optional<rules::Cidr> peer_address = ParseAddress(peer);
  if (!peer_address || !Trusted(*peer_address, trusted)) return std::string(peer);
  std::string_view client = peer;
  // Hops from the nearest (rightmost) to the farthest; each was added by the one before it.
  for (auto field = forwarded.rbegin(); field != forwarded.rend(); ++field) {
    std::string_view rest = *field;
    while (!rest.empty()) {
      const size_t comma = rest.rfind(',');
      const std::string_view hop =
          Trim(comma == std::string_view::npos ? rest : rest.substr(comma + 1));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(0, comma);
      if (hop.empty()) continue;
      const std::optional<rules::Cidr> address = ParseAddress(hop);
      if (!address) return std::string(client);  // garbage: stop at the last good hop
      client = hop;
      if (!Trusted(*address, trusted)) return std::string(client);
    }
  }
  return std::string(client);  // every hop trusted: the farthest one
}

absl::StatusOr<RouteChecks> BuildRouteChecks(const rules::Config& config,
                                             const OriginalRequest& original) {
  // Built in the object returned (one named result, returned on every path), so that the
  // requests are not moved on the way out: this runs for every request.
  absl::StatusOr<RouteChecks> result(absl::in_place);
  RouteChecks& checks = *result;
  // X-Forwarded-For is looked up only for a remote_address action (the first one).
  std::optional<std::vector<std::string_view>> forwarded;
  const auto forwarded_values = [&]() -> const std::vector<std::string_view>& {
    if (!forwarded) {
      forwarded.emplace();
      if (original.headers != nullptr) {
        auto range = original.headers->equal_range("X-Forwarded-For");
        for (auto it = range.first; it != range.second; ++it) {
          forwarded->push_back(View(it->value()));
        }
      }
    }
    return *forwarded;
  };
  for (const auto& domain : config.domains) {
    if (!domain->http) continue;
    const rules::HttpSection& http = *domain->http;
    const rules::HttpRoute* route = FindRoute(http, original.method, original.path);
    if (route == nullptr) continue;
    std::optional<std::string> client;  // computed on first use
    // Built in place (this runs for every request): entries are filled where they will stay,
    // and what turns out empty is dropped again.
    engine::Request& request = checks.requests.emplace_back();
    request.domain = domain->name;
    request.descriptors.reserve(route->rate_limits.size());
    for (size_t k = 0; k < route->rate_limits.size(); ++k) {
      const std::vector<HttpAction>& actions = route->rate_limits[k];
      engine::Descriptor& descriptor = request.descriptors.emplace_back();
      descriptor.entries.reserve(actions.size());
      bool skip = false;
      for (const HttpAction& action : actions) {
        std::string& value = descriptor.entries.emplace_back().value;
        switch (action.kind) {
          case HttpAction::Kind::kRequestHeaders: {
            const auto it = original.headers == nullptr
                                ? HttpRequest::const_iterator()
                                : original.headers->find(action.header_name);
            if (original.headers == nullptr || it == original.headers->end()) {
              skip = true;
            } else {
              value.assign(View(it->value()));
            }
            break;
          }
          case HttpAction::Kind::kRemoteAddress:
            if (!client) {
              client = ClientAddress(original.peer, forwarded_values(), http.trusted_proxies);
            }
            value = *client;
            break;
          case HttpAction::Kind::kGenericKey:
            value = action.descriptor_value;
            break;
          case HttpAction::Kind::kPath:
            value.assign(original.path);
            break;
          case HttpAction::Kind::kMethod:
            value.assign(original.method);
            break;
        }
        if (skip) break;
        if (value.size() > config.settings.max_key_bytes) {
          result = absl::InvalidArgumentError(fmt::format(
              "the value for descriptor key '{}' is {} bytes, longer than the maximum of {} "
              "(http.max_key_bytes)",
              action.descriptor_key, value.size(), config.settings.max_key_bytes));
          return result;
        }
        descriptor.entries.back().key = action.descriptor_key;
      }
      if (skip || descriptor.entries.empty()) {
        request.descriptors.pop_back();
      } else if (!route->costs.empty() && route->costs[k]) {
        ApplyCost(*route->costs[k], original.headers, checks.requests.size() - 1, request, checks);
      }
    }
    if (request.descriptors.empty()) {
      checks.requests.pop_back();
      continue;
    }
    checks.sections.push_back(&http);
  }
  return result;
}

}  // namespace sluice::http
