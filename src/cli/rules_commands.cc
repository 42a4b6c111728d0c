#include "cli/rules_commands.h"

#include "cli/replay.h"
#include "cli/serve_tls.h"
#include "engine/descriptor_text.h"
#include "fmt/format.h"
#include "rules/admin_access.h"
#include "rules/loader.h"
#include "rules/matcher.h"
#include "sluice/clock.h"
#include "stack/redis_tls.h"
#include "stack/stack.h"

namespace sluice::cli {
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

}  // namespace

int RunCheckConfig(const std::vector<std::string>& paths, std::ostream& out) {
  const rules::LoadResult result = rules::LoadConfig(paths);
  if (!result.errors.empty()) {
    for (const auto& e : result.errors) out << e.ToString() << "\n";
    return 1;
  }
  // What serve refuses at start beyond the files' own checks: the admin API's access, and TLS
  // files for Redis or the listeners that cannot be used.
  std::vector<rules::ConfigError> refused = rules::CheckAdminAccess(result.config->settings);
  for (rules::ConfigError& e : stack::CheckRedisTls(result.config->settings)) {
    refused.push_back(std::move(e));
  }
  for (rules::ConfigError& e : CheckListenerTls(result.config->settings)) {
    refused.push_back(std::move(e));
  }
  if (!refused.empty()) {
    for (const auto& e : refused) out << e.ToString() << "\n";
    return 1;
  }
  out << fmt::format("ok: {} domains, {} limits\n", result.config->domains.size(),
                     result.config->limit_count);
  return 0;
}

int RunRulesReplay(const rules::Config& config, const std::string& domain, std::istream& in,
                   std::ostream& out, std::ostream& err) {
  if (config.FindDomain(domain) == nullptr) {
    err << "replay: unknown domain '" << domain << "'\n";
    return 2;
  }
  ManualClock clock;
  const std::unique_ptr<stack::Stack> backends = stack::Stack::Memory(config.settings, &clock);
  engine::Engine engine(&backends->backend());
  engine::Request request;
  request.domain = domain;
  return ReplayTrace(in, out, err, [&](const TraceRequest& line, std::string* error) {
    auto descriptors = engine::ParseDescriptorList(line.key, error);
    if (!descriptors) return std::optional<Decision>();
    request.descriptors = std::move(*descriptors);
    request.hits_addend = line.cost;
    const engine::Response response = engine.Check(config, request, line.t_ms * 1000);
    Decision d;
    d.allowed = response.allowed;
    d.remaining = response.remaining;
    if (const engine::AppliedLimit* headline = response.Headline()) {
      d.retry_after_us = response.allowed ? 0 : headline->decision.retry_after_us;
      d.reset_after_us = headline->decision.reset_after_us;
    }
    for (const auto& desc : response.descriptors) {
      for (const auto& limit : desc.limits)
        d.delay_us = std::max(d.delay_us, limit.decision.delay_us);
    }
    return std::optional<Decision>(d);
  });
}

int RunExplain(const rules::Config& config, const std::string& domain_name,
               std::string_view descriptors, std::ostream& out, std::ostream& err) {
  const rules::Domain* domain = config.FindDomain(domain_name);
  if (domain == nullptr) {
    err << "explain: unknown domain '" << domain_name << "' (requests for it are allowed without "
        << "limits)\n";
    return 2;
  }
  std::string error;
  auto list = engine::ParseDescriptorList(descriptors, &error);
  if (!list) {
    err << "explain: " << error << "\n";
    return 2;
  }
  out << fmt::format("domain {} ({})\n", domain->name, domain->file);
  std::vector<const rules::RuleNode*> matched;
  for (size_t i = 0; i < list->size(); ++i) {
    const auto& entries = (*list)[i].entries;
    out << fmt::format("descriptor {}:", i + 1);
    for (const auto& e : entries) out << fmt::format(" ({}, {})", e.key, e.value);
    out << "\n";
    const rules::RuleNode* node = &domain->root;
    const rules::RuleNode* result = nullptr;
    for (size_t level = 0; level < entries.size(); ++level) {
      rules::MatchKind kind;
      const rules::RuleNode* child = rules::MatchLevel(*node, entries[level], &kind);
      if (child == nullptr) {
        out << fmt::format("  level {}: no rule for key '{}' here: stop\n", level + 1,
                           entries[level].key);
        break;
      }
      const char* how = kind == rules::MatchKind::kExact ? "exact value"
                        : kind == rules::MatchKind::kWildcard
                            ? "wildcard"
                            : "key only (any value, counted per value)";
      out << fmt::format("  level {}: {} matches {} by {} at {}\n", level + 1,
                         entries[level].key + "=" + entries[level].value, child->path, how,
                         Where(child->position));
      const bool last = level + 1 == entries.size();
      if (last && child->has_rate_limit) result = child;
      if (last && !child->has_rate_limit) {
        out << "  that rule has no rate limit of its own: no limit\n";
      }
      if (child->children.empty()) {
        if (!last) out << "  that rule has no deeper rules but the descriptor goes on: no limit\n";
        break;
      }
      node = child;
    }
    matched.push_back(result);
  }
  for (size_t i = 0; i < matched.size(); ++i) {
    const rules::RuleNode* node = matched[i];
    out << fmt::format("descriptor {} result: ", i + 1);
    if (node == nullptr) {
      out << "no limit (allowed)\n";
      continue;
    }
    bool replaced = false;
    for (const auto* other : matched) {
      if (other == nullptr || node->rate_limit_name.empty()) continue;
      for (const auto& r : other->replaces) replaced = replaced || r == node->rate_limit_name;
    }
    if (replaced) {
      out << fmt::format("rule {} is replaced by another matched rule: no limit\n", node->path);
    } else if (node->unlimited) {
      out << fmt::format("rule {} is unlimited\n", node->path);
    } else if (!node->plan_from.empty()) {
      const rules::PlanChoice choice = rules::ChoosePlan(*domain, *node, (*list)[i].entries);
      const std::string why = WhyPlan(*domain, *node, (*list)[i].entries, choice);
      if (choice.plan == nullptr) {
        out << fmt::format("rule {}: no plan applies ({}): no limit\n", node->path, why);
        continue;
      }
      out << fmt::format("rule {}, plan {} ({}), {} limit(s)\n", node->path, choice.plan->name, why,
                         choice.plan->limits.size());
      for (const auto& rule : choice.plan->limits) {
        out << fmt::format("  {} at {}\n", DescribeRule(rule), Where(rule.position));
      }
    } else {
      out << fmt::format("rule {}, {} limit(s)\n", node->path, node->limits.size());
      for (const auto& rule : node->limits) {
        out << fmt::format("  {} at {}\n", DescribeRule(rule), Where(rule.position));
      }
    }
  }
  return 0;
}

}  // namespace sluice::cli
