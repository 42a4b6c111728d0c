#include "metrics/registry.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <type_traits>
#include <utility>

#include "fmt/format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::metrics {
namespace {

// Label sets per family, at most (bounds the slot table of a family).
constexpr size_t kMaxChildrenLimit = size_t{1} << 20;
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

bool AcceptableLabelValue(std::string_view value) {
  return value.size() <= kMaxLabelValueBytes && IsValidUtf8(value);
}

// Each value hashed with the previous hash as its seed, so the order counts. XXH3 rather than
// std::hash: this runs for every decision counted, and XXH3 takes a short string in a few
// instructions. (Only slot placement depends on it; nothing outside this file sees it.)
template <typename Strings>
size_t HashLabels(const Strings& values) {
  uint64_t h = 0x9e3779b97f4a7c15u;
  for (const auto& v : values) {
    const std::string_view text(v);
    h = XXH3_64bits_withSeed(text.data(), text.size(), h);
  }
  return static_cast<size_t>(h);
}

bool SameLabels(const std::vector<std::string>& stored, std::span<const std::string_view> values) {
  if (stored.size() != values.size()) return false;
  for (size_t i = 0; i < values.size(); ++i) {
    if (stored[i] != values[i]) return false;
  }
  return true;
}

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

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

// ---- Histogram -------------------------------------------------------------------------------

size_t internal::NextStripe() {
  static std::atomic<size_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) % kStripes;
}

uint64_t Counter::Value() const {
  uint64_t n = 0;
  for (const Stripe& stripe : stripes_) n += stripe.value.load(std::memory_order_relaxed);
  return n;
}

uint64_t Histogram::Count() const {
  uint64_t n = 0;
  for (const uint64_t count : BucketCounts()) n += count;
  return n;
}

uint64_t Histogram::Sum() const {
  uint64_t n = 0;
  for (const Stripe& stripe : stripes_) n += stripe.sum.load(std::memory_order_relaxed);
  return n;
}

std::vector<uint64_t> Histogram::BucketCounts() const {
  std::vector<uint64_t> counts(bounds_.size() + 1);
  for (const Stripe& stripe : stripes_) {
    for (size_t i = 0; i < counts.size(); ++i) {
      counts[i] += stripe.counts[i].load(std::memory_order_relaxed);
    }
  }
  return counts;
}

// ---- Family ----------------------------------------------------------------------------------

