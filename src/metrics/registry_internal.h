// The registry's insides, shared by its files: what it accepts (validation.cc) and how it
// writes the text exposition (exposition.cc), for the families (family.cc) and the registry
// (registry.cc). Not part of the metrics interface: only those include it. Pure functions, safe
// from any thread.

#ifndef SLUICE_METRICS_REGISTRY_INTERNAL_H_
#define SLUICE_METRICS_REGISTRY_INTERNAL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "metrics/registry.h"

namespace sluice::metrics {

// --- validation.cc: names and values (text format and promtool lint rules; see Registry)

// InvalidArgument: `metric "name": why`.
absl::Status InvalidName(std::string_view name, std::string_view why);

// The checks of Registry's naming rules for a family's name (by its type), its label names and
// a histogram's buckets.
absl::Status ValidateMetricName(std::string_view name, MetricType type);
absl::Status ValidateLabelNames(std::string_view name, const std::vector<std::string>& labels);
absl::Status ValidateBuckets(std::string_view name, const HistogramBuckets& buckets);

// Whether a label value may have a child of its own: at most kMaxLabelValueBytes of valid UTF-8
// (else the overflow child).
bool AcceptableLabelValue(std::string_view value);

// --- exposition.cc: the text format 0.0.4

// `# HELP` (escaped) and `# TYPE` lines of a family.
void AppendHeader(std::string* out, const MetricDesc& desc, MetricType type);

// `name{a="x",b="y"[,extra_name="extra_value"]} value\n`.
void AppendSeries(std::string* out, std::string_view name, std::string_view suffix,
                  const std::vector<std::string>& label_names,
                  const std::vector<std::string>& label_values, std::string_view extra_name,
                  std::string_view extra_value, std::string_view value);

// value / divisor, correctly rounded: a histogram's integer unit in base units.
double Scaled(uint64_t value, int64_t divisor);

}  // namespace sluice::metrics

#endif  // SLUICE_METRICS_REGISTRY_INTERNAL_H_
