// Matching cost against large rule sets: rules::MatchDescriptor alone and the whole
// engine::Engine::Check (match, state keys, store decision) on configs of 100 to 100,000 rules.
//
// Matching is a hash lookup per descriptor entry (see rules/matcher.h), so for a given request
// shape the cost must not grow with the rule count: with a small working set ("hot") the figures
// at 100, 10k and 100k rules should be the same; spread over the whole config they differ only
// by cache misses on the larger tables. See bench/README.md.

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backend/memory/memory_store.h"
#include "benchmark/benchmark.h"
#include "engine/engine.h"
#include "fmt/format.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "rules/matcher.h"
#include "sluice/clock.h"

namespace sluice {
namespace {

using rules::Entry;

constexpr int64_t kSecond = 1000000;
constexpr int64_t kT0 = 1700000000 * kSecond;
// How many distinct requests a benchmark cycles through (its working set), drawn uniformly over
// the whole rule set: kSpread touches rules all over the config (so a large config also pays
// cache misses on its larger tables), kHot only a few rules, which stay in cache (the cost of
// the lookups themselves).
constexpr int kSpread = 4096;
constexpr int kHot = 16;

// A domain with about `n` rules:
//  - n exact `api_key: k<i>` descriptors, each with its own limit;
//  - n/10 `tenant: t<i>` descriptors with two nested children: `path: /p<i>` (exact) and a
//    key-only `path` (any other path of the tenant);
//  - a few wildcard `user_agent` values (`bot*`, `curl/*`, ...) and a key-only `user_agent`.
std::string GenerateConfig(int n) {
  // Limits high enough that the engine benchmarks stay on the allow path.
  constexpr std::string_view kPerSecond = "{unit: second, requests_per_unit: 1000000}";
  constexpr std::string_view kPerMinute = "{unit: minute, requests_per_unit: 1000000}";
  std::string yaml = "domain: bench\ndescriptors:\n";
  for (int i = 0; i < n; ++i) {
    yaml += fmt::format("  - {{key: api_key, value: k{}, rate_limit: {}}}\n", i, kPerSecond);
  }
  for (int i = 0; i < n / 10; ++i) {
    yaml += fmt::format(
        "  - key: tenant\n"
        "    value: t{0}\n"
        "    descriptors:\n"
        "      - {{key: path, value: /p{0}, rate_limit: {1}}}\n"
        "      - {{key: path, rate_limit: {2}}}\n",
        i, kPerSecond, kPerMinute);
  }
  for (std::string_view pattern : {"bot*", "curl/*", "*spider*", "python-*"}) {
    yaml +=
        fmt::format("  - {{key: user_agent, value: '{}', rate_limit: {}}}\n", pattern, kPerSecond);
  }
  yaml += fmt::format("  - {{key: user_agent, rate_limit: {}}}\n", kPerMinute);
  return yaml;
}

// One config per size, loaded once and kept for the whole run.
const rules::Config& ConfigWithRules(int n) {
  static std::map<int, std::shared_ptr<const rules::Config>> configs;
  std::shared_ptr<const rules::Config>& config = configs[n];
  if (config == nullptr) {
    rules::LoadResult result =
        rules::LoadConfigText(fmt::format("generated-{}.yaml", n), GenerateConfig(n));
    if (!result.errors.empty()) {
      fmt::print(stderr, "generated config does not load: {}\n", result.errors[0].ToString());
      std::abort();
    }
    config = std::move(result.config);
  }
  return *config;
}

enum class Shape { kExact, kNested, kNestedKeyOnly, kWildcard, kKeyOnly, kMiss };

const char* ShapeName(Shape shape) {
  switch (shape) {
    case Shape::kExact:
      return "exact";
    case Shape::kNested:
      return "nested";
    case Shape::kNestedKeyOnly:
      return "nested_key_only";
    case Shape::kWildcard:
      return "wildcard";
    case Shape::kKeyOnly:
      return "key_only";
    case Shape::kMiss:
      return "miss";
  }
  return "?";
}

// `count` descriptors of one shape, their values drawn uniformly over the whole rule set.
std::vector<std::vector<Entry>> MakeDescriptors(Shape shape, int n, int count) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> rule(0, n - 1);
  std::uniform_int_distribution<int> tenant(0, n / 10 - 1);
  static const char* const kAgents[] = {"bot-crawler/2.1", "curl/8.4.0", "my-spider-x",
                                        "python-requests/2.31"};
  std::vector<std::vector<Entry>> out;
  out.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    switch (shape) {
      case Shape::kExact:
        out.push_back({{"api_key", fmt::format("k{}", rule(rng))}});
        break;
      case Shape::kNested: {
        const int t = tenant(rng);
        out.push_back({{"tenant", fmt::format("t{}", t)}, {"path", fmt::format("/p{}", t)}});
        break;
      }
      case Shape::kNestedKeyOnly:
        out.push_back({{"tenant", fmt::format("t{}", tenant(rng))}, {"path", "/somewhere/else"}});
        break;
      case Shape::kWildcard:
        // Each pattern in turn: a later one is found only after the earlier ones failed.
        out.push_back({{"user_agent", kAgents[i % 4]}});
        break;
      case Shape::kKeyOnly:
        out.push_back({{"user_agent", fmt::format("Mozilla/5.0 ({})", i)}});
        break;
      case Shape::kMiss:
        out.push_back({{"api_key", fmt::format("unknown-{}", i)}});
        break;
    }
  }
  return out;
}

