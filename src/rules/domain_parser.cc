// Domain files: envoyproxy/ratelimit's format plus sluice's keys (docs/configuration.md); the
// `http:` section is http_settings_parser.cc's.

#include <algorithm>
#include <cctype>

#include "backend/limit_id.h"
#include "fmt/format.h"
#include "rules/parsers.h"

namespace sluice::rules {
namespace {

// Every key upstream accepts in a descriptor, plus sluice's `limits` and `plan_from`.
const std::vector<std::string_view> kDescriptorKeys = {
    "key",         "value",           "rate_limit",      "limits",          "descriptors",
    "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold", "quota_mode",
    "metadata",    "plan_from"};
const std::vector<std::string_view> kRateLimitKeys = {
    "unit",     "requests_per_unit", "unlimited",   "name",
    "replaces", "algorithm",         "burst",       "window",
    "requests", "shadow_mode",       "consistency", "time_zone",
    "penalty",  "max_hold"};
const std::vector<std::string_view> kLimitEntryKeys = {
    "requests", "requests_per_unit", "window",      "unit",      "algorithm", "burst",
    "name",     "shadow_mode",       "consistency", "time_zone", "penalty",   "max_hold"};
const std::vector<std::string_view> kDomainKeys = {
    "domain",       "descriptors",  "plans",       "default_plan", "clients",
    "failure_mode", "count_denied", "shadow_mode", "http",         "consistency",
    "hot_keys",     "hot_key_rate", "cold_keys",   "time_zone",    "calendar_units"};
// hot_key_rate: requests per second on one instance (backend::Item::hot_key_rate is 32 bits).
constexpr uint64_t kMaxHotKeyRate = 1000000000;

class DomainParser {
 public:
  DomainParser(YamlReader& reader, Domain& domain) : r_(reader), domain_(domain) {}

  // A `limits:` list alone (a runtime override's, overrides.h).
  std::vector<LimitRule> Limits(const yaml::Node& list, const std::string& what) {
    return ParseLimitList(list, what);
  }

  void Parse(const yaml::Node& doc) {
    r_.CheckMap(doc, "domain file", kDomainKeys);
    auto name = r_.String(doc, "domain");
    if (!name || name->empty()) {
      r_.ErrorAt(r_.FieldPosition(doc, "domain"), "config file cannot have empty domain");
    } else {
      domain_.name = *name;
    }
    domain_.root.path = domain_.name;
    domain_.root.position = r_.PositionOf(doc);
    if (auto v = r_.Bool(doc, "count_denied")) domain_.count_denied = *v;
    domain_.shadow_mode = r_.Bool(doc, "shadow_mode").value_or(false);
    if (auto mode = r_.String(doc, "failure_mode")) {
      if (*mode == "open") {
        domain_.failure_mode = FailureMode::kOpen;
      } else if (*mode == "closed") {
        domain_.failure_mode = FailureMode::kClosed;
      } else if (*mode == "local") {
        domain_.failure_mode = FailureMode::kLocal;
      } else {
        r_.Error(doc["failure_mode"],
                 fmt::format("unknown failure_mode '{}' (open, closed or local)", *mode));
      }
    }
    if (auto consistency = ParseConsistency(doc)) domain_.consistency = *consistency;
    ParseHotKeys(doc);
    if (auto zone = r_.String(doc, "time_zone")) {
      if (absl::Status s = Calendar::Make(Calendar::Unit::kDay, *zone).status(); !s.ok()) {
        r_.Error(doc["time_zone"], std::string(s.message()));
      } else {
        domain_.time_zone = *zone;
      }
    }
    domain_.calendar_units = r_.Bool(doc, "calendar_units").value_or(false);
    if (domain_.calendar_units) {
      for (const char* unit : {"day", "week", "month", "year"}) {
        if (auto calendar = Calendar::Make(std::string("calendar_") + unit, domain_.time_zone);
            calendar.ok()) {
          domain_.unit_calendars.emplace(unit, *calendar);
        }
      }
    }
    if (auto clients = r_.String(doc, "clients")) {
      domain_.clients_path = *clients;
      domain_.clients_at = r_.FieldPosition(doc, "clients");
    }
    ParsePlans(doc);
    if (const yaml::Node list = doc["descriptors"]; list.IsDefined() && !list.IsNull()) {
      ParseDescriptors(list, domain_.root);
    }
    if (const yaml::Node http = doc["http"]; http.IsDefined() && !http.IsNull()) {
      if (auto section = ParseHttpSection(r_, http)) domain_.http = std::move(*section);
    }
  }

