// A domain's `http:` section: the HTTP frontend's and the reverse proxy's settings (deny status,
// trusted proxies, upstream, refunds, routes and their actions), and the CIDRs it takes.

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "fmt/format.h"
#include "rules/parsers.h"

namespace sluice::rules {
namespace {

class HttpSectionParser {
 public:
  explicit HttpSectionParser(YamlReader& reader) : r_(reader) {}

  std::optional<HttpSection> Parse(const yaml::Node& http) {
    if (!r_.CheckMap(http, "http",
                     {"deny_status", "trusted_proxies", "routes", "upstream", "refund_on"})) {
      return std::nullopt;
    }
    HttpSection section;
    if (auto status = r_.Unsigned(http, "deny_status", 599)) {
      if (*status < 200) {
        r_.Error(http["deny_status"], "deny_status must be an HTTP status between 200 and 599");
      }
      section.deny_status = static_cast<int>(*status);
    }
    if (auto proxies = r_.Strings(http, "trusted_proxies")) {
      for (size_t i = 0; i < proxies->size(); ++i) {
        if (auto cidr = ParseCidr((*proxies)[i])) {
          section.trusted_proxies.push_back(*cidr);
        } else {
          r_.Error(http["trusted_proxies"][i],
                   fmt::format("bad address or CIDR '{}' in trusted_proxies", (*proxies)[i]));
        }
      }
    }
    if (auto upstream = r_.String(http, "upstream")) {
      if (upstream->rfind("http://", 0) != 0) {
        r_.Error(http["upstream"], "upstream must be an http:// URL");
      } else if (!ParseUpstream(*upstream, section)) {
        r_.Error(http["upstream"],
                 fmt::format("bad upstream '{}': give http://HOST[:PORT] (no path, no user info)",
                             *upstream));
      }
      section.upstream = *upstream;
    }
    if (auto refund = r_.Strings(http, "refund_on")) {
      for (size_t i = 0; i < refund->size(); ++i) {
        const std::string& what = (*refund)[i];
        if (what != "5xx" && what != "connect_error" && what != "timeout") {
          r_.Error(http["refund_on"][i],
                   fmt::format("unknown refund_on '{}' (5xx, connect_error, timeout)", what));
        }
      }
      section.refund_on = *refund;
    }
    if (const yaml::Node routes = http["routes"]; routes.IsDefined() && !routes.IsNull()) {
      if (r_.CheckSequence(routes, "routes")) {
        for (const yaml::Node& route : routes.items()) ParseRoute(route, section);
      }
    }
    return section;
  }

 private:
  // "http://HOST[:PORT][/]" -> section.upstream_host/port. HOST is a name, an IPv4 address or
  // a bracketed IPv6 address; PORT defaults to 80.
  static bool ParseUpstream(std::string_view url, HttpSection& section) {
    std::string_view rest = url.substr(7);  // after http://
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    if (rest.empty() || rest.find_first_of("/?#@ ") != std::string_view::npos) return false;
    std::string_view host = rest, port;
    if (rest.front() == '[') {
      const size_t close = rest.find(']');
      if (close == std::string_view::npos) return false;
      host = rest.substr(1, close - 1);
      const std::string_view after = rest.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') return false;
        port = after.substr(1);
      }
    } else if (const size_t colon = rest.find(':'); colon != std::string_view::npos) {
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      if (port.empty()) return false;
    }
    if (host.empty()) return false;
    unsigned value = 80;
    if (!port.empty()) {
      if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
        return false;
      }
      value = static_cast<unsigned>(std::stoul(std::string(port)));
      if (value == 0 || value > 65535) return false;
    }
    section.upstream_host = std::string(host);
    section.upstream_port = static_cast<uint16_t>(value);
    return true;
  }

