// YamlReader: typed, position-aware access to a parsed YAML document.
//
// Every problem becomes a ConfigError at the offending node's FILE:LINE:COL and parsing goes on,
// so one run reports every error in a file. yaml-cpp's exceptions never leave this class.

#ifndef SLUICE_RULES_YAML_READER_H_
#define SLUICE_RULES_YAML_READER_H_

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rules/config.h"
#include "rules/loader.h"

namespace sluice::rules {

class YamlReader {
 public:
  YamlReader(std::string file, std::vector<ConfigError>* errors)
      : file_(std::move(file)), errors_(errors) {}

  const std::string& file() const { return file_; }
  Position PositionOf(const YAML::Node& node) const;
  void Error(const YAML::Node& node, std::string message);
  void ErrorAt(const Position& position, std::string message);
  // Where a field is: its value, or its key when the value is empty (yaml-cpp marks an empty
  // value at the next token), or the map itself when the field is absent.
  Position FieldPosition(const YAML::Node& map, const char* key) const;
  size_t error_count() const { return errors_->size(); }

  // map[key], without yaml-cpp's costs: its const operator[] builds a missing key's undefined
  // node with a std::stringstream (a descriptor is looked up for a dozen optional keys it does
  // not have), and walking a map's entries copies two reference-counted nodes a step. So the
  // entries of the map last asked about are kept by name, and looked up there while the same map
  // is asked about again (a descriptor's fields are read one after another). The value node, or
  // an undefined node (IsDefined() false) when `map` is not a map or has no such key.
  YAML::Node Field(const YAML::Node& map, std::string_view key);

  // True if `node` is a map whose keys are all strings in `known`, each once. Unknown keys are
  // reported with a did-you-mean suggestion; `what` names the context ("rate_limit").
  bool CheckMap(const YAML::Node& node, std::string_view what,
                const std::vector<std::string_view>& known);
  bool CheckSequence(const YAML::Node& node, std::string_view what);

  // Typed fields of a map; nullopt when absent (no error) or malformed (error reported).
  std::optional<std::string> String(const YAML::Node& map, const char* key);
  std::optional<bool> Bool(const YAML::Node& map, const char* key);
  std::optional<uint64_t> Unsigned(const YAML::Node& map, const char* key, uint64_t max);
  std::optional<int64_t> Duration(const YAML::Node& map, const char* key);
  // A list of strings.
  std::optional<std::vector<std::string>> Strings(const YAML::Node& map, const char* key);

  // The same conversions for a node in hand.
  std::optional<std::string> AsString(const YAML::Node& node, std::string_view what);
  std::optional<uint64_t> AsUnsigned(const YAML::Node& node, std::string_view what, uint64_t max);

  // A map as a JSON object (maps, lists, and scalars typed as YAML 1.2's core schema reads them
  // unquoted: true/false, null, numbers; quoted ones stay strings), for `metadata`; nullopt,
  // with an error, when it is not a map.
  std::optional<std::string> MapAsJson(const YAML::Node& node, std::string_view what);

 private:
  std::string file_;
  std::vector<ConfigError>* errors_;
  struct Entry {
    YAML::Node key, value;
  };
  // The entries of `map` (a map), from the cache when it is the map last asked about.
  const std::vector<Entry>& EntriesOf(const YAML::Node& map);
  std::optional<YAML::Node> entries_of_;  // the map whose entries entries_ holds
  std::vector<Entry> entries_;
};

}  // namespace sluice::rules

#endif  // SLUICE_RULES_YAML_READER_H_
