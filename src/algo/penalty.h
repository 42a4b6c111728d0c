// Escalating penalties, as a pure function of a key's penalty state: a key denied `after` times
// within `within` is blocked for `block`; each further offence blocks it `growth` times longer
// than the one before, up to `max`; offences are forgotten after `forget` without one. ("Ban for
// 2 minutes, then 5, then 12.5 after repeated violations".) A block is answered by the caller
// without deciding the limit; denials while blocked are not counted again.
//
// Thread safety: pure functions; the caller owns and locks the state. Times: µs, on any one
// clock (the store's).

#ifndef SLUICE_ALGO_PENALTY_H_
#define SLUICE_ALGO_PENALTY_H_

#include <cstdint>

#include "sluice/limit.h"

namespace sluice::algo {

using Penalty = ::sluice::Penalty;  // include/sluice/limit.h
using ::sluice::ValidatePenalty;

struct PenaltyState {
  int64_t span_start_us = 0;     // the first denial of the current span
  uint32_t denials = 0;          // in the current span
  uint32_t offences = 0;         // since they were last forgotten
  int64_t last_offence_us = 0;   // when the last one began
  int64_t blocked_until_us = 0;  // 0: never blocked
  friend bool operator==(const PenaltyState&, const PenaltyState&) = default;
};

// How long the key stays blocked from now_us, 0 when it is not.
inline int64_t BlockedFor(const PenaltyState& state, int64_t now_us) {
  return state.blocked_until_us > now_us ? state.blocked_until_us - now_us : 0;
}

// Records that the limit denied the key at now_us (not while it is blocked: nothing happens
// then). Returns the block it starts, or 0 when this denial makes no offence.
int64_t RecordDenial(PenaltyState& state, const Penalty& penalty, int64_t now_us);

// The block of the offence numbered `offence` (1: the first): block x growth^(offence - 1), at
// most max.
int64_t BlockOf(const Penalty& penalty, uint32_t offence);

// Whether the state can be dropped at now_us: nothing blocked, no offence to remember, no span
// still counting.
bool PenaltyIdle(const PenaltyState& state, const Penalty& penalty, int64_t now_us);
// The first instant from which PenaltyIdle holds (with no further denial): the latest of the
// block's end, the span's end (while it counts denials) and the last offence plus forget (while
// one is remembered). A store drops the state then.
int64_t PenaltyIdleAt(const PenaltyState& state, const Penalty& penalty);

}  // namespace sluice::algo

#endif  // SLUICE_ALGO_PENALTY_H_