  void ParseRoute(const yaml::Node& node, HttpSection& section) {
    if (!r_.CheckMap(node, "route", {"match", "rate_limits"})) return;
    HttpRoute route;
    route.position = r_.PositionOf(node);
    const yaml::Node match = node["match"];
    if (match.IsDefined() && r_.CheckMap(match, "match", {"prefix", "path", "methods"})) {
      route.prefix = r_.String(match, "prefix").value_or("");
      route.path = r_.String(match, "path").value_or("");
      if (!route.prefix.empty() && !route.path.empty()) {
        r_.Error(match, "match takes prefix or path, not both");
      }
      route.methods = r_.Strings(match, "methods").value_or(std::vector<std::string>{});
    }
    if (route.prefix.empty() && route.path.empty()) route.prefix.push_back('/');  // everything
    const yaml::Node limits = node["rate_limits"];
    if (limits.IsDefined() && r_.CheckSequence(limits, "rate_limits")) {
      for (const yaml::Node& item : limits.items()) {
        if (!r_.CheckMap(item, "rate_limits entry", {"actions", "cost"})) continue;
        const yaml::Node actions = item["actions"];
        if (!actions.IsDefined() || !r_.CheckSequence(actions, "actions")) {
          r_.Error(item, "a rate_limits entry needs a list of actions");
          continue;
        }
        std::vector<HttpAction> parsed;
        for (const yaml::Node& a : actions.items()) {
          if (auto action = ParseAction(a)) parsed.push_back(std::move(*action));
        }
        route.rate_limits.push_back(std::move(parsed));
        if (const yaml::Node cost = item["cost"]; cost.IsDefined()) {
          route.costs.resize(route.rate_limits.size());
          route.costs.back() = ParseCost(cost);
          route.reads_body =
              route.reads_body ||
              (route.costs.back() && route.costs.back()->reserve.kind == CostSource::Kind::kJson);
        }
      }
      if (!route.costs.empty()) route.costs.resize(route.rate_limits.size());
    }
    section.routes.push_back(std::move(route));
  }

  // A rate_limits entry's `cost: {reserve: SOURCE, settle: SOURCE}`.
  std::optional<RouteCost> ParseCost(const yaml::Node& node) {
    if (!r_.CheckMap(node, "cost", {"reserve", "settle"})) return std::nullopt;
    RouteCost cost;
    if (const yaml::Node reserve = node["reserve"]; reserve.IsDefined()) {
      auto source = ParseCostSource(reserve, "reserve", /*settle=*/false);
      if (!source) return std::nullopt;
      cost.reserve = *std::move(source);
    }
    if (const yaml::Node settle = node["settle"]; settle.IsDefined()) {
      cost.settle = ParseCostSource(settle, "settle", /*settle=*/true);
      if (!cost.settle) return std::nullopt;
      if (cost.settle->kind == CostSource::Kind::kFixed) {
        r_.Error(settle, "settle reads the answer: a header or a json field, not a fixed number");
        return std::nullopt;
      }
    }
    return cost;
  }

  // One of {fixed: N}, {header: NAME}, {json: dotted.path}, with `default: N` for a reserve.
  std::optional<CostSource> ParseCostSource(const yaml::Node& node, const char* what, bool settle) {
    const std::vector<std::string_view> keys =
        settle ? std::vector<std::string_view>{"fixed", "header", "json"}
               : std::vector<std::string_view>{"fixed", "header", "json", "default"};
    if (!r_.CheckMap(node, what, keys)) return std::nullopt;
    CostSource source;
    const int given = (node["fixed"].IsDefined() ? 1 : 0) + (node["header"].IsDefined() ? 1 : 0) +
                      (node["json"].IsDefined() ? 1 : 0);
    if (given != 1) {
      r_.Error(node, fmt::format("{} takes one of {}", what,
                                 settle ? "header, json" : "fixed, header, json"));
      return std::nullopt;
    }
    if (node["fixed"].IsDefined()) {
      source.kind = CostSource::Kind::kFixed;
      source.fixed = r_.Unsigned(node, "fixed", kMaxRequests).value_or(1);
    } else if (node["header"].IsDefined()) {
      source.kind = CostSource::Kind::kHeader;
      source.name = r_.String(node, "header").value_or("");
    } else {
      source.kind = CostSource::Kind::kJson;
      source.name = r_.String(node, "json").value_or("");
      for (size_t start = 0; start <= source.name.size();) {
        const size_t dot = std::min(source.name.find('.', start), source.name.size());
        if (dot == start) {
          r_.Error(node["json"], "json takes a dotted path of field names (usage.total_tokens)");
          return std::nullopt;
        }
        source.pointer += '/';
        source.pointer += source.name.substr(start, dot - start);
        start = dot + 1;
      }
    }
    if (source.kind != CostSource::Kind::kFixed && source.name.empty()) {
      r_.Error(node, fmt::format("{}: the header or field is empty", what));
      return std::nullopt;
    }
    source.fallback = r_.Unsigned(node, "default", kMaxRequests).value_or(1);
    return source;
  }

