// Helpers shared by the loader's tests (loader_*_test.cc): loading YAML text as the file "t.yaml"
// (its error lines, or the config it must load), a rule node's children, and the configurations
// that several of them load: envoyproxy/ratelimit's examples A-D, unchanged (as in
// tests/rules/examples/), and a domain of plans; and the settings tests' error lines of a
// settings file in a directory (SettingsErrors). Plain functions and constants; no state.

#ifndef SLUICE_RULES_LOADER_TESTING_H_
#define SLUICE_RULES_LOADER_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "tests/support/temp_dir.h"
#include "tests/support/upstream_examples.h"

namespace sluice::rules::test {

inline constexpr int64_t kSecondUs = 1000000;

// The error lines of loading `text` as the file "t.yaml" (empty when it loads).
inline std::vector<std::string> Errors(std::string_view text) {
  const LoadResult result = LoadConfigText("t.yaml", text);
  std::vector<std::string> lines;
  for (const ConfigError& e : result.errors) lines.push_back(e.ToString());
  EXPECT_EQ(result.config == nullptr, !lines.empty()) << "config must be null iff there are errors";
  return lines;
}

// The error lines of loading `yaml` as the settings file `dir`/etc/sluice.yaml, each as
// "sluice.yaml:L:C: ..." (the settings' relative file names are relative to etc/).
inline std::vector<std::string> SettingsErrors(sluice::testing::TempDir& dir,
                                               const std::string& yaml) {
  const LoadResult result = LoadConfig({dir.Write("etc/sluice.yaml", yaml)});
  std::vector<std::string> lines;
  for (const ConfigError& e : result.errors) {
    std::string line = e.ToString();
    line.erase(0, dir.Path("etc/").size());
    lines.push_back(line);
  }
  return lines;
}

inline std::string Joined(const std::vector<ConfigError>& errors) {
  std::string s;
  for (const ConfigError& e : errors) s += e.ToString() + "\n";
  return s;
}

// Loads `text`, failing the test (with every error) if it does not load.
inline std::shared_ptr<const Config> MustLoad(std::string_view text) {
  LoadResult result = LoadConfigText("t.yaml", text);
  EXPECT_THAT(result.errors, ::testing::IsEmpty()) << Joined(result.errors);
  EXPECT_NE(result.config, nullptr);
  return result.config;
}

// The i-th child of `node`, or null.
inline const RuleNode* Child(const RuleNode& node, size_t i) {
  return i < node.children.size() ? node.children[i].get() : nullptr;
}

// envoyproxy/ratelimit's examples A-D, unchanged, from the kit.
using testing::kExampleA;
using testing::kExampleB;
using testing::kExampleC;
using testing::kExampleD;

// Plans (a default and a plan read from the request, plan_from) in a domain of their own.
inline constexpr std::string_view kPlans = R"yaml(domain: plans
plans:
  free:
    limits:
      - {requests: 10, window: 1s, algorithm: token_bucket, burst: 20}
      - {requests: 1000, window: 1d}
  pro:
    limits:
      - {requests: 100, window: 1s, algorithm: token_bucket, burst: 200}
  enterprise: {limits: [{requests: 1000, window: 1s}]}
default_plan: free
descriptors:
  - key: plan
    descriptors:
      - key: api_key
        plan_from: plan
)yaml";

}  // namespace sluice::rules::test

#endif  // SLUICE_RULES_LOADER_TESTING_H_