 private:
  // `consistency:` of a domain or a limit: exact | leased | eventual.
  std::optional<Consistency> ParseConsistency(const yaml::Node& map) {
    auto name = r_.String(map, "consistency");
    if (!name) return std::nullopt;
    if (*name == "exact") return Consistency::kExact;
    if (*name == "leased") return Consistency::kLeased;
    if (*name == "eventual") return Consistency::kEventual;
    r_.Error(map["consistency"],
             fmt::format("unknown consistency '{}' (exact, leased or eventual)", *name));
    return std::nullopt;
  }

  // `name: other | lease`, if given: whether it says lease.
  void ParseLeaseChoice(const yaml::Node& doc, const char* name, std::string_view other,
                        bool& lease) {
    if (auto mode = r_.String(doc, name)) {
      if (*mode == other || *mode == "lease") {
        lease = *mode == "lease";
      } else {
        r_.Error(doc[name], fmt::format("unknown {} '{}' ({} or lease)", name, *mode, other));
      }
    }
  }

  // `hot_keys: exact | lease`, `cold_keys: copy | lease` and `hot_key_rate:` (requests per
  // second, > 0) of a domain.
  void ParseHotKeys(const yaml::Node& doc) {
    ParseLeaseChoice(doc, "hot_keys", "exact", domain_.lease_hot_keys);
    ParseLeaseChoice(doc, "cold_keys", "copy", domain_.lease_cold_keys);
    if (auto rate = r_.Unsigned(doc, "hot_key_rate", kMaxHotKeyRate)) {
      if (*rate == 0) {
        r_.Error(doc["hot_key_rate"], "hot_key_rate must be positive (requests per second)");
      } else {
        domain_.hot_key_rate = static_cast<uint32_t>(*rate);
      }
    }
  }

  void ParsePlans(const yaml::Node& doc) {
    const yaml::Node plans = doc["plans"];
    if (plans.IsDefined() && !plans.IsNull()) {
      if (!plans.IsMap()) {
        r_.Error(plans, "plans must be a map of plan names");
      } else {
        for (const yaml::Entry& entry : plans.entries()) {
          auto name = r_.AsString(entry.key, "plan name");
          if (!name) continue;
          Plan plan{.name = *name, .limits = {}};
          if (r_.CheckMap(entry.value, fmt::format("plan '{}'", *name), {"limits"})) {
            plan.limits = ParseLimitList(entry.value["limits"], fmt::format("plan '{}'", *name));
          }
          domain_.plans.emplace(*name, std::move(plan));
        }
      }
    }
    if (const yaml::Node def = doc["default_plan"]; def.IsDefined() && !def.IsNull()) {
      if (auto name = r_.AsString(def, "default_plan")) {
        domain_.default_plan = *name;
        if (!domain_.plans.contains(*name)) {
          r_.Error(def, fmt::format("unknown plan '{}'{}", *name, KnownPlans()));
        }
      }
    } else if (!domain_.plans.empty()) {
      r_.Error(plans, "plans need a default_plan (used when a request names no known plan)");
    }
  }

  std::string KnownPlans() const {
    std::string names;
    for (const auto& [name, plan] : domain_.plans) {
      names += fmt::format("{}{}", names.empty() ? "" : ", ", name);
    }
    return names.empty() ? " (no plans are defined)" : fmt::format(" (plans: {})", names);
  }

