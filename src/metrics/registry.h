// Prometheus metrics, written by hand (Debian has no Prometheus C++ client): a Registry owns
// metric families (counters, gauges, histograms) and renders them in the text exposition format
// 0.0.4, clean under `promtool check metrics`.
//
// Thread safety: Registry, Family, Counter, Gauge and Histogram are safe for concurrent use
// without external synchronization; Render() may run while metrics are updated. Ownership: the
// registry owns its families and children; a child's pointer stays valid for its lifetime.
// Bounded: at most `max_children` label sets per family, the rest share one overflow child.
// Units: base units (seconds, bytes); histograms observe an integer unit over `unit_divisor`.
//
// Design: docs/design.md#the-metrics-registry (naming rules, hot path, cardinality, rendering).

#ifndef SLUICE_METRICS_REGISTRY_H_
#define SLUICE_METRICS_REGISTRY_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "util/spin_lock.h"

namespace sluice::metrics {

// The Content-Type of Registry::Render()'s output.
inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// The label value of every label of a family's overflow child (docs/design.md).
inline constexpr std::string_view kOverflowLabelValue = "other";
// Label values longer than this go to the overflow child.
inline constexpr size_t kMaxLabelValueBytes = 1024;
// Label sets per family unless MetricDesc says otherwise.
inline constexpr size_t kDefaultMaxChildren = 1000;
// Bucket upper bounds per histogram, at most (excluding +Inf).
inline constexpr size_t kMaxHistogramBounds = 32;

enum class MetricType { kCounter, kGauge, kHistogram };

struct MetricDesc {
  std::string name = {};                      // snake_case; see Registry for the naming rules
  std::string help = {};                      // non-empty; may hold any text (escaped on output)
  std::vector<std::string> label_names = {};  // snake_case, distinct, not `le`/`quantile`/`__*`
  // Label sets before the overflow child, in [1, 2^20].
  size_t max_children = kDefaultMaxChildren;
};

// Updates of one child from many threads (every request counts its status and decision) go to
// kStripes cache lines, a thread's chosen once: threads that share one line would move it
// between their cores on every update. Reading sums the stripes (scrapes are rare).
inline constexpr size_t kStripes = 8;
namespace internal {
size_t NextStripe();
// The calling thread's stripe: threads take them in turn as they first update a metric.
inline size_t ThisThreadsStripe() {
  thread_local const size_t stripe = NextStripe();
  return stripe;
}
}  // namespace internal

// A monotonic counter.
class Counter {
 public:
  void Inc(uint64_t n = 1) {
    stripes_[internal::ThisThreadsStripe()].value.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t Value() const;

 private:
  struct alignas(64) Stripe {
    std::atomic<uint64_t> value{0};
  };
  std::array<Stripe, kStripes> stripes_;
};

// A value that goes up and down.
class alignas(64) Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  void Inc() { Add(1); }
  void Dec() { Add(-1); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Bucket layout of a histogram family, fixed at registration.
struct HistogramBuckets {
  // Upper bounds (inclusive, `le`) in the unit passed to Observe; strictly increasing, >= 0,
  // 1 to kMaxHistogramBounds of them. The `+Inf` bucket is implicit.
  std::vector<int64_t> bounds;
  // Exposed value = observed value / unit_divisor, e.g. 1'000'000 to observe microseconds and
  // expose seconds as Prometheus wants (then name the family `..._seconds`).
  int64_t unit_divisor = 1;
};

// A distribution of integer observations over fixed buckets.
class Histogram {
 public:
  // `bounds` must outlive the histogram (the family owns them).
  explicit Histogram(std::span<const int64_t> bounds) : bounds_(bounds) {}

  // Records one observation; negative values count as 0. Two relaxed atomic adds, on the
  // calling thread's stripe.
  void Observe(int64_t value) {
    const uint64_t v = value < 0 ? 0 : static_cast<uint64_t>(value);
    size_t i = 0;
    while (i < bounds_.size() && static_cast<uint64_t>(bounds_[i]) < v) ++i;
    Stripe& stripe = stripes_[internal::ThisThreadsStripe()];
    stripe.counts[i].fetch_add(1, std::memory_order_relaxed);
    stripe.sum.fetch_add(v, std::memory_order_relaxed);
  }

  uint64_t Count() const;  // observations so far
  uint64_t Sum() const;    // in the observed unit
  // Observations per bucket (not cumulative); the last one is `+Inf`'s own.
  std::vector<uint64_t> BucketCounts() const;
  std::span<const int64_t> bounds() const { return bounds_; }

 private:
  struct alignas(64) Stripe {
    std::array<std::atomic<uint64_t>, kMaxHistogramBounds + 1> counts{};
    std::atomic<uint64_t> sum{0};
  };
  std::span<const int64_t> bounds_;
  std::array<Stripe, kStripes> stripes_;
};

namespace internal {

// What the registry knows of any family.
class FamilyBase {
 public:
  FamilyBase(MetricDesc desc, MetricType type) : desc_(std::move(desc)), type_(type) {}
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  // Appends `# HELP`, `# TYPE` and every series, or nothing when the family has no series.
  virtual void AppendTo(std::string* out) const = 0;

  const MetricDesc& desc() const { return desc_; }
  MetricType type() const { return type_; }

 protected:
  const MetricDesc desc_;
  const MetricType type_;
};

}  // namespace internal

// A family of children of type T (Counter, Gauge or Histogram) keyed by label values.
template <typename T>
class Family final : public internal::FamilyBase {
 public:
  // The registry builds families; see Registry::AddCounter and friends.
  Family(MetricDesc desc, MetricType type, std::vector<int64_t> histogram_bounds,
         int64_t unit_divisor);
  ~Family() override;

  // The child for `label_values` (one per label name, in order), created the first time.
  // Never null. See docs/design.md for its cost and for when the overflow child comes instead.
  T* WithLabels(std::span<const std::string_view> label_values);
  T* WithLabels(std::initializer_list<std::string_view> label_values) {
    return WithLabels(std::span<const std::string_view>(label_values.begin(), label_values.size()));
  }
  // The one child of a family without labels (for a labelled family: the overflow child).
  T* Get() { return WithLabels(std::span<const std::string_view>()); }

  // Label sets held, the overflow child included.
  size_t size() const;

  void AppendTo(std::string* out) const override;

 private:
  struct Child {
    size_t hash;
    std::vector<std::string> label_values;  // immutable once published
    std::unique_ptr<T> metric;
  };

  const Child* Find(size_t hash, std::span<const std::string_view> values) const;
  // Creates the child for `values` unless a racing caller did; requires a free slot.
  T* Insert(size_t hash, std::span<const std::string_view> values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  T* Overflow();
  std::unique_ptr<T> NewMetric() const;

  const std::vector<int64_t> bounds_;  // histograms only
  const int64_t unit_divisor_;
  // Open addressing, linear probing; sized for twice max_children + 1, so probes are short and
  // always reach an empty slot. Slots are only ever filled (release) and read (acquire).
  size_t slot_mask_;
  std::unique_ptr<std::atomic<const Child*>[]> slots_;
  std::atomic<bool> full_{false};      // max_children regular children exist
  std::atomic<T*> overflow_{nullptr};  // the overflow child, once it exists

  // Creation and listing only, never a lookup of an existing child. (A SpinLock rather than
  // absl::Mutex: Debian's absl is not built for ThreadSanitizer, which then cannot see it.)
  mutable util::SpinLock mu_;
  std::vector<std::unique_ptr<Child>> children_ ABSL_GUARDED_BY(mu_);
  size_t regular_children_ ABSL_GUARDED_BY(mu_) = 0;  // children but the overflow one
};

extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

// One series of a callback family.
struct CallbackSample {
  std::vector<std::string> label_values;  // one per label name
  double value = 0;
};
// Called at every Render() with the registry's lock held: must not call into the registry.
using CollectFn = std::function<std::vector<CallbackSample>()>;

// A set of metric families.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;
  ~Registry();

  // Registers a family. Errors (InvalidArgument, AlreadyExists) are programming errors in the
  // caller's names: every name is checked against the text format and promtool's lint rules:
  //   name   [a-z_][a-z0-9_]*, no `__` prefix; a counter's ends in `_total` and no other's
  //          does; none ends in `_bucket`, `_sum` or `_count`; no component is an abbreviated
  //          unit (s, ms, us, sec, b, kb, ... as promlint lists), a non-base unit (milliseconds,
  //          minutes, kilobytes, bits, ...) or a type name (counter, gauge, histogram, summary).
  //   labels [a-z_][a-z0-9_]*, distinct, not `le` or `quantile`, no `__` prefix.
  //   help   non-empty.
  // A family without labels has its one child from the start (rendered as 0); a labelled family
  // is rendered once it has a child.
  absl::StatusOr<Family<Counter>*> AddCounter(MetricDesc desc);
  absl::StatusOr<Family<Gauge>*> AddGauge(MetricDesc desc);
  absl::StatusOr<Family<Histogram>*> AddHistogram(MetricDesc desc, HistogramBuckets buckets);

  // A counter or gauge family whose series come from `collect` at scrape time (store entries,
  // counters kept elsewhere, config version info). Samples with the wrong number of label
  // values, or a value that is not valid UTF-8, are skipped; of duplicate label sets the first
  // is kept; `max_children` does not apply (the callback bounds its own output).
  absl::Status AddCallback(MetricDesc desc, MetricType type, CollectFn collect);
  // Shorthands for a callback family without labels.
  absl::Status AddCallbackGauge(std::string name, std::string help, std::function<double()> fn);
  absl::Status AddCallbackCounter(std::string name, std::string help, std::function<double()> fn);

  // The exposition (text format 0.0.4): families sorted by name, series by label values.
  std::string Render() const;

 private:
  absl::Status Validate(const MetricDesc& desc, MetricType type) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename T>
  absl::StatusOr<Family<T>*> AddFamily(MetricDesc desc, MetricType type, HistogramBuckets buckets);

  // Held while registering and rendering (callbacks included); registration is rare.
  mutable util::SpinLock mu_;
  std::map<std::string, std::unique_ptr<internal::FamilyBase>, std::less<>> families_
      ABSL_GUARDED_BY(mu_);
};

// Formats a sample value as the text format wants: shortest round-trip decimal, `+Inf`, `-Inf`,
// `NaN`.
std::string FormatMetricValue(double value);

}  // namespace sluice::metrics

#endif  // SLUICE_METRICS_REGISTRY_H_
