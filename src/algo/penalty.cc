#include "algo/penalty.h"

#include <algorithm>
#include <cmath>

namespace sluice::algo {

int64_t BlockOf(const Penalty& p, uint32_t offence) {
  // In floating point, capped before it can overflow: growth^k past max/block is max.
  double block = static_cast<double>(p.block_us);
  const double max = static_cast<double>(p.max_us);
  for (uint32_t i = 1; i < offence && block < max; ++i) block *= p.growth;
  return block >= max ? p.max_us : static_cast<int64_t>(block);
}

int64_t RecordDenial(PenaltyState& s, const Penalty& p, int64_t now_us) {
  if (BlockedFor(s, now_us) > 0) return 0;
  if (s.denials == 0 || now_us - s.span_start_us >= p.within_us) {
    s.span_start_us = now_us;
    s.denials = 0;
  }
  if (++s.denials < p.after) return 0;
  // An offence: the span starts over, and the block grows unless the last one is forgotten.
  s.denials = 0;
  if (s.offences > 0 && now_us - s.last_offence_us >= p.forget_us) s.offences = 0;
  s.offences = s.offences == UINT32_MAX ? s.offences : s.offences + 1;
  s.last_offence_us = now_us;
  const int64_t block = BlockOf(p, s.offences);
  s.blocked_until_us = now_us + block;
  return block;
}

int64_t PenaltyIdleAt(const PenaltyState& s, const Penalty& p) {
  int64_t at = s.blocked_until_us;
  if (s.denials > 0) at = std::max(at, s.span_start_us + p.within_us);
  if (s.offences > 0) at = std::max(at, s.last_offence_us + p.forget_us);
  return at;
}

bool PenaltyIdle(const PenaltyState& s, const Penalty& p, int64_t now_us) {
  return now_us >= PenaltyIdleAt(s, p);
}

}  // namespace sluice::algo
