// Internal to the loader: YAML document -> Domain / Settings.

#ifndef SLUICE_RULES_PARSERS_H_
#define SLUICE_RULES_PARSERS_H_

#include <memory>
#include <optional>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "rules/config.h"
#include "rules/yaml_reader.h"

namespace sluice::rules {

// A domain file. Errors go to the reader; the result is null if there were any.
std::unique_ptr<Domain> ParseDomain(YamlReader& reader, const YAML::Node& doc);

// The settings file. Errors go to the reader.
Settings ParseSettings(YamlReader& reader, const YAML::Node& doc);

// "10.0.0.0/8", "::1/128" or a bare address (a /32 or /128).
std::optional<Cidr> ParseCidr(std::string_view text);

}  // namespace sluice::rules

#endif  // SLUICE_RULES_PARSERS_H_