  void ParseDescriptors(const yaml::Node& list, RuleNode& parent) {
    if (!r_.CheckSequence(list, "descriptors")) return;
    for (const yaml::Node& item : list.items()) {
      if (!item.IsMap()) {
        r_.Error(item, "descriptors must be a list of maps");
        continue;
      }
      auto node = std::make_unique<RuleNode>();
      if (ParseDescriptor(item, parent, *node)) {
        for (LimitRule& rule : node->limits)
          rule.state_id = backend::RuleLimitId(node->path, "", rule.limit);
        for (ConcurrencyRule& rule : node->concurrency) {
          Limit identity;  // its size and max_hold, as a limit's id is made of them
          identity.requests = rule.requests;
          identity.window_us = rule.max_hold_us;
          rule.state_id = backend::RuleLimitId(node->path + "#concurrency", "", identity);
        }
        if (const RuleNode* first = AddChild(parent, node)) {
          r_.Error(item, fmt::format("duplicate descriptor composite key '{}.{}'", parent.path,
                                     CompositeKey(*first)));
        }
      }
    }
  }

  bool ParseDescriptor(const yaml::Node& item, const RuleNode& parent, RuleNode& node) {
    const size_t errors_before = r_.error_count();
    r_.CheckMap(item, "descriptor", kDescriptorKeys);
    node.position = r_.PositionOf(item);
    auto key = r_.String(item, "key");
    if (!key || key->empty()) {
      r_.ErrorAt(r_.FieldPosition(item, "key"), "descriptor has empty key");
      return false;
    }
    node.key = *key;
    if (const yaml::Node value = item["value"]; value.IsDefined() && !value.IsNull()) {
      // An empty value is the same as none (key-only), as upstream stores it.
      if (auto v = r_.AsString(value, "value"); v && !v->empty()) {
        node.value = *v;
        node.has_value = true;
        node.wildcard = v->find('*') != std::string::npos;
      }
    }
    node.path = fmt::format("{}.{}", parent.path,
                            node.has_value ? fmt::format("{}_{}", node.key, node.value) : node.key);
    node.shadow_mode = r_.Bool(item, "shadow_mode").value_or(false);
    node.detailed_metric = r_.Bool(item, "detailed_metric").value_or(false);
    r_.Bool(item, "value_to_metric");
    node.quota_mode = r_.Bool(item, "quota_mode").value_or(false);
    if (const yaml::Node metadata = item["metadata"]; metadata.IsDefined() && !metadata.IsNull()) {
      node.metadata_json = r_.MapAsJson(metadata, "metadata").value_or("");
    }
    node.share_threshold = r_.Bool(item, "share_threshold").value_or(false);
    if (node.share_threshold && !node.wildcard) {
      r_.Error(item["share_threshold"],
               fmt::format("share_threshold can only be used with wildcard values (containing "
                           "'*'), but found key '{}'",
                           node.key));
    }
    const yaml::Node rate_limit = item["rate_limit"];
    const yaml::Node limits = item["limits"];
    const bool has_rate_limit = rate_limit.IsDefined() && !rate_limit.IsNull();
    const bool has_limits = limits.IsDefined() && !limits.IsNull();
    if (auto plan_from = r_.String(item, "plan_from")) {
      node.plan_from = *plan_from;
      node.has_rate_limit = true;
      if (domain_.plans.empty()) {
        r_.Error(item["plan_from"], "plan_from needs top-level plans");
      }
      if (has_rate_limit || has_limits) {
        r_.Error(item["plan_from"],
                 "a descriptor with plan_from takes its limits from the plan; "
                 "remove rate_limit/limits");
      }
    }
    if (has_rate_limit && has_limits) {
      r_.Error(limits, "use either rate_limit or limits on a descriptor, not both");
    } else if (has_rate_limit) {
      ParseRateLimit(rate_limit, node);
    } else if (has_limits) {
      node.has_rate_limit = true;
      node.limits = ParseLimitList(limits, "limits", &node.concurrency);
    }
    if (const yaml::Node children = item["descriptors"];
        children.IsDefined() && !children.IsNull()) {
      ParseDescriptors(children, node);
    }
    return r_.error_count() == errors_before;
  }

