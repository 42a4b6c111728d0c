// Matching a request descriptor against a domain's descriptor tree, exactly as
// envoyproxy/ratelimit does (GetLimit in its src/config/config_impl.go; docs/configuration.md):
// level by level, exact value > first matching wildcard (file order) > key-only; greedy, no
// backtracking; a rule applies only at the depth of the descriptor's last entry.
// Each level is one or two hash lookups; no rule scanning, no regular expressions.

#ifndef SLUICE_RULES_MATCHER_H_
#define SLUICE_RULES_MATCHER_H_

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rules/config.h"

namespace sluice::rules {

struct Entry {
  std::string key;
  std::string value;
  friend bool operator==(const Entry&, const Entry&) = default;
};

// The node that sets the descriptor's limits (has_rate_limit, at the last entry's depth), or
// nullptr. When `path` is given it receives the node matched at each level (up to the result).
const RuleNode* MatchDescriptor(const Domain& domain, std::span<const Entry> entries,
                                std::vector<const RuleNode*>* path = nullptr);

// The same, allocating nothing: the node matched at each level goes to path[0], path[1], ... as
// far as `path` has room (one node per entry is always enough), and *depth, when given,
// receives how many levels matched.
const RuleNode* MatchDescriptor(const Domain& domain, std::span<const Entry> entries,
                                std::span<const RuleNode*> path, size_t* depth);

enum class MatchKind { kExact, kWildcard, kKeyOnly };

// One level: the child of `node` that `entry` selects (exact value, else the first wildcard that
// matches, else the key-only child), or nullptr; *kind says which.
const RuleNode* MatchLevel(const RuleNode& node, const Entry& entry, MatchKind* kind);

// Where a `plan_from` rule's limits come from, for one descriptor (configuration.md, "Plans"):
// the plan its entry `plan_from` names, else (no such entry) the clients file's plan for the
// value the rule matched (the descriptor's last entry), else the domain's default_plan; a named
// plan the domain does not have falls back to the default_plan too.
enum class PlanSource {
  kNamed,    // the request's entry `plan_from` names it
  kClients,  // the clients file has the matched value on it
  kDefault,  // default_plan: no plan named (nor found in the clients file), or an unknown one
};

struct PlanChoice {
  const Plan* plan = nullptr;  // nullptr: no plan applies (the default_plan is none either)
  PlanSource source = PlanSource::kDefault;
  // The value of the request's entry `plan_from` (with kDefault: a plan the domain does not
  // have), or nullptr when the request has no such entry.
  const Entry* named = nullptr;
};

// The plan whose limits `node` (a rule with plan_from) applies to the descriptor `entries`.
PlanChoice ChoosePlan(const Domain& domain, const RuleNode& node, std::span<const Entry> entries);

// Glob match where '*' matches any run of characters (including none).
bool WildcardMatch(std::string_view pattern, std::string_view text);

}  // namespace sluice::rules

#endif  // SLUICE_RULES_MATCHER_H_
