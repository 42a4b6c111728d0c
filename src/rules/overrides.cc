// Runtime overrides: their JSON and how a descriptor finds its own (overrides.h).

#include "rules/overrides.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "backend/exact_range.h"
#include "backend/limit_id.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "rules/parsers.h"
#include "rules/yaml_reader.h"
#include "rules/yaml_tree.h"
#include "util/json_string.h"

namespace sluice::rules {
namespace {

const std::vector<std::string_view> kOverrideKeys = {"domain", "entries", "limits", "until",
                                                     "for",    "reason",  "set_by", "set_at"};
constexpr size_t kMaxOverrideEntries = 32;  // engine::kMaxDescriptorEntries: no more can match
constexpr const char* kTimeFormat = "%Y-%m-%d%ET%H:%M:%E*SZ";

// An RFC 3339 time of `map`'s `key` in Unix µs; nullopt when absent or (with an error) malformed.
std::optional<int64_t> Time(YamlReader& r, const yaml::Node& map, const char* key) {
  const std::optional<std::string> text = r.String(map, key);
  if (!text) return std::nullopt;
  absl::Time t;
  std::string why;
  if (!absl::ParseTime(absl::RFC3339_full, *text, &t, &why)) {
    r.Error(map[key],
            fmt::format("{} must be an RFC 3339 time such as 2026-12-14T00:00:00Z ({})", key, why));
    return std::nullopt;
  }
  return absl::ToUnixMicros(t);
}

// `entries`: a non-empty list of {key, value}, sorted, each key once, each within the maximum
// size of a state key's parts.
std::vector<Entry> Entries(YamlReader& r, const yaml::Node& doc, size_t max_bytes) {
  std::vector<Entry> out;
  const yaml::Node list = doc["entries"];
  if (!list.IsDefined() || list.IsNull() || (list.IsSequence() && list.items().empty())) {
    r.Error(doc,
            R"(give the entries it applies to: "entries": [{"key": "api_key", "value": "acme"}])");
    return out;
  }
  if (!r.CheckSequence(list, "entries")) return out;
  for (const yaml::Node& item : list.items()) {
    if (!r.CheckMap(item, "entries item", {"key", "value"})) continue;
    Entry e{r.String(item, "key").value_or(""), r.String(item, "value").value_or("")};
    if (e.key.empty() || !item["value"].IsDefined()) {
      r.Error(item, "an entry needs a key and a value");
    } else if (e.key.size() > max_bytes || e.value.size() > max_bytes) {
      r.Error(item, fmt::format("entry '{:.64}' or its value is longer than the maximum of {} "
                                "bytes (http.max_key_bytes)",
                                e.key, max_bytes));
    } else {
      out.push_back(std::move(e));
    }
  }
  SortEntries(out);
  if (auto twice = std::adjacent_find(
          out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.key == b.key; });
      twice != out.end()) {
    r.Error(list, fmt::format("entry key '{}' is given twice", twice->key));
  }
  if (out.size() > kMaxOverrideEntries) {
    r.Error(list, fmt::format("at most {} entries", kMaxOverrideEntries));
  }
  return out;
}

// `until` or `for` (from `now_us`), or neither.
int64_t Until(YamlReader& r, const yaml::Node& doc, int64_t now_us, bool stored) {
  if (doc["until"].IsDefined() && doc["for"].IsDefined()) {
    r.Error(doc["for"], "give until or for, not both");
    return 0;
  }
  if (doc["for"].IsDefined()) {
    const std::optional<int64_t> span = r.Duration(doc, "for");
    if (span && *span <= 0) r.Error(doc["for"], "for must be longer than 0");
    return span && *span > 0 ? now_us + *span : 0;
  }
  const std::optional<int64_t> until = Time(r, doc, "until");
  if (until && *until <= now_us && !stored) {
    r.Error(doc["until"], fmt::format("until ({}) has passed", FormatUnixTime(*until)));
  }
  return until.value_or(0);
}

// The limits' state ids: the override's own, by domain and entries.
void SetStateIds(Override& o) {
  const std::string name = fmt::format("{}#override:{}", o.domain, OverrideEntriesText(o.entries));
  for (LimitRule& rule : o.limits) rule.state_id = backend::RuleLimitId(name, "", rule.limit);
}

}  // namespace

void SortEntries(std::vector<Entry>& entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.key, a.value) < std::tie(b.key, b.value);
  });
}

std::string FormatUnixTime(int64_t unix_us) {
  return absl::FormatTime(kTimeFormat, absl::FromUnixMicros(unix_us), absl::UTCTimeZone());
}

std::string OverrideEntriesText(std::span<const Entry> entries) {
  std::string out;
  for (const Entry& e : entries) {
    if (!out.empty()) out += ',';
    out += e.key;
    out += '=';
    out += e.value;
  }
  return out;
}

