#include "metrics/registry.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <latch>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/exposition_testing.h"
#include "tests/support/units.h"

namespace sluice::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using sluice::testing::kSecond;

// ---- Rendering ---------------------------------------------------------------------------------

TEST(MetricsRender, CounterWithoutLabelsHasHelpTypeAndValue) {
  Registry registry;
  auto family = registry.AddCounter({.name = "test_requests_total", .help = "Requests seen."});
  ASSERT_TRUE(family.ok()) << family.status();
  EXPECT_EQ(registry.Render(),
            "# HELP test_requests_total Requests seen.\n"
            "# TYPE test_requests_total counter\n"
            "test_requests_total 0\n");
  Counter* counter = (*family)->Get();
  counter->Inc();
  counter->Inc(41);
  EXPECT_EQ(counter->Value(), 42u);
  EXPECT_EQ(registry.Render(),
            "# HELP test_requests_total Requests seen.\n"
            "# TYPE test_requests_total counter\n"
            "test_requests_total 42\n");
}

TEST(MetricsRender, CounterFamilySortsChildrenByLabelValues) {
  Registry registry;
  auto family = registry.AddCounter({.name = "test_decisions_total",
                                     .help = "Decisions.",
                                     .label_names = {"domain", "decision"}});
  ASSERT_TRUE(family.ok()) << family.status();
  (*family)->WithLabels({"web", "denied"})->Inc(2);
  (*family)->WithLabels({"api", "denied"})->Inc(1);
  (*family)->WithLabels({"api", "allowed"})->Inc(7);
  EXPECT_EQ(registry.Render(),
            "# HELP test_decisions_total Decisions.\n"
            "# TYPE test_decisions_total counter\n"
            "test_decisions_total{domain=\"api\",decision=\"allowed\"} 7\n"
            "test_decisions_total{domain=\"api\",decision=\"denied\"} 1\n"
            "test_decisions_total{domain=\"web\",decision=\"denied\"} 2\n");
}

TEST(MetricsRender, SameLabelValuesReturnTheSameChild) {
  Registry registry;
  auto family =
      registry.AddCounter({.name = "test_hits_total", .help = "Hits.", .label_names = {"a", "b"}});
  ASSERT_TRUE(family.ok());
  Counter* first = (*family)->WithLabels({"x", "y"});
  std::string a = "x", b = "y";  // other storage, same values
  const std::string_view values[] = {a, b};
  EXPECT_EQ((*family)->WithLabels(values), first);
  // ("x", "y") is not ("xy", "") nor ("", "xy").
  EXPECT_NE((*family)->WithLabels({"xy", ""}), first);
  EXPECT_NE((*family)->WithLabels({"", "xy"}), (*family)->WithLabels({"xy", ""}));
  EXPECT_EQ((*family)->size(), 3u);
}

TEST(MetricsRender, LabelledFamilyWithoutChildrenIsLeftOut) {
  Registry registry;
  ASSERT_TRUE(
      registry.AddCounter({.name = "test_a_total", .help = "A.", .label_names = {"code"}}).ok());
  EXPECT_EQ(registry.Render(), "");
}

TEST(MetricsRender, GaugeSetAddAndValueFormatting) {
  Registry registry;
  auto family = registry.AddGauge(
      {.name = "test_temperature_celsius", .help = "Values.", .label_names = {"case"}});
  ASSERT_TRUE(family.ok()) << family.status();
  Gauge* g = (*family)->WithLabels({"a_added"});
  g->Set(2);
  g->Add(0.5);
  g->Dec();
  g->Inc();
  g->Inc();
  (*family)->WithLabels({"b_negative"})->Set(-1.5);
  (*family)->WithLabels({"c_tenth"})->Set(0.1);
  (*family)->WithLabels({"d_huge"})->Set(1e21);
  (*family)->WithLabels({"e_tiny"})->Set(0.00005);
  (*family)->WithLabels({"f_integer"})->Set(1700000000);
  (*family)->WithLabels({"g_inf"})->Set(std::numeric_limits<double>::infinity());
  (*family)->WithLabels({"h_minus_inf"})->Set(-std::numeric_limits<double>::infinity());
  (*family)->WithLabels({"i_nan"})->Set(std::numeric_limits<double>::quiet_NaN());
  (*family)->WithLabels({"j_zero"});
  EXPECT_EQ(registry.Render(),
            "# HELP test_temperature_celsius Values.\n"
            "# TYPE test_temperature_celsius gauge\n"
            "test_temperature_celsius{case=\"a_added\"} 3.5\n"
            "test_temperature_celsius{case=\"b_negative\"} -1.5\n"
            "test_temperature_celsius{case=\"c_tenth\"} 0.1\n"
            "test_temperature_celsius{case=\"d_huge\"} 1e+21\n"
            "test_temperature_celsius{case=\"e_tiny\"} 5e-05\n"
            "test_temperature_celsius{case=\"f_integer\"} 1700000000\n"
            "test_temperature_celsius{case=\"g_inf\"} +Inf\n"
            "test_temperature_celsius{case=\"h_minus_inf\"} -Inf\n"
            "test_temperature_celsius{case=\"i_nan\"} NaN\n"
            "test_temperature_celsius{case=\"j_zero\"} 0\n");
}

