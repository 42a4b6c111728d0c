#include "rules/yaml_reader.h"

#include <charconv>
#include <cmath>

#include "fmt/format.h"
#include "util/json_string.h"

namespace sluice::rules {

namespace {

void AppendJson(const yaml::Node& node, std::string* out) {
  if (node.IsMap()) {
    out->push_back('{');
    bool first = true;
    for (const yaml::Entry& e : node.entries()) {
      if (!first) out->push_back(',');
      first = false;
      util::AppendJsonString(out, e.key.Scalar());
      out->push_back(':');
      AppendJson(e.value, out);
    }
    out->push_back('}');
  } else if (node.IsSequence()) {
    out->push_back('[');
    bool first = true;
    for (const yaml::Node& item : node.items()) {
      if (!first) out->push_back(',');
      first = false;
      AppendJson(item, out);
    }
    out->push_back(']');
  } else if (!node.IsScalar()) {
    *out += "null";
  } else {
    const std::string& text = node.Scalar();
    if (!node.Quoted()) {  // unquoted: maybe a bool or a number
      if (text == "true" || text == "false") {
        *out += text;
        return;
      }
      double number = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
      if (ec == std::errc() && end == text.data() + text.size() && std::isfinite(number)) {
        *out += fmt::format("{}", number);
        return;
      }
    }
    util::AppendJsonString(out, text);
  }
}

}  // namespace

std::optional<std::string> YamlReader::MapAsJson(const yaml::Node& node, std::string_view what) {
  if (!node.IsMap()) {
    Error(node, fmt::format("{} must be a map", what));
    return std::nullopt;
  }
  std::string out;
  AppendJson(node, &out);
  return out;
}

Position YamlReader::PositionOf(const yaml::Node& node) const {
  const yaml::Mark mark = node.GetMark();
  if (mark.is_null()) return {file_, 0, 0};
  return {file_, mark.line + 1, mark.column + 1};
}

void YamlReader::Error(const yaml::Node& node, std::string message) {
  ErrorAt(PositionOf(node), std::move(message));
}

Position YamlReader::FieldPosition(const yaml::Node& map, const char* key) const {
  for (const yaml::Entry& e : map.entries()) {
    if (e.key.IsScalar() && e.key.Scalar() == key) {
      return PositionOf(e.value.IsNull() ? e.key : e.value);
    }
  }
  return PositionOf(map);
}

void YamlReader::ErrorAt(const Position& position, std::string message) {
  ConfigError error;
  error.position = position;
  error.message = std::move(message);
  errors_->push_back(std::move(error));
}

bool YamlReader::CheckMap(const yaml::Node& node, std::string_view what,
                          const std::vector<std::string_view>& known) {
  if (!node.IsMap()) {
    Error(node, fmt::format("{} must be a map", what));
    return false;
  }
  bool ok = true;
  const std::span<const yaml::Entry> entries = node.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const yaml::Node& key = entries[i].key;
    if (!key.IsScalar()) {
      Error(key, fmt::format("{}: key is not a string", what));
      ok = false;
      continue;
    }
    const std::string& name = key.Scalar();
    for (size_t j = 0; j < i; ++j) {  // (a map has a handful of keys)
      if (entries[j].key.IsScalar() && entries[j].key.Scalar() == name) {
        Error(key, fmt::format("duplicate key '{}' in {}", name, what));
        ok = false;
        break;
      }
    }
    bool found = false;
    for (std::string_view k : known) found = found || k == name;
    if (!found) {
      const std::string hint = Suggest(name, known);
      Error(key, fmt::format("unknown key '{}' in {}{}", name, what,
                             hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
      ok = false;
    }
  }
  return ok;
}

bool YamlReader::CheckSequence(const yaml::Node& node, std::string_view what) {
  if (node.IsSequence()) return true;
  Error(node, fmt::format("{} must be a list", what));
  return false;
}

std::optional<std::string> YamlReader::AsString(const yaml::Node& node, std::string_view what) {
  if (!node.IsScalar()) {
    Error(node, fmt::format("{} must be a string", what));
    return std::nullopt;
  }
  return node.Scalar();
}

std::optional<uint64_t> YamlReader::AsUnsigned(const yaml::Node& node, std::string_view what,
                                               uint64_t max) {
  if (!node.IsScalar()) {
    Error(node, fmt::format("{} must be an integer", what));
    return std::nullopt;
  }
  const std::string& text = node.Scalar();
  if (!text.empty() && text[0] == '-') {
    Error(node, fmt::format("{} must not be negative, got {}", what, text));
    return std::nullopt;
  }
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && value > max)) {
    Error(node, fmt::format("{} must be at most {}, got {}", what, max, text));
    return std::nullopt;
  }
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    Error(node, fmt::format("{} must be an integer, got '{}'", what, text));
    return std::nullopt;
  }
  return value;
}

std::optional<std::string> YamlReader::String(const yaml::Node& map, const char* key) {
  const yaml::Node node = map[key];
  if (!node.IsDefined() || node.IsNull()) return std::nullopt;
  return AsString(node, key);
}

std::optional<bool> YamlReader::Bool(const yaml::Node& map, const char* key) {
  const yaml::Node node = map[key];
  if (!node.IsDefined() || node.IsNull()) return std::nullopt;
  const std::optional<bool> value =
      node.IsScalar() ? yaml::AsBool(node.Scalar()) : std::optional<bool>();
  if (!value) Error(node, fmt::format("{} must be true or false", key));
  return value;
}

std::optional<uint64_t> YamlReader::Unsigned(const yaml::Node& map, const char* key, uint64_t max) {
  const yaml::Node node = map[key];
  if (!node.IsDefined() || node.IsNull()) return std::nullopt;
  return AsUnsigned(node, key, max);
}

std::optional<int64_t> YamlReader::Duration(const yaml::Node& map, const char* key) {
  const yaml::Node node = map[key];
  if (!node.IsDefined() || node.IsNull()) return std::nullopt;
  if (!node.IsScalar()) {
    Error(node, fmt::format("{} must be a duration such as 30s", key));
    return std::nullopt;
  }
  auto d = ParseDuration(node.Scalar());
  if (!d.ok()) {
    Error(node, fmt::format("{}: {}", key, std::string(d.status().message())));
    return std::nullopt;
  }
  return *d;
}

std::optional<double> YamlReader::Number(const yaml::Node& map, const char* key,
                                         std::string_view what, double min, double max) {
  const yaml::Node node = map[key];
  if (!node.IsDefined()) return std::nullopt;
  const std::optional<double> value =
      node.IsScalar() ? yaml::AsNumber(node.Scalar()) : std::optional<double>();
  if (!value || *value < min || *value > max) {
    Error(node, fmt::format("{} must be a number from {} to {}", what, min, max));
    return std::nullopt;
  }
  return value;
}

std::optional<std::vector<std::string>> YamlReader::Strings(const yaml::Node& map,
                                                            const char* key) {
  const yaml::Node node = map[key];
  if (!node.IsDefined() || node.IsNull()) return std::nullopt;
  if (!CheckSequence(node, key)) return std::nullopt;
  std::vector<std::string> out;
  for (const yaml::Node& item : node.items()) {
    auto s = AsString(item, key);
    if (!s) return std::nullopt;
    out.push_back(*s);
  }
  return out;
}

}  // namespace sluice::rules