  void ParseRateLimit(const yaml::Node& rl, RuleNode& node) {
    node.has_rate_limit = true;
    if (!r_.CheckMap(rl, "rate_limit", kRateLimitKeys)) return;
    if (auto name = r_.String(rl, "name")) node.rate_limit_name = *name;
    if (const yaml::Node replaces = rl["replaces"]; replaces.IsDefined() && !replaces.IsNull()) {
      if (r_.CheckSequence(replaces, "replaces")) {
        for (const yaml::Node& entry : replaces.items()) {
          if (!r_.CheckMap(entry, "replaces entry", {"name"})) continue;
          auto name = r_.String(entry, "name");
          if (!name || name->empty()) {
            r_.Error(entry, "should not have an empty replaces entry");
          } else if (*name == node.rate_limit_name) {
            r_.Error(entry, "replaces should not contain name of same descriptor");
          } else {
            node.replaces.push_back(*name);
          }
        }
      }
    }
    if (r_.Bool(rl, "unlimited").value_or(false)) {
      node.unlimited = true;
      if (IsConcurrency(rl)) r_.Error(rl["algorithm"], "unlimited takes no algorithm concurrency");
      if (rl["unit"].IsDefined() || rl["window"].IsDefined()) {
        r_.Error(rl["unit"].IsDefined() ? rl["unit"] : rl["window"],
                 "should not specify rate limit unit when unlimited");
      }
      return;
    }
    if (IsConcurrency(rl)) {
      if (auto rule = ParseConcurrency(rl, "rate_limit")) {
        rule->name = node.rate_limit_name;
        node.concurrency.push_back(std::move(*rule));
      }
      return;
    }
    if (auto limit = ParseLimit(rl, "rate_limit")) {
      limit->name = node.rate_limit_name;
      node.limits.push_back(std::move(*limit));
    }
  }

  static bool IsConcurrency(const yaml::Node& map) {
    const yaml::Node algorithm = map["algorithm"];
    return algorithm.IsScalar() && algorithm.Scalar() == "concurrency";
  }

  // `algorithm: concurrency` with `requests` (the holds at once) and `max_hold` (default 60 s);
  // no window, burst or penalty.
  std::optional<ConcurrencyRule> ParseConcurrency(const yaml::Node& map, std::string_view what) {
    const size_t errors_before = r_.error_count();
    ConcurrencyRule rule;
    rule.position = r_.PositionOf(map);
    for (const char* key : {"unit", "window", "burst", "penalty", "time_zone", "consistency",
                            "requests_per_unit", "shadow_mode"}) {
      if (map[key].IsDefined()) {
        r_.Error(map[key], fmt::format("{}: a concurrency limit takes requests and max_hold, "
                                       "not {}",
                                       what, key));
      }
    }
    if (!map["requests"].IsDefined()) {
      r_.Error(map,
               fmt::format("{}: a concurrency limit needs requests (the most held at once)", what));
    }
    rule.requests = r_.Unsigned(map, "requests", kMaxRequests).value_or(0);
    rule.max_hold_us = r_.Duration(map, "max_hold").value_or(kDefaultMaxHoldUs);  // (> 0)
    if (r_.error_count() != errors_before) return std::nullopt;
    return rule;
  }

  // `concurrency`: where its `algorithm: concurrency` entries go (null: they are an error, as in
  // plans and overrides).
  std::vector<LimitRule> ParseLimitList(const yaml::Node& list, const std::string& what,
                                        std::vector<ConcurrencyRule>* concurrency = nullptr) {
    std::vector<LimitRule> out;
    if (!list.IsDefined() || list.IsNull()) {
      return out;
    }
    if (!r_.CheckSequence(list, what)) return out;
    for (const yaml::Node& entry : list.items()) {
      if (!r_.CheckMap(entry, "limits entry", kLimitEntryKeys)) continue;
      if (IsConcurrency(entry)) {
        if (concurrency == nullptr) {
          r_.Error(entry["algorithm"], fmt::format("{}: a concurrency limit belongs to a "
                                                   "descriptor's own rate_limit or limits",
                                                   what));
        } else if (auto rule = ParseConcurrency(entry, "limits entry")) {
          if (auto name = r_.String(entry, "name")) rule->name = *name;
          concurrency->push_back(std::move(*rule));
        }
        continue;
      }
      if (auto limit = ParseLimit(entry, "limits entry")) {
        if (auto name = r_.String(entry, "name")) limit->name = *name;
        out.push_back(std::move(*limit));
      }
    }
    return out;
  }

