// Loading and validating the rules configuration.
//
// Input is any mix of files and directories. A directory contributes every `*.yaml`/`*.yml`
// file below it (entries whose names start with '.' are skipped, which also skips the
// `..data`/`..2024_…` directories of a Kubernetes ConfigMap mount while following its symlinks).
// A YAML document with `domain:` is a domain file; one without is the settings file (at most one).
// When the settings file is named directly and has `rules: PATH`, the rules come from PATH
// (relative to the settings file).
//
// Everything is parsed and validated before anything is returned: the result is either a
// complete Config or a list of errors, each `FILE:LINE:COL: message`.

#ifndef SLUICE_RULES_LOADER_H_
#define SLUICE_RULES_LOADER_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rules/config.h"
#include "rules/yaml_tree.h"

namespace sluice::rules {

struct ConfigError {
  Position position;
  std::string message;

  // "FILE:LINE:COL: message" (LINE:COL omitted when unknown).
  std::string ToString() const;
};

struct LoadResult {
  std::shared_ptr<const Config> config;  // null iff errors is non-empty
  std::vector<ConfigError> errors;
};

// A domain's rules that did not come from a file: one resource of a management server (the rules
// over xDS, src/xds), already made into the tree a domain file's YAML gives. `name` stands where a
// file name would (in errors, in merges); `hash` identifies its content (the config's version is
// made of the names and hashes).
struct RemoteDomain {
  std::string name;
  std::shared_ptr<const yaml::Document> document;  // its root() is the domain's tree
  uint64_t hash = 0;
};
using RemoteDomains = std::vector<RemoteDomain>;

// What LoadConfig reads besides the paths; the defaults are sluice's own layout.
struct LoadOptions {
  // Settings decided by the caller (`sluice serve --envoy-env`); a document without `domain:`
  // is then an error instead of the settings file.
  std::optional<Settings> settings;
  // envoyproxy/ratelimit's runtime directory: every regular file is a rules file, whatever its
  // name ends with, and (`dotfiles`) names starting with '.' are read too.
  bool any_extension = false;
  bool dotfiles = false;
  // The rules (or some of them) come over xDS (ConfigManager::Apply): no paths then means no
  // rule files, not the embedded default.
  bool remote_rules = false;
  // A path that does not exist is a directory without files (no rules), as upstream reads a
  // runtime directory that is not there (an image started with no volume at RUNTIME_ROOT).
  bool missing_is_empty = false;
  // Decisions go to Redis (serve --redis): every limit must be within the range Redis decides
  // exactly (backend/exact_range.h), as with the settings' `backend: redis`.
  bool redis = false;
};

// Loads files and directories (see above), and then the domains in `remote`, if any, as if each
// were one more domain file.
LoadResult LoadConfig(const std::vector<std::string>& paths, const LoadOptions& options = {},
                      const RemoteDomains* remote = nullptr);

// Loads one in-memory document, named `file` in errors (the embedded default, tests).
LoadResult LoadConfigText(const std::string& file, std::string_view text,
                          const LoadOptions& options = {});

// Closest candidate within a small edit distance, or empty: the "did you mean" of errors.
std::string Suggest(std::string_view word, const std::vector<std::string_view>& candidates);

// envoyproxy/ratelimit units: second minute hour day week month (30 d) year (365 d),
// case-insensitive. 0 when unknown.
int64_t UnitMicros(std::string_view unit);

}  // namespace sluice::rules

#endif  // SLUICE_RULES_LOADER_H_
