// libFuzzer target for the rules configuration: any text given to rules::LoadConfigText, as a
// domain file (sluice's own rules, or envoyproxy/ratelimit's format, which the same parser
// reads) or as the settings file. A bad config must come back as errors, never crash or hang.
//
// A config that loads is also used: one request per rule of each domain (the entries of the path
// from the root to it) is decided twice by an engine, so limits the loader let through (windows,
// counts, plans, overrides of them) reach the algorithms.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "sluice/clock.h"

namespace {

using namespace sluice;  // NOLINT(google-build-using-namespace): a fuzz target's file scope

// Bounds on the requests made from one config, so a large one stays fast.
constexpr size_t kMaxDescriptors = 64;
constexpr size_t kMaxDepth = 8;

// Adds to `request` a descriptor for every rule node under `node` (a wildcard value is matched
// by the value with each '*' replaced by "x"; a key-only node by "v").
void AddDescriptors(const rules::RuleNode& node, engine::Entries* path, engine::Request* request) {
  for (const auto& child : node.children) {
    if (request->descriptors.size() >= kMaxDescriptors) return;
    std::string value = child->has_value ? child->value : "v";
    for (char& c : value) {
      if (c == '*') c = 'x';
    }
    path->push_back(rules::Entry{child->key, value});
    request->descriptors.push_back(
        engine::Descriptor{.entries = *path, .limit = {}, .hits_addend = {}});
    if (path->size() < kMaxDepth) AddDescriptors(*child, path, request);
    path->pop_back();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ManualClock* const clock = new ManualClock(1'700'000'000'000'000);
  static store::MemoryStore* const store = new store::MemoryStore(
      store::MemoryStore::Options{.max_entries = 1 << 10, .shards = 2}, clock);
  static engine::Engine* const engine = new engine::Engine(store);

  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // A domain's `clients:` names a file that the loader reads from disk: any path (/dev/stdin,
  // /dev/zero, the working directory's files) would make this a test of the machine, not of the
  // parser. The config author names their own files; leave them out.
  if (text.find("clients") != std::string_view::npos) return 0;
  const rules::LoadResult result = rules::LoadConfigText("fuzz.yaml", text);
  if ((result.config == nullptr) == result.errors.empty()) abort();  // exactly one of the two
  for (const rules::ConfigError& error : result.errors) {
    if (error.ToString().empty()) abort();
  }
  if (result.config == nullptr) return 0;

  for (const auto& domain : result.config->domains) {
    engine::Request request{.domain = domain->name, .descriptors = {}, .hits_addend = 1};
    engine::Entries path;
    AddDescriptors(domain->root, &path, &request);
    if (request.descriptors.empty()) continue;
    clock->Advance(1'000);
    engine->Check(*result.config, request, clock->NowMicros());
    clock->Advance(1'000);
    engine->Check(*result.config, request, clock->NowMicros());
  }
  return 0;
}
