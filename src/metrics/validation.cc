// What the registry accepts: metric and label names and histogram buckets (the text format's
// and promtool's lint rules; see Registry), and label values (bounded, valid UTF-8).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "metrics/registry_internal.h"

namespace sluice::metrics {
namespace {

// Histogram bounds must stay distinct and exact once converted to double.
constexpr int64_t kMaxHistogramBound = int64_t{1} << 53;

// ---- Names (text format and promtool lint rules; see Registry) -------------------------------

bool IsSnakeName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::vector<std::string_view> Components(std::string_view name) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t end = name.find('_', start);
    parts.push_back(name.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

// promlint's unitAbbreviations: discouraged as `_x_` or a `_x` suffix.
constexpr std::string_view kAbbreviatedUnits[] = {"s",  "ms", "us", "ns", "sec", "b", "kb",
                                                  "mb", "gb", "tb", "pb", "m",   "h", "d"};
// promlint's lintMetricTypeInName.
constexpr std::string_view kTypeNames[] = {"counter", "gauge", "histogram", "summary"};
// promlint's units: unit -> base unit.
constexpr std::pair<std::string_view, std::string_view> kUnits[] = {
    {"amperes", "amperes"},    {"bytes", "bytes"},     {"celsius", "celsius"},
    {"grams", "grams"},        {"joules", "joules"},   {"kelvin", "kelvin"},
    {"meters", "meters"},      {"metres", "metres"},   {"seconds", "seconds"},
    {"volts", "volts"},        {"minutes", "seconds"}, {"hours", "seconds"},
    {"days", "seconds"},       {"weeks", "seconds"},   {"kelvins", "kelvin"},
    {"fahrenheit", "celsius"}, {"rankine", "celsius"}, {"inches", "meters"},
    {"yards", "meters"},       {"miles", "meters"},    {"bits", "bytes"},
    {"calories", "joules"},    {"pounds", "grams"},    {"ounces", "grams"}};
constexpr std::string_view kUnitPrefixes[] = {
    "",     "pico", "nano", "micro", "milli", "centi", "deci", "deca", "hecto", "kilo",
    "kibi", "mega", "mibi", "giga",  "gibi",  "tera",  "tebi", "peta", "pebi"};

// The base unit to use instead of `component`, or empty if it is no unit or already a base one.
std::string_view NonBaseUnit(std::string_view component) {
  for (const auto& [unit, base] : kUnits) {
    for (std::string_view prefix : kUnitPrefixes) {
      if (component.size() == prefix.size() + unit.size() && component.starts_with(prefix) &&
          component.ends_with(unit)) {
        return prefix.empty() && unit == base ? std::string_view() : base;
      }
    }
  }
  return {};
}

}  // namespace

absl::Status InvalidName(std::string_view name, std::string_view why) {
  return absl::InvalidArgumentError(fmt::format("metric {:?}: {}", name, why));
}

absl::Status ValidateMetricName(std::string_view name, MetricType type) {
  if (!IsSnakeName(name) || name.starts_with("__")) {
    return InvalidName(name, "a name is [a-z_][a-z0-9_]* without a `__` prefix");
  }
  const bool total = name.ends_with("_total");
  if (type == MetricType::kCounter && !total) return InvalidName(name, "a counter ends in _total");
  if (type != MetricType::kCounter && total) {
    return InvalidName(name, "only a counter ends in _total");
  }
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.ends_with(suffix)) {
      return InvalidName(name, fmt::format("{} is reserved for histograms' series", suffix));
    }
  }
  const std::vector<std::string_view> parts = Components(name);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      for (std::string_view abbreviation : kAbbreviatedUnits) {
        if (parts[i] == abbreviation) {
          return InvalidName(name, fmt::format("abbreviated unit _{}", abbreviation));
        }
      }
      for (std::string_view type_name : kTypeNames) {
        if (parts[i] == type_name) {
          return InvalidName(name, fmt::format("holds the type name {}", type_name));
        }
      }
    }
    if (std::string_view base = NonBaseUnit(parts[i]); !base.empty()) {
      return InvalidName(name, fmt::format("use the base unit {} instead of {}", base, parts[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelNames(std::string_view name, const std::vector<std::string>& labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& label = labels[i];
    if (!IsSnakeName(label) || label.starts_with("__")) {
      return InvalidName(name, fmt::format("label {:?} is not [a-z_][a-z0-9_]* without a `__` "
                                           "prefix",
                                           label));
    }
    if (label == "le" || label == "quantile") {
      return InvalidName(name, fmt::format("label {:?} is reserved", label));
    }
    if (std::find(labels.begin(), labels.begin() + static_cast<ptrdiff_t>(i), label) !=
        labels.begin() + static_cast<ptrdiff_t>(i)) {
      return InvalidName(name, fmt::format("label {:?} given twice", label));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBuckets(std::string_view name, const HistogramBuckets& buckets) {
  if (buckets.bounds.empty() || buckets.bounds.size() > kMaxHistogramBounds) {
    return InvalidName(name, fmt::format("a histogram has 1 to {} bucket bounds, not {}",
                                         kMaxHistogramBounds, buckets.bounds.size()));
  }
  for (size_t i = 0; i < buckets.bounds.size(); ++i) {
    const int64_t bound = buckets.bounds[i];
    if (bound < 0 || bound > kMaxHistogramBound) {
      return InvalidName(name, fmt::format("bucket bound {} is not in [0, 2^53]", bound));
    }
    if (i > 0 && bound <= buckets.bounds[i - 1]) {
      return InvalidName(name, "bucket bounds must be strictly increasing");
    }
  }
  if (buckets.unit_divisor < 1) return InvalidName(name, "unit_divisor must be at least 1");
  return absl::OkStatus();
}

namespace {

// ---- Label values ----------------------------------------------------------------------------

// UTF-8 as Go's utf8.ValidString has it: no overlong forms, surrogates or code points above
// U+10FFFF (Prometheus rejects label values that are not valid UTF-8).
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (s.size() - i < n) return false;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return false;
    for (size_t k = 2; k < n; ++k) {
      const auto ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

bool AcceptableLabelValue(std::string_view value) {
  return value.size() <= kMaxLabelValueBytes && IsValidUtf8(value);
}

}  // namespace sluice::metrics