absl::StatusOr<Override> ParseOverride(std::string_view text, const Config& config, int64_t now_us,
                                       bool stored) {
  const yaml::ParseResult parsed = yaml::Parse(text);
  if (parsed.error) {
    return absl::InvalidArgumentError(fmt::format("override: not JSON at {}:{}: {}",
                                                  parsed.error->line, parsed.error->column,
                                                  parsed.error->message));
  }
  std::vector<ConfigError> errors;
  YamlReader r("override", &errors);
  const yaml::Node doc = parsed.document->root();
  Override o;
  if (r.CheckMap(doc, "override", kOverrideKeys)) {
    o.domain = r.String(doc, "domain").value_or("");
    const Domain* domain = config.FindDomain(o.domain);
    if (o.domain.empty()) {
      r.Error(doc, R"(give the domain: "domain": "...")");
    } else if (domain == nullptr && !stored) {
      r.Error(doc["domain"], fmt::format("unknown domain '{}'", o.domain));
    }
    o.entries = Entries(r, doc, config.settings.max_key_bytes);
    const yaml::Node limits = doc["limits"];
    if (!limits.IsSequence() || limits.items().empty()) {
      r.Error(
          limits.IsDefined() ? limits : doc,
          R"(give the limits, as a descriptor's: "limits": [{"requests": 1000, "unit": "minute"}])");
    } else {
      o.limits = ParseLimitList(r, limits, domain, "limits");
      // On Redis, as the rules' limits (the loader): a limit Redis cannot decide exactly is
      // refused (a stored one is skipped, with the reason logged).
      for (size_t i = 0; config.decided_on_redis && i < o.limits.size(); ++i) {
        if (absl::Status s = backend::CheckExactRange(o.limits[i].limit); !s.ok()) {
          r.Error(i < limits.items().size() ? limits.items()[i] : limits, std::string(s.message()));
        }
      }
      std::vector<std::string> items;
      for (const yaml::Node& item : limits.items()) {
        items.push_back(r.MapAsJson(item, "limits entry").value_or("{}"));
      }
      o.limits_json = fmt::format("[{}]", fmt::join(items, ","));
    }
    o.until_us = Until(r, doc, now_us, stored);
    o.reason = r.String(doc, "reason").value_or("");
    if (stored) {
      o.set_by = r.String(doc, "set_by").value_or("");
      o.set_at_us = Time(r, doc, "set_at").value_or(0);
    }
  }
  if (!errors.empty()) {
    std::string message = errors.front().ToString();
    for (size_t i = 1; i < errors.size(); ++i) {
      message += "; ";
      message += errors[i].ToString();
    }
    return absl::InvalidArgumentError(message);
  }
  SetStateIds(o);
  return o;
}

std::string RenderOverride(const Override& o) {
  std::string out = R"({"domain":)";
  util::AppendJsonString(&out, o.domain);
  out += R"(,"entries":[)";
  for (size_t i = 0; i < o.entries.size(); ++i) {
    out += i == 0 ? R"({"key":)" : R"(,{"key":)";
    util::AppendJsonString(&out, o.entries[i].key);
    out += R"(,"value":)";
    util::AppendJsonString(&out, o.entries[i].value);
    out += '}';
  }
  out += R"(],"limits":)";
  out += o.limits_json.empty() ? "[]" : o.limits_json;
  if (o.until_us != 0) out += fmt::format(R"(,"until":"{}")", FormatUnixTime(o.until_us));
  if (!o.reason.empty()) {
    out += R"(,"reason":)";
    util::AppendJsonString(&out, o.reason);
  }
  out += R"(,"set_by":)";
  util::AppendJsonString(&out, o.set_by);
  out += fmt::format(R"(,"set_at":"{}"}})", FormatUnixTime(o.set_at_us));
  return out;
}

namespace {

std::string EntryIndexKey(std::string_view domain, const Entry& e) {
  std::string key;
  key.reserve(domain.size() + e.key.size() + e.value.size() + 2);
  key.append(domain);
  key += '\0';
  key += e.key;
  key += '\0';
  key += e.value;
  return key;
}

// Whether every one of `wanted` (sorted) is among `entries`.
bool CarriesAll(std::span<const Entry> entries, std::span<const Entry> wanted) {
  return std::all_of(wanted.begin(), wanted.end(), [&](const Entry& w) {
    return std::find(entries.begin(), entries.end(), w) != entries.end();
  });
}

}  // namespace

OverrideSet::OverrideSet(std::vector<Override> all) : all_(std::move(all)) {
  for (size_t i = 0; i < all_.size(); ++i) {
    const Override& o = all_[i];
    ++domains_[o.domain];
    // By its first entry: a descriptor that carries them all carries that one.
    if (!o.entries.empty()) by_entry_[EntryIndexKey(o.domain, o.entries.front())].push_back(i);
  }
}

const Override* OverrideSet::Find(std::string_view domain, std::span<const Entry> entries,
                                  int64_t now_us) const {
  if (!HasDomain(domain)) return nullptr;
  const Override* best = nullptr;
  for (const Entry& e : entries) {
    const auto it = by_entry_.find(EntryIndexKey(domain, e));
    if (it == by_entry_.end()) continue;
    for (const size_t i : it->second) {
      const Override& o = all_[i];
      if (&o == best || o.Expired(now_us) || !CarriesAll(entries, o.entries)) continue;
      if (best == nullptr || o.entries.size() > best->entries.size() ||
          (o.entries.size() == best->entries.size() && o.set_at_us > best->set_at_us)) {
        best = &o;
      }
    }
  }
  return best;
}

}  // namespace sluice::rules
