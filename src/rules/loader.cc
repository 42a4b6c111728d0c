#include "rules/loader.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "backend/exact_range.h"
#include "fmt/format.h"
#include "rules/parsers.h"
#include "rules/yaml_reader.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::rules {
namespace fs = std::filesystem;
namespace {

bool IsYamlName(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".yaml" || ext == ".yml";
}

// Reads a whole file; false when it cannot.
bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  const std::streamoff size = in.tellg();
  if (size < 0) return false;
  out->resize(static_cast<size_t>(size));
  in.seekg(0);
  return static_cast<bool>(in.read(out->data(), size));
}

size_t CountLimits(const RuleNode& node) {
  size_t n = node.limits.size();
  for (const auto& child : node.children) n += CountLimits(*child);
  return n;
}

// Every limit of `node` and its children that Redis cannot decide exactly, as an error where it
// is written.
void CheckExactRanges(const RuleNode& node, std::vector<ConfigError>& errors) {
  for (const LimitRule& rule : node.limits) {
    if (absl::Status s = backend::CheckExactRange(rule.limit); !s.ok())
      errors.push_back({rule.position, std::string(s.message())});
  }
  for (const auto& child : node.children) CheckExactRanges(*child, errors);
}

class Loader {
 public:
  void AddPath(const std::string& path, bool named_directly) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (ec || !fs::exists(status)) {
      if (options_.missing_is_empty) return;
      Fail(path, 0, 0, "no such file or directory");
      return;
    }
    if (fs::is_directory(status)) {
      std::vector<std::string> files;
      CollectYaml(path, &files);
      std::sort(files.begin(), files.end());
      for (const auto& f : files) AddFile(f, /*named_directly=*/false);
    } else {
      AddFile(path, named_directly);
    }
  }

  void AddText(const std::string& file, std::string_view text, bool named_directly) {
    XXH3_64bits_update(&hash_state_, file.data(), file.size());
    XXH3_64bits_update(&hash_state_, text.data(), text.size());
    const yaml::ParseResult parsed = yaml::Parse(text);
    if (parsed.error) {
      Fail(file, parsed.error->line, parsed.error->column,
           fmt::format("YAML syntax error: {}", parsed.error->message));
      return;
    }
    const yaml::Node doc = parsed.document->root();
    if (!doc.IsDefined() || doc.IsNull()) {
      // An empty (or comment-only) file is a mistake, never "no rules": written over a domain's
      // file (a truncated write, a bad rename) it would drop that domain's limits silently.
      Fail(file, 1, 1,
           "the file holds no YAML document (a rules file needs `domain:`, a settings file a map "
           "of settings)");
      return;
    }
    AddDocument(file, doc, named_directly);
  }

  // A domain that came over xDS: a domain file's tree that was never text.
  void AddRemote(const RemoteDomain& remote) {
    XXH3_64bits_update(&hash_state_, remote.name.data(), remote.name.size());
    XXH3_64bits_update(&hash_state_, &remote.hash, sizeof remote.hash);
    const yaml::Node doc = remote.document != nullptr ? remote.document->root() : yaml::Node();
    if (!doc.IsMap() || !doc["domain"].IsDefined()) {
      Fail(remote.name, 0, 0, "a remote rule set must be a domain (it has no `domain:`)");
      return;
    }
    YamlReader reader(remote.name, &errors_);
    if (auto domain = ParseDomain(reader, doc)) domains_.push_back(std::move(domain));
  }

  LoadResult Finish() {
    auto config = std::make_shared<Config>();
    if (settings_) config->settings = *settings_;
    std::vector<std::unique_ptr<Domain>> kept;
    absl::flat_hash_map<std::string, Domain*> by_name;
    for (auto& domain : domains_) {
      auto [it, fresh] = by_name.emplace(domain->name, domain.get());
      if (fresh) {
        LoadClients(*domain);
        kept.push_back(std::move(domain));
      } else if (config->settings.merge_domains) {
        LoadClients(*domain);  // against its own file's plans, before they move
        Merge(*it->second, *domain);
      } else {
        const Position& at = domain->root.position;
        Fail(at.file, at.line, at.column,
             fmt::format("duplicate domain '{}' in config file (also in {})", domain->name,
                         it->second->file));
      }
    }
    for (auto& domain : kept) {
      config->by_name.emplace(domain->name, domain.get());
      domain->limit_count = CountLimits(domain->root);
      for (const auto& [name, plan] : domain->plans) domain->limit_count += plan.limits.size();
      config->limit_count += domain->limit_count;
    }
    config->decided_on_redis = options_.redis || config->settings.backend == "redis";
    if (config->decided_on_redis) {
      for (const auto& domain : kept) {
        CheckExactRanges(domain->root, errors_);
        for (const auto& [name, plan] : domain->plans) {
          for (const LimitRule& rule : plan.limits) {
            if (absl::Status s = backend::CheckExactRange(rule.limit); !s.ok())
              errors_.push_back({rule.position, std::string(s.message())});
          }
        }
      }
    }
    domains_ = std::move(kept);
    if (!errors_.empty()) {
      std::stable_sort(errors_.begin(), errors_.end(), [](const auto& a, const auto& b) {
        return std::tie(a.position.file, a.position.line, a.position.column) <
               std::tie(b.position.file, b.position.line, b.position.column);
      });
      return {nullptr, std::move(errors_)};
    }
    config->domains = std::move(domains_);
    for (const auto& domain : config->domains) {
      if (!domain->http) continue;
      for (const HttpRoute& route : domain->http->routes)
        config->routes_read_bodies = config->routes_read_bodies || route.reads_body;
      if (domain->http->upstream.empty()) continue;
      if (config->proxy_domain == nullptr || domain->name < config->proxy_domain->name) {
        config->proxy_domain = domain.get();
      }
    }
    config->version = fmt::format("{:016x}", XXH3_64bits_digest(&hash_state_));
    return {std::move(config), {}};
  }

  explicit Loader(LoadOptions options) : options_(std::move(options)) {
    XXH3_64bits_reset(&hash_state_);
    settings_ = options_.settings;
  }

 private:
  void AddDocument(const std::string& file, const yaml::Node& doc, bool named_directly) {
    YamlReader reader(file, &errors_);
    if (doc.IsMap() && doc["domain"].IsDefined()) {
      if (auto domain = ParseDomain(reader, doc)) domains_.push_back(std::move(domain));
      return;
    }
    if (!doc.IsMap()) {
      reader.Error(doc, "a config file must be a map (a domain file has `domain:`)");
      return;
    }
    if (doc["descriptors"].IsDefined()) {
      // Rules without their domain, not a settings file (which has no `descriptors:`).
      reader.Error(doc,
                   "a rules file needs a `domain:` (this one has `descriptors:` but no domain)");
      return;
    }
    if (options_.settings) {
      reader.Error(doc, fmt::format("config file cannot have empty domain (the settings come from "
                                    "{}, not from a file)",
                                    options_.settings->file));
      return;
    }
    if (settings_) {
      reader.Error(doc, fmt::format("a second settings file (a document without `domain:`); the "
                                    "first is {}",
                                    settings_->file));
      return;
    }
    settings_ = ParseSettings(reader, doc);
    if (named_directly && !settings_->rules_path.empty()) {
      fs::path rules = settings_->rules_path;
      if (rules.is_relative()) rules = fs::path(file).parent_path() / rules;
      AddPath(rules.string(), /*named_directly=*/false);
    }
  }

  // Adds the top-level descriptors of `later`, a second file of the domain `into`, to `into`
  // (upstream's MERGE_DOMAIN_CONFIG: no deep merge, so a top-level descriptor in both files is a
  // duplicate even when their children differ). The domain-wide keys must not disagree: each
  // file is read as the whole domain by whoever edits it, so a `failure_mode: closed` in one file
  // silently governing the descriptors of another would surprise.
  void Merge(Domain& into, Domain& later) {
    const Position& at = later.root.position;
    const auto disagree = [&](std::string_view key, std::string_view first,
                              std::string_view second) {
      Fail(at.file, at.line, at.column,
           fmt::format("domain '{}' is merged from {} and {}, which disagree on {} ({} in {}, {} "
                       "here); write the same value in every file of the domain",
                       into.name, into.file, later.file, key, first, into.file, second));
    };
    const auto failure_mode_name = [](FailureMode m) {
      return m == FailureMode::kClosed ? "closed" : m == FailureMode::kLocal ? "local" : "open";
    };
    const auto optional_bool = [](const std::optional<bool>& b) {
      return !b ? "unset" : *b ? "true" : "false";
    };
    if (into.failure_mode != later.failure_mode) {
      disagree("failure_mode", failure_mode_name(into.failure_mode),
               failure_mode_name(later.failure_mode));
    }
    if (into.count_denied != later.count_denied) {
      disagree("count_denied", optional_bool(into.count_denied), optional_bool(later.count_denied));
    }
    if (into.shadow_mode != later.shadow_mode) {
      disagree("shadow_mode", into.shadow_mode ? "true" : "false",
               later.shadow_mode ? "true" : "false");
    }
    // Sections that describe the whole domain come from one file only.
    const auto one_file = [&](std::string_view section, bool in_first, bool in_later) {
      if (!in_first || !in_later) return false;
      Fail(at.file, at.line, at.column,
           fmt::format("domain '{}' is merged from {} and {}, and both have `{}`; a merged "
                       "domain takes it from one file",
                       into.name, into.file, later.file, section));
      return true;
    };
    const bool http_twice = one_file("http", into.http.has_value(), later.http.has_value());
    const bool plans_twice = one_file("plans", !into.plans.empty(), !later.plans.empty());
    for (auto& child : later.root.children) {
      const Position where = child->position;
      if (const RuleNode* first = AddChild(into.root, child)) {
        Fail(where.file, where.line, where.column,
             fmt::format("duplicate descriptor composite key '{}.{}' (also at {}:{}:{})", into.name,
                         CompositeKey(*first), first->position.file, first->position.line,
                         first->position.column));
      }
    }
    if (!http_twice && later.http) into.http = std::move(later.http);
    if (!plans_twice && !later.plans.empty()) {
      // Moving the map keeps its nodes, which the clients' entries point to.
      into.plans = std::move(later.plans);
      into.default_plan = std::move(later.default_plan);
      into.clients_path = std::move(later.clients_path);
      into.clients_at = later.clients_at;
      into.clients = std::move(later.clients);
    }
  }

  void CollectYaml(const fs::path& dir, std::vector<std::string>* out) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& p = it->path();
      // Dot files, ConfigMap internals (unless upstream's layout asks for them).
      if (!options_.dotfiles && p.filename().string().starts_with(".")) continue;
      std::error_code sec;
      if (fs::is_directory(p, sec)) {
        CollectYaml(p, out);
      } else if ((options_.any_extension || IsYamlName(p)) && fs::is_regular_file(p, sec)) {
        out->push_back(p.string());
      }
    }
  }

  void AddFile(const std::string& path, bool named_directly) {
    // One file under two spellings (a settings file's `rules:` directory named again beside it,
    // "rules/" and "./rules") is read once, not reported as its own duplicate.
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(path, ec);
    if (!ec && !added_.insert(canonical.string()).second) return;
    std::string text;
    if (!ReadFile(path, &text)) {
      Fail(path, 0, 0, "cannot read file");
      return;
    }
    AddText(path, text, named_directly);
  }

  // The plan mapping file: CSV lines `key,plan`; blank lines, `#` comments and a `key,plan`
  // header are skipped.
  void LoadClients(Domain& domain) {
    if (domain.clients_path.empty()) return;
    fs::path path = domain.clients_path;
    if (path.is_relative()) path = fs::path(domain.file).parent_path() / path;
    domain.clients_path = path.string();  // resolved: the watcher watches it
    auto clients = std::make_shared<ClientPlans>();
    if (!ReadFile(path.string(), &clients->text)) {
      const Position& at = domain.clients_at;
      Fail(at.file, at.line, at.column, "cannot read clients file " + path.string());
      return;
    }
    const std::string& text = clients->text;
    XXH3_64bits_update(&hash_state_, text.data(), text.size());
    clients->by_key.reserve(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1);
    const Plan* last_plan = nullptr;  // rows tend to repeat a handful of plans
    std::string_view rest = text;
    for (int line_no = 1; !rest.empty(); ++line_no) {
      const size_t eol = rest.find('\n');
      std::string_view line = rest.substr(0, eol);
      rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() || line[0] == '#' || (line_no == 1 && line == "key,plan")) continue;
      const size_t comma = line.find(',');
      if (comma == std::string_view::npos || comma == 0 || comma + 1 == line.size()) {
        Fail(path.string(), line_no, 1, "expected `key,plan`");
        continue;
      }
      const std::string_view plan_name = line.substr(comma + 1);
      const Plan* plan = last_plan;
      if (plan == nullptr || plan->name != plan_name) {
        auto it = domain.plans.find(std::string(plan_name));
        plan = it == domain.plans.end() ? nullptr : &it->second;
      }
      if (plan == nullptr) {
        Fail(path.string(), line_no, static_cast<int>(comma) + 2,
             fmt::format("unknown plan '{}'", plan_name));
        continue;
      }
      last_plan = plan;
      clients->by_key.insert_or_assign(absl::string_view(line.data(), comma), plan);
    }
    domain.clients = std::move(clients);
  }

  void Fail(const std::string& file, int line, int column, std::string message) {
    ConfigError error;
    error.position.file = file;
    error.position.line = line;
    error.position.column = column;
    error.message = std::move(message);
    errors_.push_back(std::move(error));
  }

  const LoadOptions options_;
  std::vector<ConfigError> errors_;
  absl::flat_hash_set<std::string> added_;  // the files read, by canonical path
  std::vector<std::unique_ptr<Domain>> domains_;
  std::optional<Settings> settings_;
  XXH3_state_t hash_state_;
};

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string ConfigError::ToString() const {
  if (position.line <= 0) return fmt::format("{}: {}", position.file, message);
  return fmt::format("{}:{}:{}: {}", position.file, position.line, position.column, message);
}