template <typename T>
Family<T>::Family(MetricDesc desc, MetricType type, std::vector<int64_t> histogram_bounds,
                  int64_t unit_divisor)
    : FamilyBase(std::move(desc), type),
      bounds_(std::move(histogram_bounds)),
      unit_divisor_(unit_divisor) {
  const size_t capacity = std::bit_ceil(std::max<size_t>(2 * (desc_.max_children + 1), 4));
  slot_mask_ = capacity - 1;
  slots_ = std::make_unique<std::atomic<const Child*>[]>(capacity);
  for (size_t i = 0; i < capacity; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
  if (desc_.label_names.empty()) {
    util::SpinLockHolder lock(&mu_);
    ++regular_children_;
    full_.store(true, std::memory_order_relaxed);
    overflow_.store(Insert(HashLabels(std::span<const std::string_view>()), {}),
                    std::memory_order_release);
  }
}

template <typename T>
Family<T>::~Family() = default;

template <typename T>
std::unique_ptr<T> Family<T>::NewMetric() const {
  if constexpr (std::is_same_v<T, Histogram>) {
    return std::make_unique<Histogram>(std::span<const int64_t>(bounds_));
  } else {
    return std::make_unique<T>();
  }
}

template <typename T>
const typename Family<T>::Child* Family<T>::Find(size_t hash,
                                                 std::span<const std::string_view> values) const {
  for (size_t i = hash & slot_mask_;; i = (i + 1) & slot_mask_) {
    const Child* child = slots_[i].load(std::memory_order_acquire);
    if (child == nullptr) return nullptr;
    if (child->hash == hash && SameLabels(child->label_values, values)) return child;
  }
}

template <typename T>
T* Family<T>::Insert(size_t hash, std::span<const std::string_view> values) {
  auto child = std::make_unique<Child>();
  child->hash = hash;
  child->label_values.assign(values.begin(), values.end());
  child->metric = NewMetric();
  T* metric = child->metric.get();
  size_t i = hash & slot_mask_;
  while (slots_[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & slot_mask_;
  slots_[i].store(child.get(), std::memory_order_release);
  children_.push_back(std::move(child));
  return metric;
}

template <typename T>
T* Family<T>::WithLabels(std::span<const std::string_view> label_values) {
  if (label_values.size() != desc_.label_names.size()) return Overflow();
  const size_t hash = HashLabels(label_values);
  if (const Child* child = Find(hash, label_values)) return child->metric.get();
  if (full_.load(std::memory_order_relaxed)) return Overflow();
  if (!std::all_of(label_values.begin(), label_values.end(), AcceptableLabelValue)) {
    return Overflow();
  }
  {
    util::SpinLockHolder lock(&mu_);
    if (const Child* child = Find(hash, label_values)) return child->metric.get();
    if (regular_children_ < desc_.max_children) {
      if (++regular_children_ == desc_.max_children) full_.store(true, std::memory_order_relaxed);
      return Insert(hash, label_values);
    }
  }
  return Overflow();
}

template <typename T>
T* Family<T>::Overflow() {
  if (T* overflow = overflow_.load(std::memory_order_acquire)) return overflow;
  util::SpinLockHolder lock(&mu_);
  if (T* overflow = overflow_.load(std::memory_order_relaxed)) return overflow;
  const std::vector<std::string_view> values(desc_.label_names.size(), kOverflowLabelValue);
  const size_t hash = HashLabels(values);
  const Child* existing = Find(hash, values);  // a genuine label set of all `other`
  T* overflow = existing != nullptr ? existing->metric.get() : Insert(hash, values);
  overflow_.store(overflow, std::memory_order_release);
  return overflow;
}

template <typename T>
size_t Family<T>::size() const {
  util::SpinLockHolder lock(&mu_);
  return children_.size();
}

template <typename T>
void Family<T>::AppendTo(std::string* out) const {
  std::vector<const Child*> children;
  {
    util::SpinLockHolder lock(&mu_);
    children.reserve(children_.size());
    for (const auto& child : children_) children.push_back(child.get());
  }
  if (children.empty()) return;
  std::sort(children.begin(), children.end(),
            [](const Child* a, const Child* b) { return a->label_values < b->label_values; });
  AppendHeader(out, desc_, type_);
  const std::string& name = desc_.name;
  const std::vector<std::string>& labels = desc_.label_names;
  for (const Child* child : children) {
    const T& m = *child->metric;
    if constexpr (std::is_same_v<T, Counter>) {
      AppendSeries(out, name, "", labels, child->label_values, "", "",
                   fmt::format("{}", m.Value()));
    } else if constexpr (std::is_same_v<T, Gauge>) {
      AppendSeries(out, name, "", labels, child->label_values, "", "",
                   FormatMetricValue(m.Value()));
    } else {
      // Load the buckets first and derive _count from them, so _count always equals +Inf.
      const std::vector<uint64_t> counts = m.BucketCounts();
      const uint64_t sum = m.Sum();
      uint64_t cumulative = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        cumulative += counts[i];
        const std::string le =
            i < bounds_.size()
                ? FormatMetricValue(Scaled(static_cast<uint64_t>(bounds_[i]), unit_divisor_))
                : std::string("+Inf");
        AppendSeries(out, name, "_bucket", labels, child->label_values, "le", le,
                     fmt::format("{}", cumulative));
      }
      AppendSeries(out, name, "_sum", labels, child->label_values, "", "",
                   FormatMetricValue(Scaled(sum, unit_divisor_)));
      AppendSeries(out, name, "_count", labels, child->label_values, "", "",
                   fmt::format("{}", cumulative));
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

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
