#include "engine/configured_limits.h"

#include "absl/container/flat_hash_set.h"
#include "engine/engine.h"

namespace sluice::engine {
namespace {

struct Collector {
  const std::string* domain;
  absl::flat_hash_set<std::string> seen;
  std::vector<ConfiguredLimit>* out;

  void Add(const rules::LimitRule& rule) {
    std::string label = LimitName(rule.name, rule.limit);
    if (!seen.insert(label).second) return;
    out->push_back({*domain, std::move(label), rule.limit.requests, rule.limit.window_us});
  }
  void Walk(const rules::RuleNode& node) {
    for (const rules::LimitRule& rule : node.limits) Add(rule);
    for (const auto& child : node.children) Walk(*child);
  }
};

}  // namespace

std::vector<ConfiguredLimit> ConfiguredLimits(const rules::Config& config) {
  std::vector<ConfiguredLimit> out;
  for (const auto& domain : config.domains) {
    Collector collector{.domain = &domain->name, .seen = {}, .out = &out};
    collector.Walk(domain->root);
    for (const auto& [name, plan] : domain->plans) {
      for (const rules::LimitRule& rule : plan.limits) collector.Add(rule);
    }
  }
  return out;
}

}  // namespace sluice::engine
