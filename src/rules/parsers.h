// Internal to the loader: YAML document -> Domain / Settings.

#ifndef SLUICE_RULES_PARSERS_H_
#define SLUICE_RULES_PARSERS_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rules/config.h"
#include "rules/yaml_reader.h"

namespace sluice::rules {

// A domain file. Errors go to the reader; the result is null if there were any.
std::unique_ptr<Domain> ParseDomain(YamlReader& reader, const yaml::Node& doc);

// A `limits:` list as a descriptor's (with its entries' names), for `domain`'s calendar units and
// time zone (null: a domain's defaults). Errors go to the reader, naming `what`.
std::vector<LimitRule> ParseLimitList(YamlReader& reader, const yaml::Node& list,
                                      const Domain* domain, const std::string& what);

// Adds `child` under `parent` and indexes it for matching, unless `parent` already has a child
// with the same composite key (key, or key and value): then `child` is left as it is and that
// first child is returned.
const RuleNode* AddChild(RuleNode& parent, std::unique_ptr<RuleNode>& child);

// "key_value", or "key" for a node without a value, as upstream names a node in messages.
std::string CompositeKey(const RuleNode& node);

// A domain's `http:` section (http_settings_parser.cc). Errors go to the reader; nullopt when
// `http` is not a map of its keys.
std::optional<HttpSection> ParseHttpSection(YamlReader& reader, const yaml::Node& http);

// The settings file. Errors go to the reader.
Settings ParseSettings(YamlReader& reader, const yaml::Node& doc);

// "10.0.0.0/8", "::1/128" or a bare address (a /32 or /128).
std::optional<Cidr> ParseCidr(std::string_view text);

}  // namespace sluice::rules

#endif  // SLUICE_RULES_PARSERS_H_
