// Holds of concurrency limits ("at most N requests in flight per key"): where they are kept,
// behind one interface, as decisions are behind Backend. A hold is taken before a piece of work
// and released when it ends; each has a maximum life (max_hold), so that the slot of a holder
// that crashed comes back on its own. The memory store keeps them in this process
// (backend/memory/memory_holds.h); Redis for every instance (backend/redis/redis_holds.h), where
// a hold outlives the instance that took it and any instance may release it.

#ifndef SLUICE_BACKEND_HOLDS_H_
#define SLUICE_BACKEND_HOLDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::backend {

// One hold asked for: the concurrency limit's state (its id and the key), its size and max_hold.
struct HoldRequest {
  uint64_t limit_id = 0;
  std::string_view key;
  uint64_t n = 0;
  int64_t max_hold_us = 0;
};

// A hold given: its state, its id there, and its life.
struct Hold {
  uint64_t limit_id = 0;
  std::string key;
  uint64_t id = 0;
  int64_t max_hold_us = 0;
  int64_t expires_us = 0;  // in the store's clock
  friend bool operator==(const Hold&, const Hold&) = default;
};

struct Acquisition {
  absl::Status status;  // not ok: the store could not answer (then nothing was taken)
  bool ok = false;      // a hold taken in every state asked
  std::vector<Hold> holds;
  // When !ok: which request refused first, and until the earliest of its holds ends (a release
  // may come sooner); -1 (never) when its n is 0.
  size_t refused = 0;
  int64_t retry_after_us = 0;
  // When ok: the fewest holds still free among the states, after this one.
  int64_t remaining = 0;
};

class Holds {
 public:
  virtual ~Holds() = default;

  // Takes a hold in each state of `requests`, all or none, at `now_us` (the memory store's time;
  // Redis decides in its own). `done` runs once, on any thread, perhaps before this returns.
  using AcquireDone = std::function<void(Acquisition)>;
  virtual void Acquire(std::span<const HoldRequest> requests, int64_t now_us, AcquireDone done) = 0;
  // Ends `holds`; answers how many were still live.
  using CountDone = std::function<void(absl::StatusOr<size_t>)>;
  virtual void Release(std::span<const Hold> holds, int64_t now_us, CountDone done) = 0;
  // Moves each live hold's end to now + its max_hold; answers how many were live (a hold that was
  // not is not brought back: its slot may be another's by now).
  virtual void Renew(std::span<const Hold> holds, int64_t now_us, CountDone done) = 0;

  // The holds live at now_us by limit id, when this store can count them cheaply (the memory
  // store: every state is here); nullopt otherwise (Redis: they are spread over its keys).
  virtual std::optional<absl::flat_hash_map<uint64_t, uint64_t>> LiveByLimit(
      int64_t /*now_us*/) const {
    return std::nullopt;
  }
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_HOLDS_H_