  std::optional<HttpAction> ParseAction(const yaml::Node& node) {
    static const std::vector<std::string_view> kKinds = {"request_headers", "remote_address",
                                                         "generic_key", "path", "method"};
    if (!r_.CheckMap(node, "action", kKinds)) return std::nullopt;
    if (node.size() != 1) {
      r_.Error(node,
               "an action has exactly one of request_headers, remote_address, "
               "generic_key, path, method");
      return std::nullopt;
    }
    const std::string kind = node.entries()[0].key.Scalar();
    const yaml::Node body = node.entries()[0].value;
    HttpAction action;
    const auto check = [&](const std::vector<std::string_view>& keys) {
      return body.IsNull() || r_.CheckMap(body, kind, keys);
    };
    if (kind == "request_headers") {
      action.kind = HttpAction::Kind::kRequestHeaders;
      if (!check({"header_name", "descriptor_key", "skip_if_absent"})) return std::nullopt;
      action.header_name = r_.String(body, "header_name").value_or("");
      action.descriptor_key = r_.String(body, "descriptor_key").value_or("");
      action.skip_if_absent = r_.Bool(body, "skip_if_absent").value_or(false);
      if (action.header_name.empty() || action.descriptor_key.empty()) {
        r_.Error(body, "request_headers needs header_name and descriptor_key");
        return std::nullopt;
      }
    } else if (kind == "remote_address") {
      action.kind = HttpAction::Kind::kRemoteAddress;
      if (!check({"descriptor_key"})) return std::nullopt;
      action.descriptor_key = body.IsNull()
                                  ? "remote_address"
                                  : r_.String(body, "descriptor_key").value_or("remote_address");
    } else if (kind == "generic_key") {
      action.kind = HttpAction::Kind::kGenericKey;
      if (!check({"descriptor_value", "descriptor_key"})) return std::nullopt;
      action.descriptor_value =
          body.IsNull() ? "" : r_.String(body, "descriptor_value").value_or("");
      action.descriptor_key =
          body.IsNull() ? "generic_key" : r_.String(body, "descriptor_key").value_or("generic_key");
      if (action.descriptor_value.empty()) {
        r_.Error(node, "generic_key needs a descriptor_value");
        return std::nullopt;
      }
    } else {
      const bool is_path = kind == "path";
      action.kind = is_path ? HttpAction::Kind::kPath : HttpAction::Kind::kMethod;
      if (!check({"descriptor_key"})) return std::nullopt;
      action.descriptor_key =
          body.IsNull() ? kind : r_.String(body, "descriptor_key").value_or(kind);
    }
    return action;
  }

  YamlReader& r_;
};

}  // namespace

std::optional<HttpSection> ParseHttpSection(YamlReader& reader, const yaml::Node& http) {
  return HttpSectionParser(reader).Parse(http);
}

std::optional<Cidr> ParseCidr(std::string_view text) {
  // inet_pton reads a C string: "10.0.0.1\0junk" would pass as 10.0.0.1.
  if (text.find('\0') != std::string_view::npos) return std::nullopt;
  std::string address(text);
  int bits = -1;
  if (const size_t slash = address.find('/'); slash != std::string::npos) {
    const std::string_view digits = std::string_view(address).substr(slash + 1);
    if (digits.empty() || digits.size() > 3 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    bits = std::stoi(std::string(digits));
    address.resize(slash);
  }
  Cidr cidr;
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    if (bits > 32) return std::nullopt;
    cidr.address[10] = cidr.address[11] = 0xFF;  // ::ffff:a.b.c.d
    std::memcpy(&cidr.address[12], &v4, 4);
    cidr.prefix_bits = 96 + (bits < 0 ? 32 : bits);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    if (bits > 128) return std::nullopt;
    std::memcpy(cidr.address.data(), &v6, 16);
    cidr.prefix_bits = bits < 0 ? 128 : bits;
  } else {
    return std::nullopt;
  }
  return cidr;
}

}  // namespace sluice::rules
