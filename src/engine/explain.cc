// The explanation of `sluice explain` and the admin API's GET /v1/explain: how each descriptor
// walks the domain's rules, level by level, and which limits apply in the end (and why a plan).

#include "engine/explain.h"

#include <iterator>
#include <span>
#include <vector>

#include "engine/descriptor_text.h"
#include "fmt/format.h"
#include "rules/matcher.h"

namespace sluice::engine {
namespace {

std::string Where(const rules::Position& p) {
  return fmt::format("{}:{}:{}", p.file, p.line, p.column);
}

std::string DescribeRule(const rules::LimitRule& rule) {
  std::string s = DescribeLimit(rule.limit);
  if (!rule.name.empty()) s += fmt::format(" name={}", rule.name);
  if (rule.shadow_mode) s += " shadow";
  return s;
}

// Why ChoosePlan chose `choice` for a descriptor: named by the request, found in the clients
// file, or the default_plan (and why none of the others).
std::string WhyPlan(const rules::Domain& domain, const rules::RuleNode& node,
                    std::span<const rules::Entry> entries, const rules::PlanChoice& choice) {
  switch (choice.source) {
    case rules::PlanSource::kNamed:
      return fmt::format("named by the request's {}={}", choice.named->key, choice.named->value);
    case rules::PlanSource::kClients:
      return fmt::format("found in the clients file {} for {}", domain.clients_path,
                         entries.back().value);
    case rules::PlanSource::kDefault:
      break;
  }
  std::string why = "the default_plan: ";
  if (choice.named != nullptr) {
    why += fmt::format("the request names {}={}, which is no plan of this domain",
                       choice.named->key, choice.named->value);
  } else if (domain.clients != nullptr) {
    why += fmt::format("the request has no {} entry, and the clients file {} has no row for {}",
                       node.plan_from, domain.clients_path, entries.back().value);
  } else {
    why += fmt::format("the request has no {} entry", node.plan_from);
  }
  return why;
}

// A runtime override as a descriptor's result: what it sets, who set it, until when, and the rule
// it outranks.
void DescribeOverride(const rules::Override& o, const rules::RuleNode* outranked,
                      std::back_insert_iterator<std::string> out) {
  fmt::format_to(out, "runtime override {} set by {} at {}", rules::OverrideEntriesText(o.entries),
                 o.set_by.empty() ? "?" : o.set_by, rules::FormatUnixTime(o.set_at_us));
  if (o.until_us != 0) fmt::format_to(out, " until {}", rules::FormatUnixTime(o.until_us));
  if (!o.reason.empty()) fmt::format_to(out, " ({})", o.reason);
  fmt::format_to(out, ", outranking {}, {} limit(s)\n",
                 outranked == nullptr ? "no rule" : "rule " + outranked->path, o.limits.size());
  for (const auto& rule : o.limits) fmt::format_to(out, "  {}\n", DescribeRule(rule));
}

}  // namespace

absl::StatusOr<std::string> Explain(const rules::Config& config, std::string_view domain_name,
                                    std::string_view descriptors,
                                    const rules::OverrideSet* overrides, int64_t now_us) {
  const rules::Domain* domain = config.FindDomain(std::string(domain_name));
  if (domain == nullptr) {
    return absl::NotFoundError(fmt::format(
        "unknown domain '{}' (requests for it are allowed without limits)", domain_name));
  }
  std::string error;
  auto list = ParseDescriptorList(descriptors, &error);
  if (!list) return absl::InvalidArgumentError(error);
  std::string text;
  auto out = std::back_inserter(text);
  fmt::format_to(out, "domain {} ({})\n", domain->name, domain->file);
  std::vector<const rules::RuleNode*> matched;
  for (size_t i = 0; i < list->size(); ++i) {
    const auto& entries = (*list)[i].entries;
    fmt::format_to(out, "descriptor {}:", i + 1);
    for (const auto& e : entries) fmt::format_to(out, " ({}, {})", e.key, e.value);
    fmt::format_to(out, "\n");
    const rules::RuleNode* node = &domain->root;
    const rules::RuleNode* result = nullptr;
    for (size_t level = 0; level < entries.size(); ++level) {
      rules::MatchKind kind;
      const rules::RuleNode* child = rules::MatchLevel(*node, entries[level], &kind);
      if (child == nullptr) {
        fmt::format_to(out, "  level {}: no rule for key '{}' here: stop\n", level + 1,
                       entries[level].key);
        break;
      }
      const char* how = kind == rules::MatchKind::kExact ? "exact value"
                        : kind == rules::MatchKind::kWildcard
                            ? "wildcard"
                            : "key only (any value, counted per value)";
      fmt::format_to(out, "  level {}: {} matches {} by {} at {}\n", level + 1,
                     entries[level].key + "=" + entries[level].value, child->path, how,
                     Where(child->position));
      const bool last = level + 1 == entries.size();
      if (last && child->has_rate_limit) result = child;
      if (last && !child->has_rate_limit) {
        fmt::format_to(out, "  that rule has no rate limit of its own: no limit\n");
      }
      if (child->children.empty()) {
        if (!last) {
          fmt::format_to(out,
                         "  that rule has no deeper rules but the descriptor goes on: no limit\n");
        }
        break;
      }
      node = child;
    }
    matched.push_back(result);
  }
  for (size_t i = 0; i < matched.size(); ++i) {
    const rules::RuleNode* node = matched[i];
    fmt::format_to(out, "descriptor {} result: ", i + 1);
    if (const rules::Override* o =
            overrides == nullptr ? nullptr
                                 : overrides->Find(domain->name, (*list)[i].entries, now_us)) {
      DescribeOverride(*o, node, out);
      continue;
    }
    if (node == nullptr) {
      fmt::format_to(out, "no limit (allowed)\n");
      continue;
    }
    bool replaced = false;
    for (const auto* other : matched) {
      if (other == nullptr || node->rate_limit_name.empty()) continue;
      for (const auto& r : other->replaces) replaced = replaced || r == node->rate_limit_name;
    }
    if (replaced) {
      fmt::format_to(out, "rule {} is replaced by another matched rule: no limit\n", node->path);
    } else if (node->unlimited) {
      fmt::format_to(out, "rule {} is unlimited\n", node->path);
    } else if (!node->plan_from.empty()) {
      const rules::PlanChoice choice = rules::ChoosePlan(*domain, *node, (*list)[i].entries);
      const std::string why = WhyPlan(*domain, *node, (*list)[i].entries, choice);
      if (choice.plan == nullptr) {
        fmt::format_to(out, "rule {}: no plan applies ({}): no limit\n", node->path, why);
        continue;
      }
      fmt::format_to(out, "rule {}, plan {} ({}), {} limit(s)\n", node->path, choice.plan->name,
                     why, choice.plan->limits.size());
      for (const auto& rule : choice.plan->limits) {
        fmt::format_to(out, "  {} at {}\n", DescribeRule(rule), Where(rule.position));
      }
    } else {
      fmt::format_to(out, "rule {}, {} limit(s)\n", node->path, node->limits.size());
      for (const auto& rule : node->limits) {
        fmt::format_to(out, "  {} at {}\n", DescribeRule(rule), Where(rule.position));
      }
    }
    for (const auto& held : node->concurrency) {
      fmt::format_to(out, "  concurrency: at most {} in flight, max_hold {}{} at {}\n",
                     held.requests, FormatDuration(held.max_hold_us),
                     held.name.empty() ? "" : " name=" + held.name, Where(held.position));
    }
  }
  return text;
}

}  // namespace sluice::engine
