// Concurrency limits ("at most N requests in flight per key"), as a pure function of a key's
// holds: a request acquires a hold before its work and releases it when the work ends; every
// hold has an expiry (max_hold), so a holder that crashed or forgot gives its slot back on its
// own. Renewing a live hold moves its expiry on. At most N holds are kept per key: O(N) memory.
//
// Thread safety: pure functions; the caller owns and locks the state. Times: µs, on one clock.

#ifndef SLUICE_ALGO_CONCURRENCY_H_
#define SLUICE_ALGO_CONCURRENCY_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace sluice::algo {

struct ConcurrencyState {
  struct Hold {
    uint64_t id = 0;
    int64_t expires_us = 0;  // the hold ends then if not released or renewed first
  };
  std::vector<Hold> holds;  // live (and perhaps expired, until the next call drops them)
  uint64_t next_id = 1;     // hold ids are unique per state, never 0

  // Idle (droppable) once no hold is live: a fresh key's state.
  bool IsIdle(int64_t now_us) const;
};

struct Acquired {
  bool ok = false;
  uint64_t id = 0;             // the hold's id, when ok
  int64_t expires_us = 0;      // when ok: now + max_hold
  int64_t remaining = 0;       // holds still free after this call
  int64_t retry_after_us = 0;  // when not ok: until the earliest hold expires (a release may
                               // come sooner); Decision::kNever (-1) when n is 0
};

// Takes a hold if fewer than `n` are live at now_us; each lasts at most `max_hold_us` (> 0).
Acquired Acquire(ConcurrencyState& state, int64_t now_us, uint64_t n, int64_t max_hold_us);

// Ends hold `id`; false when it is not live (released already, expired, or never given).
bool Release(ConcurrencyState& state, uint64_t id, int64_t now_us);

// Moves live hold `id`'s expiry to now + max_hold_us; nullopt when it is not live.
std::optional<int64_t> Renew(ConcurrencyState& state, uint64_t id, int64_t now_us,
                             int64_t max_hold_us);

// The holds live at now_us.
uint64_t LiveHolds(const ConcurrencyState& state, int64_t now_us);

}  // namespace sluice::algo

#endif  // SLUICE_ALGO_CONCURRENCY_H_
