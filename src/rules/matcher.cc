#include "rules/matcher.h"

namespace sluice::rules {

bool WildcardMatch(std::string_view pattern, std::string_view text) {
  // Iterative glob: remember the last '*' and retry from one character further on mismatch.
  size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

// The value `map` holds under `text`, or nullptr. A level of a rule tree mostly has a key or two
// and a few values: so few are compared in turn, which costs less than hashing `text`.
template <typename Map>
const typename Map::mapped_type* Find(const Map& map, const std::string& text) {
  constexpr size_t kScanned = 4;
  if (map.size() <= kScanned) {
    for (const auto& [key, value] : map) {
      if (key == text) return &value;
    }
    return nullptr;
  }
  auto it = map.find(absl::string_view(text.data(), text.size()));
  return it == map.end() ? nullptr : &it->second;
}

}  // namespace

const RuleNode* MatchLevel(const RuleNode& node, const Entry& entry, MatchKind* kind) {
  const RuleNode::KeyIndex* index = Find(node.index, entry.key);
  if (index == nullptr) return nullptr;
  if (const RuleNode* const* exact = Find(index->by_value, entry.value)) {
    *kind = MatchKind::kExact;
    return *exact;
  }
  for (const RuleNode* w : index->wildcards) {
    if (WildcardMatch(w->value, entry.value)) {
      *kind = MatchKind::kWildcard;
      return w;
    }
  }
  *kind = MatchKind::kKeyOnly;
  return index->any_value;
}

const RuleNode* MatchDescriptor(const Domain& domain, std::span<const Entry> entries,
                                std::span<const RuleNode*> path, size_t* depth) {
  const RuleNode* node = &domain.root;
  const RuleNode* result = nullptr;
  size_t matched = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    MatchKind kind;
    const RuleNode* child = MatchLevel(*node, entries[i], &kind);
    if (child == nullptr) break;
    if (matched < path.size()) path[matched] = child;
    ++matched;
    if (i + 1 == entries.size() && child->has_rate_limit) result = child;
    if (child->children.empty()) break;
    node = child;
  }
  if (depth != nullptr) *depth = matched;
  return result;
}

const RuleNode* MatchDescriptor(const Domain& domain, std::span<const Entry> entries,
                                std::vector<const RuleNode*>* path) {
  if (path == nullptr) return MatchDescriptor(domain, entries, {}, nullptr);
  path->resize(entries.size());  // room for every level
  size_t depth = 0;
  const RuleNode* result = MatchDescriptor(domain, entries, std::span(*path), &depth);
  path->resize(depth);
  return result;
}

PlanChoice ChoosePlan(const Domain& domain, const RuleNode& node, std::span<const Entry> entries) {
  PlanChoice choice;
  for (const Entry& e : entries) {
    if (e.key == node.plan_from) choice.named = &e;
  }
  if (choice.named != nullptr) {
    auto it = domain.plans.find(choice.named->value);
    if (it != domain.plans.end()) {
      choice.plan = &it->second;
      choice.source = PlanSource::kNamed;
      return choice;
    }
  } else if (domain.clients != nullptr && !entries.empty()) {
    // No plan in the request: look the client up by the value this rule matched.
    if (const Plan* plan = domain.clients->Find(entries.back().value)) {
      choice.plan = plan;
      choice.source = PlanSource::kClients;
      return choice;
    }
  }
  auto it = domain.plans.find(domain.default_plan);
  if (it != domain.plans.end()) choice.plan = &it->second;
  choice.source = PlanSource::kDefault;
  return choice;
}

}  // namespace sluice::rules
