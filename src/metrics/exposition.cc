// The text exposition format 0.0.4: a family's `# HELP` and `# TYPE` lines, its series with their
// labels escaped, and values as Prometheus prints them.
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "metrics/registry_internal.h"

namespace sluice::metrics {
namespace {

// ---- Rendering -------------------------------------------------------------------------------

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// HELP text: backslash and line feed escaped (text format 0.0.4).
void AppendEscapedHelp(std::string* out, std::string_view help) {
  for (char c : help) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

// Label values: backslash, double quote and line feed escaped (text format 0.0.4).
void AppendEscapedLabelValue(std::string* out, std::string_view value) {
  for (char c : value) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '"') {
      out->append("\\\"");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

}  // namespace

void AppendHeader(std::string* out, const MetricDesc& desc, MetricType type) {
  out->append("# HELP ").append(desc.name).push_back(' ');
  AppendEscapedHelp(out, desc.help);
  out->append("\n# TYPE ").append(desc.name).push_back(' ');
  out->append(TypeName(type)).push_back('\n');
}

// `name{a="x",b="y"[,extra_name="extra_value"]} value\n`.
void AppendSeries(std::string* out, std::string_view name, std::string_view suffix,
                  const std::vector<std::string>& label_names,
                  const std::vector<std::string>& label_values, std::string_view extra_name,
                  std::string_view extra_value, std::string_view value) {
  out->append(name).append(suffix);
  if (!label_names.empty() || !extra_name.empty()) {
    out->push_back('{');
    for (size_t i = 0; i < label_names.size(); ++i) {
      if (i > 0) out->push_back(',');
      out->append(label_names[i]).append("=\"");
      AppendEscapedLabelValue(out, label_values[i]);
      out->push_back('"');
    }
    if (!extra_name.empty()) {
      if (!label_names.empty()) out->push_back(',');
      out->append(extra_name).append("=\"");
      AppendEscapedLabelValue(out, extra_value);
      out->push_back('"');
    }
    out->push_back('}');
  }
  out->push_back(' ');
  out->append(value).push_back('\n');
}

double Scaled(uint64_t value, int64_t divisor) {
  // A division of two exactly representable numbers is correctly rounded: 50 / 1e6 prints as
  // 5e-05, where 50 * 1e-6 would not.
  return static_cast<double>(value) / static_cast<double>(divisor);
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

}  // namespace sluice::metrics