  // The common part of rate_limit and limits entries.
  std::optional<LimitRule> ParseLimit(const yaml::Node& map, std::string_view what) {
    const size_t errors_before = r_.error_count();
    LimitRule rule;
    rule.position = r_.PositionOf(map);
    rule.limit.algorithm = Algorithm::kFixedWindow;  // envoyproxy/ratelimit's only algorithm
    bool algorithm_known = true;  // else checks that depend on it (burst) say nothing more
    if (map["algorithm"].IsDefined() && !map["algorithm"].IsNull()) {
      algorithm_known = false;
      if (auto name = r_.String(map, "algorithm")) {
        auto algorithm = ParseAlgorithm(*name);
        if (algorithm.ok()) {
          rule.limit.algorithm = *algorithm;
          algorithm_known = true;
        } else {
          r_.Error(map["algorithm"], std::string(algorithm.status().message()));
        }
      }
    }
    if (map["requests"].IsDefined() && map["requests_per_unit"].IsDefined()) {
      r_.Error(map["requests"],
               fmt::format("{}: give requests or requests_per_unit, not both", what));
    }
    const char* requests_key = map["requests"].IsDefined() ? "requests" : "requests_per_unit";
    // A missing count is 0, which denies everything, as upstream.
    rule.limit.requests = r_.Unsigned(map, requests_key, kMaxRequests).value_or(0);
    const bool has_unit = map["unit"].IsDefined() && !map["unit"].IsNull();
    const bool has_window = map["window"].IsDefined() && !map["window"].IsNull();
    if (has_unit && has_window) {
      r_.Error(map["window"], fmt::format("{}: give unit or window, not both", what));
    } else if (has_unit) {
      if (auto unit = r_.String(map, "unit")) {
        rule.limit.window_us = UnitMicros(*unit);
        rule.unit = *unit;
        std::transform(rule.unit.begin(), rule.unit.end(), rule.unit.begin(),
                       [](unsigned char c) { return std::tolower(c); });
        if (rule.limit.window_us == 0) {
          r_.Error(map["unit"], fmt::format("invalid rate limit unit '{}'", *unit));
        } else if (domain_.calendar_units && rule.limit.window_us >= UnitMicros("day")) {
          SetCalendar(map, "unit", "calendar_" + rule.unit, rule.limit);
        }
      }
    } else if (has_window) {
      const std::optional<std::string> text = r_.String(map, "window");
      if (text && text->starts_with("calendar_")) {
        SetCalendar(map, "window", *text, rule.limit);
      } else {
        rule.limit.window_us = r_.Duration(map, "window").value_or(0);
      }
    } else {
      r_.Error(map, fmt::format("{} needs a unit (second, minute, hour, day, week, month, year) "
                                "or a window (e.g. 30s)",
                                what));
    }
    if (const yaml::Node burst = map["burst"];
        algorithm_known && burst.IsDefined() && !burst.IsNull()) {
      if (auto b = r_.AsUnsigned(burst, "burst", kMaxBurst)) {
        if (rule.limit.algorithm == Algorithm::kTokenBucket && *b < 1) {
          r_.Error(burst, "burst of a token_bucket must be at least 1");
        } else if (rule.limit.algorithm != Algorithm::kTokenBucket &&
                   rule.limit.algorithm != Algorithm::kLeakyBucket) {
          r_.Error(burst, fmt::format("burst applies to token_bucket and leaky_bucket, not {}",
                                      AlgorithmName(rule.limit.algorithm)));
        } else {
          rule.limit.burst = *b;
        }
      }
    }
    if (map["max_hold"].IsDefined()) {
      r_.Error(map["max_hold"], fmt::format("{}: max_hold applies to algorithm concurrency", what));
    }
    if (map["time_zone"].IsDefined() && !rule.limit.calendar && r_.error_count() == errors_before) {
      r_.Error(map["time_zone"],
               fmt::format("{}: time_zone applies to calendar windows (window: calendar_day, "
                           "calendar_week, calendar_month or calendar_year)",
                           what));
    }
    if (const yaml::Node penalty = map["penalty"]; penalty.IsDefined() && !penalty.IsNull()) {
      rule.limit.penalty = ParsePenalty(penalty);
    }
    rule.shadow_mode = r_.Bool(map, "shadow_mode").value_or(false);
    rule.consistency = ParseConsistency(map);
    if (r_.error_count() != errors_before) return std::nullopt;
    if (absl::Status s = ValidateLimit(rule.limit); !s.ok()) {
      r_.Error(map, std::string(s.message()));
      return std::nullopt;
    }
    return rule;
  }