std::string Suggest(std::string_view word, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (std::string_view c : candidates) {
    const size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return std::string(best);
}

int64_t UnitMicros(std::string_view unit) {
  std::string lower(unit);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  constexpr int64_t kSecond = 1000000;
  if (lower == "second") return kSecond;
  if (lower == "minute") return 60 * kSecond;
  if (lower == "hour") return 3600 * kSecond;
  if (lower == "day") return 86400 * kSecond;
  if (lower == "week") return 7 * (86400 * kSecond);
  if (lower == "month") return 30 * (86400 * kSecond);
  if (lower == "year") return 365 * (86400 * kSecond);
  return 0;
}

LoadResult LoadConfig(const std::vector<std::string>& paths, const LoadOptions& options,
                      const RemoteDomains* remote) {
  Loader loader(options);
  for (const auto& p : paths) loader.AddPath(p, /*named_directly=*/true);
  if (remote != nullptr) {
    for (const RemoteDomain& domain : *remote) loader.AddRemote(domain);
  }
  return loader.Finish();
}

LoadResult LoadConfigText(const std::string& file, std::string_view text,
                          const LoadOptions& options) {
  Loader loader(options);
  loader.AddText(file, text, /*named_directly=*/false);
  return loader.Finish();
}

}  // namespace sluice::rules
