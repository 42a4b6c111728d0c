// The concurrency limits a request matches, and leases (holds.h).

#include "engine/holds.h"

#include <charconv>

#include "engine/state_key.h"
#include "fmt/format.h"
#include "rules/matcher.h"
#include "util/hex.h"

namespace sluice::engine {

std::string HoldName(const rules::ConcurrencyRule& rule);

HoldTargets MatchHolds(const rules::Config& config, const Request& request) {
  HoldTargets out;
  const rules::Domain* domain = config.FindDomain(request.domain);
  if (domain == nullptr) return out;
  struct Found {
    const rules::ConcurrencyRule* rule;
    size_t key;
  };
  std::vector<Found> found;
  for (const Descriptor& d : request.descriptors) {
    if (d.limit.has_value()) continue;
    std::vector<const rules::RuleNode*> path(d.entries.size());
    size_t depth = 0;
    const rules::RuleNode* node = rules::MatchDescriptor(*domain, d.entries, path, &depth);
    if (node == nullptr || node->concurrency.empty()) continue;
    KeyBytes bytes;
    const KeyPlace place = AppendStateKey(d.entries, std::span(path.data(), depth), bytes);
    out.keys.emplace_back(bytes.data() + place.offset, place.size);
    for (const rules::ConcurrencyRule& rule : node->concurrency) {
      found.push_back({&rule, out.keys.size() - 1});
    }
  }
  for (const Found& f : found) {  // (`keys` grows no more: the views stay valid)
    out.requests.push_back({.limit_id = f.rule->state_id,
                            .key = out.keys[f.key],
                            .n = f.rule->requests,
                            .max_hold_us = f.rule->max_hold_us});
    out.names.push_back(HoldName(*f.rule));
    out.on_failure.push_back(domain->failure_mode);
    out.domains.push_back(domain->name);
  }
  return out;
}

std::string HoldName(const rules::ConcurrencyRule& rule) {
  return rule.name.empty() ? fmt::format("{}-concurrent", rule.requests) : rule.name;
}

namespace {

void WalkHolds(const std::string& domain, const rules::RuleNode& node,
               std::vector<ConfiguredHold>& out) {
  for (const rules::ConcurrencyRule& rule : node.concurrency) {
    out.push_back({domain, HoldName(rule), rule.state_id, rule.max_hold_us});
  }
  for (const auto& child : node.children) WalkHolds(domain, *child, out);
}

}  // namespace

std::vector<ConfiguredHold> ConfiguredConcurrency(const rules::Config& config) {
  std::vector<ConfiguredHold> out;
  for (const auto& domain : config.domains) WalkHolds(domain->name, domain->root, out);
  return out;
}

namespace {

using util::Hex;
using util::Unhex;

}  // namespace

// Each hold as LIMIT_ID.HOLD_ID.MAX_HOLD_US.KEY (ids in hex, the key's bytes in hex), joined by
// '~'.
std::string EncodeLease(std::span<const backend::Hold> holds) {
  std::string out;
  for (const backend::Hold& h : holds) {
    if (!out.empty()) out += '~';
    out += fmt::format("{:x}.{:x}.{}.{}", h.limit_id, h.id, h.max_hold_us, Hex(h.key));
  }
  return out;
}

std::optional<std::vector<backend::Hold>> DecodeLease(std::string_view lease) {
  std::vector<backend::Hold> holds;
  while (!lease.empty()) {
    const size_t end = lease.find('~');
    std::string_view part = lease.substr(0, end);
    lease.remove_prefix(end == std::string_view::npos ? lease.size() : end + 1);
    std::string_view fields[4];
    for (size_t i = 0; i < 4; ++i) {
      const size_t dot = i < 3 ? part.find('.') : part.size();
      if (dot == std::string_view::npos) return std::nullopt;
      fields[i] = part.substr(0, dot);
      part.remove_prefix(std::min(part.size(), dot + 1));
    }
    const auto limit_id = util::ParseWhole<uint64_t>(fields[0], 16);
    const auto id = util::ParseWhole<uint64_t>(fields[1], 16);
    const auto max_hold = util::ParseWhole<int64_t>(fields[2], 10);
    auto key = Unhex(fields[3]);
    if (!limit_id || !id || !max_hold || *max_hold <= 0 || !key) return std::nullopt;
    holds.push_back({.limit_id = *limit_id,
                     .key = std::move(*key),
                     .id = *id,
                     .max_hold_us = *max_hold,
                     .expires_us = 0});
  }
  if (holds.empty()) return std::nullopt;
  return holds;
}

}  // namespace sluice::engine