TEST(MetricsRender, CallbackGaugeIsEvaluatedAtEveryScrape) {
  Registry registry;
  int calls = 0;
  ASSERT_TRUE(registry
                  .AddCallbackGauge("test_entries", "Entries.",
                                    [&calls] { return static_cast<double>(++calls * 10); })
                  .ok());
  EXPECT_EQ(registry.Render(),
            "# HELP test_entries Entries.\n# TYPE test_entries gauge\n"
            "test_entries 10\n");
  EXPECT_EQ(registry.Render(),
            "# HELP test_entries Entries.\n# TYPE test_entries gauge\n"
            "test_entries 20\n");
}

TEST(MetricsRender, CallbackFamilySortsKeepsFirstOfDuplicatesAndSkipsBadSamples) {
  Registry registry;
  ASSERT_TRUE(registry
                  .AddCallback(
                      {.name = "test_reloads_total", .help = "Reloads.", .label_names = {"result"}},
                      MetricType::kCounter,
                      [] {
                        return std::vector<CallbackSample>{
                            {{"success"}, 5},
                            {{"failure"}, 1},
                            {{"success"}, 99},           // duplicate: dropped
                            {{"a", "b"}, 3},             // wrong arity: skipped
                            {{std::string("\xff")}, 4},  // not UTF-8: skipped
                        };
                      })
                  .ok());
  EXPECT_EQ(registry.Render(),
            "# HELP test_reloads_total Reloads.\n"
            "# TYPE test_reloads_total counter\n"
            "test_reloads_total{result=\"failure\"} 1\n"
            "test_reloads_total{result=\"success\"} 5\n");
}

TEST(MetricsRender, CallbackFamilyWithNoSamplesIsLeftOut) {
  Registry registry;
  ASSERT_TRUE(registry
                  .AddCallback({.name = "test_info", .help = "Info.", .label_names = {"version"}},
                               MetricType::kGauge, [] { return std::vector<CallbackSample>(); })
                  .ok());
  EXPECT_EQ(registry.Render(), "");
}

TEST(MetricsRender, HistogramHasCumulativeBucketsSumAndCountInSeconds) {
  Registry registry;
  auto family = registry.AddHistogram({.name = "test_latency_seconds", .help = "Latency."},
                                      {.bounds = {10, 100, 1000}, .unit_divisor = kSecond});
  ASSERT_TRUE(family.ok()) << family.status();
  Histogram* h = (*family)->Get();
  // le is inclusive: 10 falls in le=1e-05; a negative observation counts as 0.
  for (int64_t us : {5, 10, 11, 100, 5000, -3}) h->Observe(us);
  EXPECT_EQ(h->Count(), 6u);
  EXPECT_EQ(h->Sum(), 5126u);
  EXPECT_EQ(h->BucketCounts(), (std::vector<uint64_t>{3, 2, 0, 1}));
  EXPECT_EQ(registry.Render(),
            "# HELP test_latency_seconds Latency.\n"
            "# TYPE test_latency_seconds histogram\n"
            "test_latency_seconds_bucket{le=\"1e-05\"} 3\n"
            "test_latency_seconds_bucket{le=\"0.0001\"} 5\n"
            "test_latency_seconds_bucket{le=\"0.001\"} 5\n"
            "test_latency_seconds_bucket{le=\"+Inf\"} 6\n"
            "test_latency_seconds_sum 0.005126\n"
            "test_latency_seconds_count 6\n");
}