void SetLabels(benchmark::State& state, const rules::Config& config, Shape shape) {
  state.SetLabel(fmt::format("{} {}", ShapeName(shape), state.range(2) == kHot ? "hot" : "spread"));
  state.counters["rules"] = static_cast<double>(config.limit_count);
}

// rules::MatchDescriptor alone: state.range(0) rules, state.range(1) the Shape, state.range(2)
// the working set.
void BM_MatchDescriptor(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const Shape shape = static_cast<Shape>(state.range(1));
  const rules::Config& config = ConfigWithRules(n);
  const rules::Domain& domain = *config.FindDomain("bench");
  const std::vector<std::vector<Entry>> descriptors =
      MakeDescriptors(shape, n, static_cast<int>(state.range(2)));
  std::vector<const rules::RuleNode*> path;
  size_t i = 0;
  int64_t matched = 0;
  for (auto _ : state) {
    const rules::RuleNode* node = rules::MatchDescriptor(domain, descriptors[i], &path);
    benchmark::DoNotOptimize(node);
    matched += node != nullptr;
    i = (i + 1) % descriptors.size();
  }
  SetLabels(state, config, shape);
  state.counters["matched"] =
      benchmark::Counter(static_cast<double>(matched), benchmark::Counter::kAvgIterations);
}

// engine::Engine::Check on a MemoryStore: the request path minus the frontend.
void BM_EngineCheck(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const Shape shape = static_cast<Shape>(state.range(1));
  const rules::Config& config = ConfigWithRules(n);
  std::vector<engine::Request> requests;
  for (std::vector<Entry>& entries : MakeDescriptors(shape, n, static_cast<int>(state.range(2)))) {
    engine::Request request;
    request.domain = "bench";
    request.descriptors.push_back({.entries = engine::Entries(entries.begin(), entries.end()),
                                   .limit = {},
                                   .hits_addend = {}});
    requests.push_back(std::move(request));
  }
  ManualClock clock(kT0);
  store::MemoryStore store(store::MemoryStore::Options{}, &clock);
  engine::Engine engine(&store);
  size_t i = 0;
  int64_t now_us = kT0;
  int64_t allowed = 0;
  for (auto _ : state) {
    const engine::Response response = engine.Check(config, requests[i], now_us);
    allowed += response.allowed;
    benchmark::DoNotOptimize(response);
    i = (i + 1) % requests.size();
    now_us += 1;
  }
  SetLabels(state, config, shape);
  state.counters["allowed"] =
      benchmark::Counter(static_cast<double>(allowed), benchmark::Counter::kAvgIterations);
}

// What a reload costs: parsing and validating the generated YAML text.
void BM_LoadConfigText(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const std::string yaml = GenerateConfig(n);
  size_t limits = 0;
  for (auto _ : state) {
    rules::LoadResult result = rules::LoadConfigText("generated.yaml", yaml);
    if (!result.errors.empty()) {
      state.SkipWithError("generated config does not load");
      break;
    }
    limits = result.config->limit_count;
  }
  state.counters["rules"] = static_cast<double>(limits);
}

// Every shape at 100, 10k and 100k rules. The working set only matters where the matched rule
// depends on the drawn value (exact and nested); the other shapes match the same few rules.
void RuleCounts(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape <= static_cast<int>(Shape::kMiss); ++shape) {
    const bool spreads = static_cast<Shape>(shape) == Shape::kExact ||
                         static_cast<Shape>(shape) == Shape::kNested ||
                         static_cast<Shape>(shape) == Shape::kNestedKeyOnly;
    for (int set : spreads ? std::vector<int>{kHot, kSpread} : std::vector<int>{kSpread}) {
      for (int n : {100, 10000, 100000}) b->Args({n, shape, set});
    }
  }
  b->ArgNames({"rules", "shape", "set"});
}

BENCHMARK(BM_MatchDescriptor)->Apply(RuleCounts);
BENCHMARK(BM_EngineCheck)->Apply(RuleCounts);
BENCHMARK(BM_LoadConfigText)
    ->ArgName("rules")
    ->Arg(100)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sluice

BENCHMARK_MAIN();