  // `penalty: {after, within, block, growth, max, forget}` of a limit, each optional (defaults:
  // sluice::Penalty's); its bounds are ValidateLimit's.
  std::optional<Penalty> ParsePenalty(const yaml::Node& map) {
    if (!r_.CheckMap(map, "penalty", {"after", "within", "block", "growth", "max", "forget"})) {
      return std::nullopt;
    }
    Penalty p;
    if (auto after = r_.Unsigned(map, "after", UINT32_MAX)) p.after = static_cast<uint32_t>(*after);
    if (auto within = r_.Duration(map, "within")) p.within_us = *within;
    if (auto block = r_.Duration(map, "block")) p.block_us = *block;
    if (auto growth = r_.Number(map, "growth", "penalty growth", 1.0, 1000.0)) p.growth = *growth;
    if (auto max = r_.Duration(map, "max")) p.max_us = *max;
    if (auto forget = r_.Duration(map, "forget")) {
      p.forget_us = *forget;
    } else {
      p.forget_us = std::max(p.forget_us, p.max_us);  // never forgotten while a block may run
    }
    return p;
  }

  // A calendar window `unit` ("calendar_month") for `limit`, in the entry's time_zone or else the
  // domain's; an error at `field` when either is unknown.
  void SetCalendar(const yaml::Node& map, const char* field, const std::string& unit,
                   Limit& limit) {
    const std::string zone = r_.String(map, "time_zone").value_or(domain_.time_zone);
    absl::StatusOr<Calendar> calendar = Calendar::Make(unit, zone);
    if (!calendar.ok()) {
      const std::string message(calendar.status().message());
      const bool zone_at_fault = message.starts_with("unknown time");
      r_.Error(zone_at_fault && map["time_zone"].IsDefined() ? map["time_zone"] : map[field],
               message);
      return;
    }
    limit.window_us = calendar->NominalUs();
    limit.calendar = *calendar;
  }

  YamlReader& r_;
  Domain& domain_;
};

}  // namespace

std::string CompositeKey(const RuleNode& node) {
  return node.has_value ? fmt::format("{}_{}", node.key, node.value) : node.key;
}

const RuleNode* AddChild(RuleNode& parent, std::unique_ptr<RuleNode>& child) {
  RuleNode::KeyIndex& index = parent.index[child->key];
  const RuleNode* first = nullptr;
  if (child->wildcard) {
    auto it = std::find_if(index.wildcards.begin(), index.wildcards.end(),
                           [&](const RuleNode* w) { return w->value == child->value; });
    if (it != index.wildcards.end()) first = *it;
  } else if (child->has_value) {
    if (auto it = index.by_value.find(child->value); it != index.by_value.end()) first = it->second;
  } else {
    first = index.any_value;
  }
  if (first != nullptr) return first;
  if (child->wildcard) {
    index.wildcards.push_back(child.get());
  } else if (child->has_value) {
    index.by_value.emplace(child->value, child.get());
  } else {
    index.any_value = child.get();
  }
  parent.children.push_back(std::move(child));
  return nullptr;
}

std::vector<LimitRule> ParseLimitList(YamlReader& reader, const yaml::Node& list,
                                      const Domain* domain, const std::string& what) {
  Domain settings;  // only what a limit's parsing reads of its domain
  if (domain != nullptr) {
    settings.name = domain->name;
    settings.time_zone = domain->time_zone;
    settings.calendar_units = domain->calendar_units;
  }
  return DomainParser(reader, settings).Limits(list, what);
}

std::unique_ptr<Domain> ParseDomain(YamlReader& reader, const yaml::Node& doc) {
  auto domain = std::make_unique<Domain>();
  domain->file = reader.file();
  const size_t errors_before = reader.error_count();
  DomainParser(reader, *domain).Parse(doc);
  if (reader.error_count() != errors_before) return nullptr;
  return domain;
}

}  // namespace sluice::rules