TEST(MetricsRender, EmptyHistogramRendersZeros) {
  Registry registry;
  ASSERT_TRUE(
      registry.AddHistogram({.name = "test_size_bytes", .help = "Sizes."}, {.bounds = {0, 1024}})
          .ok());
  EXPECT_EQ(registry.Render(),
            "# HELP test_size_bytes Sizes.\n"
            "# TYPE test_size_bytes histogram\n"
            "test_size_bytes_bucket{le=\"0\"} 0\n"
            "test_size_bytes_bucket{le=\"1024\"} 0\n"
            "test_size_bytes_bucket{le=\"+Inf\"} 0\n"
            "test_size_bytes_sum 0\n"
            "test_size_bytes_count 0\n");
}

TEST(MetricsRender, HistogramWithLabelsPutsLeLast) {
  Registry registry;
  auto family = registry.AddHistogram(
      {.name = "test_wait_seconds", .help = "Waits.", .label_names = {"queue"}},
      {.bounds = {1, 2}});
  ASSERT_TRUE(family.ok()) << family.status();
  (*family)->WithLabels({"slow"})->Observe(7);
  (*family)->WithLabels({"fast"})->Observe(1);
  (*family)->WithLabels({"fast"})->Observe(2);
  EXPECT_EQ(registry.Render(),
            "# HELP test_wait_seconds Waits.\n"
            "# TYPE test_wait_seconds histogram\n"
            "test_wait_seconds_bucket{queue=\"fast\",le=\"1\"} 1\n"
            "test_wait_seconds_bucket{queue=\"fast\",le=\"2\"} 2\n"
            "test_wait_seconds_bucket{queue=\"fast\",le=\"+Inf\"} 2\n"
            "test_wait_seconds_sum{queue=\"fast\"} 3\n"
            "test_wait_seconds_count{queue=\"fast\"} 2\n"
            "test_wait_seconds_bucket{queue=\"slow\",le=\"1\"} 0\n"
            "test_wait_seconds_bucket{queue=\"slow\",le=\"2\"} 0\n"
            "test_wait_seconds_bucket{queue=\"slow\",le=\"+Inf\"} 1\n"
            "test_wait_seconds_sum{queue=\"slow\"} 7\n"
            "test_wait_seconds_count{queue=\"slow\"} 1\n");
}

TEST(MetricsRender, LabelValuesAndHelpAreEscaped) {
  Registry registry;
  auto family = registry.AddCounter({.name = "test_escapes_total",
                                     .help = "Help with \\ backslash,\nnewline and \"quotes\".",
                                     .label_names = {"value"}});
  ASSERT_TRUE(family.ok()) << family.status();
  (*family)->WithLabels({"a\\b\"c\nd"})->Inc();
  (*family)->WithLabels({"ünïcödé {x=\"y\"} #"})->Inc(2);
  // HELP escapes backslash and line feed only; label values also the double quote.
  EXPECT_EQ(registry.Render(),
            "# HELP test_escapes_total Help with \\\\ backslash,\\nnewline and \"quotes\".\n"
            "# TYPE test_escapes_total counter\n"
            "test_escapes_total{value=\"a\\\\b\\\"c\\nd\"} 1\n"
            "test_escapes_total{value=\"ünïcödé {x=\\\"y\\\"} #\"} 2\n");
}

TEST(MetricsRender, FamiliesAreSortedByName) {
  Registry registry;
  ASSERT_TRUE(registry.AddGauge({.name = "zeta_level", .help = "Z."}).ok());
  ASSERT_TRUE(registry.AddCounter({.name = "alpha_events_total", .help = "A."}).ok());
  ASSERT_TRUE(registry.AddCallbackGauge("mid_value", "M.", [] { return 1.0; }).ok());
  EXPECT_EQ(registry.Render(),
            "# HELP alpha_events_total A.\n# TYPE alpha_events_total counter\n"
            "alpha_events_total 0\n"
            "# HELP mid_value M.\n# TYPE mid_value gauge\nmid_value 1\n"
            "# HELP zeta_level Z.\n# TYPE zeta_level gauge\nzeta_level 0\n");
}

TEST(MetricsRender, FormatMetricValue) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(42), "42");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(1e-06), "1e-06");
  EXPECT_EQ(FormatMetricValue(7.5e-05), "7.5e-05");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
}

// ---- Registration ------------------------------------------------------------------------------

