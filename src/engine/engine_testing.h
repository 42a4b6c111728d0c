// Helpers shared by the engine's tests (engine_*_test.cc): the EngineTest fixture (an Engine on a
// MemoryStore, at a ManualClock's t0 = 1700000000 s, and the config it loads), requests and
// descriptors built in one expression, and envoyproxy/ratelimit's examples A-D in its format (as
// in tests/rules/examples/). Times in µs. A fixture belongs to one test; nothing here is shared
// between threads but what a test shares itself.

#ifndef SLUICE_ENGINE_ENGINE_TESTING_H_
#define SLUICE_ENGINE_ENGINE_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "sluice/clock.h"
#include "tests/support/units.h"
#include "tests/support/upstream_examples.h"

namespace sluice::engine::test {

inline constexpr int64_t kSecondUs = 1000000;
inline constexpr int64_t kMinuteUs = 60 * kSecondUs;
inline constexpr int64_t kHourUs = 3600 * kSecondUs;
inline constexpr int64_t kDayUs = 86400 * kSecondUs;
// 2023-11-14 22:13:20 UTC: 20 s into a minute, 800 s into an hour, 80000 s into a day.
using sluice::testing::kT0;

inline Descriptor Desc(engine::Entries entries) {
  Descriptor d;
  d.entries = std::move(entries);
  return d;
}

inline Descriptor Peek(engine::Entries entries) {
  Descriptor d = Desc(std::move(entries));
  d.hits_addend = 0;
  return d;
}

// "u0", "u1", ... (built without `"u" + std::string`, which trips GCC 12's -Wrestrict).
inline std::string UserName(int u) {
  std::string name = std::to_string(u);
  name.insert(name.begin(), 'u');
  return name;
}

inline Request Req(std::string domain, engine::Descriptors descriptors, uint64_t hits_addend = 1) {
  Request r;
  r.domain = std::move(domain);
  r.descriptors = std::move(descriptors);
  r.hits_addend = hits_addend;
  return r;
}

inline std::string Joined(const std::vector<rules::ConfigError>& errors) {
  std::string s;
  for (const auto& e : errors) s += e.ToString() + "\n";
  return s;
}

class EngineTest : public ::testing::Test {
 protected:
  void Load(std::string_view yaml) {
    rules::LoadResult result = rules::LoadConfigText("test.yaml", yaml);
    ASSERT_THAT(result.errors, ::testing::IsEmpty()) << Joined(result.errors);
    config_ = result.config;
  }

  void LoadPaths(const std::vector<std::string>& paths) {
    rules::LoadResult result = rules::LoadConfig(paths);
    ASSERT_THAT(result.errors, ::testing::IsEmpty()) << Joined(result.errors);
    config_ = result.config;
  }

  Response Check(const Request& request) {
    return engine_.Check(*config_, request, clock_.NowMicros());
  }

  // One descriptor, cost `hits`.
  Response Check1(const std::string& domain, engine::Entries entries, uint64_t hits = 1) {
    return Check(Req(domain, {Desc(std::move(entries))}, hits));
  }

  // The remaining of descriptor `d`'s limit `l`.
  static int64_t Remaining(const Response& r, size_t d = 0, size_t l = 0) {
    if (d >= r.descriptors.size() || l >= r.descriptors[d].limits.size()) return -100;
    return r.descriptors[d].limits[l].decision.remaining;
  }

  ManualClock clock_{kT0};
  store::MemoryStore store_{store::MemoryStore::Options{.max_entries = 1 << 16, .shards = 16},
                            &clock_};
  Engine engine_{&store_};
  std::shared_ptr<const rules::Config> config_;
};

// envoyproxy/ratelimit's examples A-D (engine_examples_test.cc), from the kit.
using testing::kExampleA;
using testing::kExampleB;
using testing::kExampleC;
using testing::kExampleD;

}  // namespace sluice::engine::test

#endif  // SLUICE_ENGINE_ENGINE_TESTING_H_
