// YamlReader: typed, position-aware access to a parsed YAML document.
//
// Every problem becomes a ConfigError at the offending node's FILE:LINE:COL and parsing goes on,
// so one run reports every error in a file.

#ifndef SLUICE_RULES_YAML_READER_H_
#define SLUICE_RULES_YAML_READER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rules/config.h"
#include "rules/loader.h"
#include "rules/yaml_tree.h"

namespace sluice::rules {

class YamlReader {
 public:
  YamlReader(std::string file, std::vector<ConfigError>* errors)
      : file_(std::move(file)), errors_(errors) {}

  const std::string& file() const { return file_; }
  Position PositionOf(const yaml::Node& node) const;
  void Error(const yaml::Node& node, std::string message);
  void ErrorAt(const Position& position, std::string message);
  // Where a field is: its value, or its key when the value is empty (null), or the map itself
  // when the field is absent.
  Position FieldPosition(const yaml::Node& map, const char* key) const;
  size_t error_count() const { return errors_->size(); }

  // True if `node` is a map whose keys are all strings in `known`, each once. Unknown keys are
  // reported with a did-you-mean suggestion; `what` names the context ("rate_limit").
  bool CheckMap(const yaml::Node& node, std::string_view what,
                const std::vector<std::string_view>& known);
  bool CheckSequence(const yaml::Node& node, std::string_view what);

  // Typed fields of a map; nullopt when absent (no error) or malformed (error reported).
  std::optional<std::string> String(const yaml::Node& map, const char* key);
  std::optional<bool> Bool(const yaml::Node& map, const char* key);
  std::optional<uint64_t> Unsigned(const yaml::Node& map, const char* key, uint64_t max);
  std::optional<int64_t> Duration(const yaml::Node& map, const char* key);
  // A number from `min` to `max` (an error naming `what` and the range otherwise).
  std::optional<double> Number(const yaml::Node& map, const char* key, std::string_view what,
                               double min, double max);
  // A list of strings.
  std::optional<std::vector<std::string>> Strings(const yaml::Node& map, const char* key);

  // The same conversions for a node in hand.
  std::optional<std::string> AsString(const yaml::Node& node, std::string_view what);
  std::optional<uint64_t> AsUnsigned(const yaml::Node& node, std::string_view what, uint64_t max);

  // A map as a JSON object (maps, lists, and scalars typed as YAML 1.2's core schema reads them
  // unquoted: true/false, null, numbers; quoted ones stay strings), for `metadata`; nullopt,
  // with an error, when it is not a map.
  std::optional<std::string> MapAsJson(const yaml::Node& node, std::string_view what);

 private:
  std::string file_;
  std::vector<ConfigError>* errors_;
};

}  // namespace sluice::rules

#endif  // SLUICE_RULES_YAML_READER_H_