TEST(MetricsRegistration, RejectsNamesPromtoolWouldReject) {
  struct Case {
    std::string name;
    MetricType type;
  };
  const Case cases[] = {
      {"", MetricType::kGauge},
      {"9lives", MetricType::kGauge},
      {"has-dash", MetricType::kGauge},
      {"camelCase_total", MetricType::kCounter},
      {"with:colon", MetricType::kGauge},
      {"__reserved", MetricType::kGauge},
      {"requests", MetricType::kCounter},         // counter without _total
      {"queue_total", MetricType::kGauge},        // _total on a gauge
      {"latency_total", MetricType::kHistogram},  // _total on a histogram
      {"latency_bucket", MetricType::kGauge},     // reserved suffixes
      {"latency_sum", MetricType::kHistogram},
      {"latency_count", MetricType::kGauge},
      {"latency_ms", MetricType::kGauge},  // abbreviated units
      {"latency_us", MetricType::kHistogram},
      {"uptime_s", MetricType::kGauge},
      {"size_kb_total", MetricType::kCounter},
      {"latency_milliseconds", MetricType::kHistogram},  // non-base units
      {"latency_microseconds", MetricType::kHistogram},
      {"uptime_minutes", MetricType::kGauge},
      {"read_kilobytes_total", MetricType::kCounter},
      {"sent_bits_total", MetricType::kCounter},
      {"hits_counter_total", MetricType::kCounter},  // type names
      {"queue_gauge", MetricType::kGauge},
      {"latency_histogram", MetricType::kHistogram},
  };
  for (const Case& c : cases) {
    Registry registry;
    MetricDesc desc{.name = c.name, .help = "Help."};
    absl::Status status;
    switch (c.type) {
      case MetricType::kCounter:
        status = registry.AddCounter(desc).status();
        break;
      case MetricType::kGauge:
        status = registry.AddGauge(desc).status();
        break;
      case MetricType::kHistogram:
        status = registry.AddHistogram(desc, {.bounds = {1}}).status();
        break;
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
  }
}

TEST(MetricsRegistration, AcceptsConventionalNames) {
  Registry registry;
  EXPECT_TRUE(registry.AddCounter({.name = "sluice_requests_total", .help = "H."}).ok());
  EXPECT_TRUE(registry.AddCounter({.name = "sluice_sent_bytes_total", .help = "H."}).ok());
  EXPECT_TRUE(registry.AddGauge({.name = "sluice_build_info", .help = "H."}).ok());
  EXPECT_TRUE(registry.AddGauge({.name = "_leading_underscore", .help = "H."}).ok());
  EXPECT_TRUE(registry.AddGauge({.name = "ms_first_component_is_fine", .help = "H."}).ok());
  EXPECT_TRUE(registry.AddHistogram({.name = "sluice_wait_seconds", .help = "H."}, {{1}}).ok());
}

TEST(MetricsRegistration, RejectsBadLabelNamesHelpAndDuplicates) {
  Registry registry;
  auto bad_labels = [&](std::vector<std::string> labels) {
    return registry
        .AddCounter({.name = "test_x_total", .help = "H.", .label_names = std::move(labels)})
        .status()
        .code();
  };
  EXPECT_EQ(bad_labels({"le"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_labels({"quantile"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_labels({"__name__"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_labels({"camelCase"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_labels({"bad-dash"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_labels({""}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_labels({"domain", "domain"}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      registry.AddHistogram({.name = "test_h_seconds", .help = "H.", .label_names = {"le"}}, {{1}})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge({.name = "test_no_help"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      registry
          .AddCounter(
              {.name = "test_cap_total", .help = "H.", .label_names = {"a"}, .max_children = 0})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(registry.AddGauge({.name = "test_once", .help = "H."}).ok());
  EXPECT_EQ(registry.AddGauge({.name = "test_once", .help = "H."}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCallbackGauge("test_once", "H.", [] { return 1.0; }).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(bad_labels({"domain", "limit"}) == absl::StatusCode::kOk);
}

TEST(MetricsRegistration, RejectsBadBuckets) {
  Registry registry;
  auto add = [&](HistogramBuckets buckets) {
    return registry.AddHistogram({.name = "test_bounds_seconds", .help = "H."}, std::move(buckets))
        .status()
        .code();
  };
  EXPECT_EQ(add({.bounds = {}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(add({.bounds = {5, 5}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(add({.bounds = {5, 1}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(add({.bounds = {-1, 1}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(add({.bounds = {1}, .unit_divisor = 0}), absl::StatusCode::kInvalidArgument);
  std::vector<int64_t> too_many(kMaxHistogramBounds + 1);
  for (size_t i = 0; i < too_many.size(); ++i) too_many[i] = static_cast<int64_t>(i);
  EXPECT_EQ(add({.bounds = too_many}), absl::StatusCode::kInvalidArgument);
  too_many.pop_back();
  EXPECT_EQ(add({.bounds = too_many}), absl::StatusCode::kOk);
}

TEST(MetricsRegistration, CallbackMustBeCounterOrGaugeAndPresent) {
  Registry registry;
  EXPECT_EQ(registry
                .AddCallback({.name = "test_cb_seconds", .help = "H."}, MetricType::kHistogram,
                             [] { return std::vector<CallbackSample>(); })
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      registry.AddCallback({.name = "test_cb", .help = "H."}, MetricType::kGauge, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
}

// ---- Bounded cardinality -----------------------------------------------------------------------

TEST(MetricsCardinality, LabelSetsBeyondTheCapShareTheOtherSeries) {
  Registry registry;
  auto family = registry.AddCounter({.name = "test_by_user_total",
                                     .help = "Per user.",
                                     .label_names = {"user", "decision"},
                                     .max_children = 3});
  ASSERT_TRUE(family.ok());
  Family<Counter>* f = *family;
  f->WithLabels({"u0", "allowed"})->Inc();
  f->WithLabels({"u1", "allowed"})->Inc();
  f->WithLabels({"u2", "denied"})->Inc();
  Counter* other = f->WithLabels({"u3", "allowed"});
  for (int i = 4; i < 1004; ++i) {
    const std::string user = fmt::format("u{}", i);
    Counter* c = f->WithLabels({user, "allowed"});
    EXPECT_EQ(c, other);
    c->Inc();
  }
  // Existing label sets still find their own child.
  f->WithLabels({"u1", "allowed"})->Inc();
  EXPECT_EQ(f->size(), 4u);  // 3 + the overflow child, however many values came
  EXPECT_EQ(registry.Render(),
            "# HELP test_by_user_total Per user.\n"
            "# TYPE test_by_user_total counter\n"
            "test_by_user_total{user=\"other\",decision=\"other\"} 1000\n"
            "test_by_user_total{user=\"u0\",decision=\"allowed\"} 1\n"
            "test_by_user_total{user=\"u1\",decision=\"allowed\"} 2\n"
            "test_by_user_total{user=\"u2\",decision=\"denied\"} 1\n");
}

TEST(MetricsCardinality, GenuineOtherLabelSetIsTheOverflowSeriesNotADuplicate) {
  Registry registry;
  auto family = registry.AddCounter(
      {.name = "test_o_total", .help = "O.", .label_names = {"k"}, .max_children = 2});
  ASSERT_TRUE(family.ok());
  Family<Counter>* f = *family;
  Counter* genuine = f->WithLabels({"other"});  // a regular child, before the cap
  genuine->Inc();
  f->WithLabels({"a"})->Inc();
  EXPECT_EQ(f->WithLabels({"b"}), genuine);  // over the cap: the same series
  f->WithLabels({"b"})->Inc();
  EXPECT_EQ(f->size(), 2u);
  const std::string text = registry.Render();
  EXPECT_EQ(text,
            "# HELP test_o_total O.\n# TYPE test_o_total counter\n"
            "test_o_total{k=\"a\"} 1\n"
            "test_o_total{k=\"other\"} 2\n");
  ExpectUniqueSeries(text);

  // And the other way round: the overflow child first, then the genuine label set.
  auto family2 = registry.AddCounter(
      {.name = "test_p_total", .help = "P.", .label_names = {"k"}, .max_children = 1});
  ASSERT_TRUE(family2.ok());
  Counter* a = (*family2)->WithLabels({"a"});
  Counter* overflow = (*family2)->WithLabels({"b"});
  EXPECT_NE(overflow, a);
  EXPECT_EQ((*family2)->WithLabels({"other"}), overflow);
  ExpectUniqueSeries(registry.Render());
}

TEST(MetricsCardinality, UnacceptableLabelValuesGoToOther) {
  Registry registry;
  auto family = registry.AddCounter(
      {.name = "test_v_total", .help = "V.", .label_names = {"k", "j"}, .max_children = 100});
  ASSERT_TRUE(family.ok());
  Family<Counter>* f = *family;
  Counter* other = f->WithLabels({"x"});  // wrong number of values
  EXPECT_EQ(f->WithLabels({"x", "y", "z"}), other);
  EXPECT_EQ(f->Get(), other);
  EXPECT_EQ(f->WithLabels({"\xc3\x28", "y"}), other);      // invalid UTF-8
  EXPECT_EQ(f->WithLabels({"\xed\xa0\x80", "y"}), other);  // a UTF-16 surrogate
  EXPECT_EQ(f->WithLabels({"\xc0\xaf", "y"}), other);      // overlong
  const std::string long_value(kMaxLabelValueBytes + 1, 'k');
  EXPECT_EQ(f->WithLabels({long_value, "y"}), other);
  const std::string longest(kMaxLabelValueBytes, 'k');
  EXPECT_NE(f->WithLabels({longest, "y"}), other);
  EXPECT_NE(f->WithLabels({"\xf0\x9f\x9a\xa6 ok", "y"}), other);  // 4-byte UTF-8 is fine
  EXPECT_EQ(f->size(), 3u);
}

// ---- Concurrency -------------------------------------------------------------------------------

TEST(MetricsConcurrency, EightThreadsIncrementingGiveAnExactTotal) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200000;
  constexpr int kLabelSets = 16;
  Registry registry;
  auto plain = registry.AddCounter({.name = "test_plain_total", .help = "P."});
  auto labelled =
      registry.AddCounter({.name = "test_labelled_total", .help = "L.", .label_names = {"shard"}});
  auto latency = registry.AddHistogram({.name = "test_lat_seconds", .help = "H."},
                                       {.bounds = {10, 100}, .unit_divisor = kSecond});
  auto level = registry.AddGauge({.name = "test_level", .help = "G."});
  ASSERT_TRUE(plain.ok() && labelled.ok() && latency.ok() && level.ok());
  Counter* counter = (*plain)->Get();
  Histogram* histogram = (*latency)->Get();
  Gauge* gauge = (*level)->Get();

  std::latch start(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string shard;
      start.arrive_and_wait();
      for (int i = 0; i < kPerThread; ++i) {
        counter->Inc();
        // Every thread races to create the same 16 label sets, then finds them lock-free.
        shard = std::to_string((i + t) % kLabelSets);
        (*labelled)->WithLabels({shard})->Inc();
        histogram->Observe(i % 200);
        gauge->Add(1);
      }
    });
  }
  start.arrive_and_wait();
  for (int i = 0; i < 20; ++i) ExpectUniqueSeries(registry.Render());  // scrapes meanwhile
  for (std::thread& thread : threads) thread.join();

  constexpr uint64_t kTotal = uint64_t{kThreads} * kPerThread;
  EXPECT_EQ(counter->Value(), kTotal);
  EXPECT_EQ((*labelled)->size(), size_t{kLabelSets});
  uint64_t labelled_total = 0;
  for (int s = 0; s < kLabelSets; ++s) {
    const uint64_t v = (*labelled)->WithLabels({std::to_string(s)})->Value();
    EXPECT_EQ(v, kTotal / kLabelSets) << s;
    labelled_total += v;
  }
  EXPECT_EQ(labelled_total, kTotal);
  EXPECT_EQ(histogram->Count(), kTotal);
  // Per thread, i % 200 goes round 1000 times over 0..199: 11 values <= 10, 90 in (10, 100].
  EXPECT_EQ(histogram->BucketCounts(),
            (std::vector<uint64_t>{kTotal * 11 / 200, kTotal * 90 / 200, kTotal * 99 / 200}));
  EXPECT_EQ(histogram->Sum(), uint64_t{kThreads} * 1000 * (199 * 200 / 2));
  EXPECT_EQ(gauge->Value(), static_cast<double>(kTotal));
  EXPECT_THAT(registry.Render(), HasSubstr("\ntest_plain_total 1600000\n"));
}

TEST(MetricsConcurrency, RacingCreationBeyondTheCapStaysBounded) {
  constexpr int kThreads = 8;
  Registry registry;
  auto family = registry.AddCounter(
      {.name = "test_flood_total", .help = "F.", .label_names = {"key"}, .max_children = 50});
  ASSERT_TRUE(family.ok());
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < 5000; ++i) {
        (*family)->WithLabels({std::to_string(t * 5000 + i)})->Inc();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ((*family)->size(), 51u);
  const std::string text = registry.Render();
  ExpectUniqueSeries(text);
  uint64_t total = 0;
  for (const std::string& line : SeriesOf(text)) {
    const size_t at = text.find(line + " ");
    total += std::stoull(text.substr(at + line.size() + 1));
  }
  EXPECT_EQ(total, uint64_t{kThreads} * 5000);
}

}  // namespace
}  // namespace sluice::metrics
