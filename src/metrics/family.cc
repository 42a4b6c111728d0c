// Family<T>: a family's children by label values, in a slot table read without a lock, up to
// max_children and then the overflow child; and its series in the text exposition.
#include <algorithm>
#include <atomic>
#include <bit>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "metrics/registry.h"
#include "metrics/registry_internal.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::metrics {
namespace {

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

}  // namespace

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

}  // namespace sluice::metrics
