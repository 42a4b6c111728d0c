#include "metrics/registry.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "metrics/registry_internal.h"

namespace sluice::metrics {
namespace {

// Label sets per family, at most (bounds the slot table of a family).
constexpr size_t kMaxChildrenLimit = size_t{1} << 20;

// A family whose series come from a callback at scrape time.
class CallbackFamily final : public internal::FamilyBase {
 public:
  CallbackFamily(MetricDesc desc, MetricType type, CollectFn collect)
      : FamilyBase(std::move(desc), type), collect_(std::move(collect)) {}

  void AppendTo(std::string* out) const override {
    std::vector<CallbackSample> samples = collect_();
    std::erase_if(samples, [this](const CallbackSample& s) {
      if (s.label_values.size() != desc_.label_names.size()) return true;
      return !std::all_of(s.label_values.begin(), s.label_values.end(),
                          [](const std::string& v) { return AcceptableLabelValue(v); });
    });
    if (samples.empty()) return;
    std::stable_sort(samples.begin(), samples.end(),
                     [](const CallbackSample& a, const CallbackSample& b) {
                       return a.label_values < b.label_values;
                     });
    samples.erase(std::unique(samples.begin(), samples.end(),
                              [](const CallbackSample& a, const CallbackSample& b) {
                                return a.label_values == b.label_values;
                              }),
                  samples.end());
    AppendHeader(out, desc_, type_);
    for (const CallbackSample& s : samples) {
      AppendSeries(out, desc_.name, "", desc_.label_names, s.label_values, "", "",
                   FormatMetricValue(s.value));
    }
  }

 private:
  const CollectFn collect_;
};

}  // namespace

// ---- Registry --------------------------------------------------------------------------------

Registry::~Registry() = default;

absl::Status Registry::Validate(const MetricDesc& desc, MetricType type) const {
  if (absl::Status s = ValidateMetricName(desc.name, type); !s.ok()) return s;
  if (absl::Status s = ValidateLabelNames(desc.name, desc.label_names); !s.ok()) return s;
  if (desc.help.empty()) return InvalidName(desc.name, "help text is required");
  if (desc.max_children < 1 || desc.max_children > kMaxChildrenLimit) {
    return InvalidName(desc.name,
                       fmt::format("max_children must be in [1, {}]", kMaxChildrenLimit));
  }
  if (families_.contains(desc.name)) {
    return absl::AlreadyExistsError(fmt::format("metric {:?} is already registered", desc.name));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<Family<T>*> Registry::AddFamily(MetricDesc desc, MetricType type,
                                               HistogramBuckets buckets) {
  util::SpinLockHolder lock(&mu_);
  if (absl::Status s = Validate(desc, type); !s.ok()) return s;
  if (type == MetricType::kHistogram) {
    if (absl::Status s = ValidateBuckets(desc.name, buckets); !s.ok()) return s;
  }
  std::string name = desc.name;
  auto family = std::make_unique<Family<T>>(std::move(desc), type, std::move(buckets.bounds),
                                            buckets.unit_divisor);
  Family<T>* raw = family.get();
  families_.emplace(std::move(name), std::move(family));
  return raw;
}

absl::StatusOr<Family<Counter>*> Registry::AddCounter(MetricDesc desc) {
  return AddFamily<Counter>(std::move(desc), MetricType::kCounter, {});
}

absl::StatusOr<Family<Gauge>*> Registry::AddGauge(MetricDesc desc) {
  return AddFamily<Gauge>(std::move(desc), MetricType::kGauge, {});
}

absl::StatusOr<Family<Histogram>*> Registry::AddHistogram(MetricDesc desc,
                                                          HistogramBuckets buckets) {
  return AddFamily<Histogram>(std::move(desc), MetricType::kHistogram, std::move(buckets));
}

absl::Status Registry::AddCallback(MetricDesc desc, MetricType type, CollectFn collect) {
  if (type == MetricType::kHistogram) {
    return InvalidName(desc.name, "a callback family is a counter or a gauge");
  }
  if (!collect) return InvalidName(desc.name, "no callback");
  util::SpinLockHolder lock(&mu_);
  if (absl::Status s = Validate(desc, type); !s.ok()) return s;
  std::string name = desc.name;
  families_.emplace(std::move(name),
                    std::make_unique<CallbackFamily>(std::move(desc), type, std::move(collect)));
  return absl::OkStatus();
}

absl::Status Registry::AddCallbackGauge(std::string name, std::string help,
                                        std::function<double()> fn) {
  if (!fn) return InvalidName(name, "no callback");
  return AddCallback({.name = std::move(name), .help = std::move(help)}, MetricType::kGauge,
                     [fn = std::move(fn)] {
                       return std::vector<CallbackSample>{{{}, fn()}};
                     });
}

absl::Status Registry::AddCallbackCounter(std::string name, std::string help,
                                          std::function<double()> fn) {
  if (!fn) return InvalidName(name, "no callback");
  return AddCallback({.name = std::move(name), .help = std::move(help)}, MetricType::kCounter,
                     [fn = std::move(fn)] {
                       return std::vector<CallbackSample>{{{}, fn()}};
                     });
}

std::string Registry::Render() const {
  std::string out;
  util::SpinLockHolder lock(&mu_);
  out.reserve(256 * families_.size());
  for (const auto& [name, family] : families_) family->AppendTo(&out);
  return out;
}

}  // namespace sluice::metrics
