// sluice/on_full.h — what the in-memory store (and a Limiter) does with a key it sees for the
// first time when it has no room left for it (the key's shard holds max_entries / shards live
// states and none is idle).
//
// The store never drops a live state to make room: whatever requests for other keys arrive, a
// tracked key admits exactly what its limit allows. It is the new keys that lose precision, and
// each mode says how:
//   kShared          the new key is decided against one overflow state per limit (per shard)
//                    that every such key of that limit shares; it never gets more than its own
//                    limit, and usually less (conservative). The default.
//   kDeny            the new key's request is denied (retry after 1 s; nothing is consumed).
//   kAllowUntracked  the new key's request is admitted and not recorded (lenient for new keys;
//                    a tracked key is still exact).
// See src/backend/memory/memory_store.h for the argument, docs/configuration.md (`store.on_full`).

#ifndef SLUICE_ON_FULL_H_
#define SLUICE_ON_FULL_H_

#include <optional>
#include <string_view>

namespace sluice {

enum class OnFull { kShared, kDeny, kAllowUntracked };

// The setting's spelling: shared, deny, allow_untracked.
constexpr std::string_view OnFullName(OnFull on_full) {
  switch (on_full) {
    case OnFull::kShared:
      return "shared";
    case OnFull::kDeny:
      return "deny";
    case OnFull::kAllowUntracked:
      return "allow_untracked";
  }
  return "shared";
}

constexpr std::optional<OnFull> ParseOnFull(std::string_view name) {
  for (OnFull m : {OnFull::kShared, OnFull::kDeny, OnFull::kAllowUntracked}) {
    if (OnFullName(m) == name) return m;
  }
  return std::nullopt;
}

}  // namespace sluice

#endif  // SLUICE_ON_FULL_H_
