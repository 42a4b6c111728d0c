// Runtime overrides (PUT /v1/overrides): limits set while sluice runs for the descriptors of a
// domain that carry given entries ("api_key=acme"), outranking the rules that would otherwise
// match them, optionally until a time. Where they are kept (a file, Redis) is
// engine::OverrideBook's; this is what one is, how it is read and written as JSON, and how a
// descriptor finds its own (OverrideSet).
//
// The JSON of one override (a request's body, a stored one, a listed one):
//   {"domain": "api", "entries": [{"key": "api_key", "value": "acme"}],
//    "limits": [{"requests": 1000, "unit": "minute"}],       (as a descriptor's `limits:`)
//    "until": "2026-12-14T00:00:00Z" | "for": "7d",           (optional: no end)
//    "reason": "free text",                                   (optional)
//    "set_by": "alice", "set_at": "2026-12-07T10:00:00Z"}    (written by sluice)

#ifndef SLUICE_RULES_OVERRIDES_H_
#define SLUICE_RULES_OVERRIDES_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "rules/config.h"
#include "rules/matcher.h"

namespace sluice::rules {

struct Override {
  std::string domain;
  // Every one must be among a descriptor's entries (in any place) for the override to apply.
  // Sorted by key, then value; no key twice.
  std::vector<Entry> entries;
  // Their state ids are the override's own (OverrideStateName), so an override never shares a
  // state with a rule, and a changed override starts afresh.
  std::vector<LimitRule> limits;
  std::string limits_json;  // the limits as given, a JSON list: what is stored and listed
  int64_t until_us = 0;     // Unix µs; 0: until removed
  std::string reason;
  std::string set_by;  // the name of the admin token it was set with
  int64_t set_at_us = 0;

  bool Expired(int64_t now_us) const { return until_us != 0 && now_us >= until_us; }
};

// "api_key=acme,plan=gold": an override's entries as /v1/limits writes descriptors; with the
// domain, what names it (a second PUT with the same domain and entries replaces the first).
std::string OverrideEntriesText(std::span<const Entry> entries);

// Reads one override from its JSON (or YAML) `text`. `config` gives the domain's calendar units
// and time zone (an unknown domain is an error unless `stored`: a stored override whose domain
// is gone is kept, and applies again if the domain comes back); `now_us` is what `for` counts
// from, and an `until` not after it is an error unless `stored`. `set_by` and `set_at` are
// taken from the text when `stored`, else ignored. Errors name the field.
absl::StatusOr<Override> ParseOverride(std::string_view text, const Config& config, int64_t now_us,
                                       bool stored);

// Sorts `entries` by key, then value: the order an override keeps them in.
void SortEntries(std::vector<Entry>& entries);

// A Unix time in µs as RFC 3339 in UTC ("2026-12-14T00:00:00Z"), as overrides write times.
std::string FormatUnixTime(int64_t unix_us);

// The override's JSON, as above, on one line (until and set_at in RFC 3339, UTC).
std::string RenderOverride(const Override& o);

// The overrides in force, immutable: found by any of a descriptor's entries, in a few hash
// lookups per entry when its domain has any, none when it has none.
class OverrideSet {
 public:
  explicit OverrideSet(std::vector<Override> all);

  // The override for a descriptor of `domain` with `entries` at `now_us`, or null: among those
  // not expired whose entries it all carries, the one with the most entries, then the latest set.
  const Override* Find(std::string_view domain, std::span<const Entry> entries,
                       int64_t now_us) const;
  bool HasDomain(std::string_view domain) const {
    return domains_.contains(absl::string_view(domain.data(), domain.size()));
  }
  const std::vector<Override>& all() const { return all_; }

 private:
  std::vector<Override> all_;
  absl::flat_hash_map<std::string, size_t> domains_;  // how many each domain has
  // "domain\0key\0value" of each override's entries -> its indices in all_.
  absl::flat_hash_map<std::string, std::vector<size_t>> by_entry_;
};

}  // namespace sluice::rules

#endif  // SLUICE_RULES_OVERRIDES_H_
