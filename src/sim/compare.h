// `sluice sim --accuracy`: an algorithm's decisions judged against the exact rule "at most N in
// any span of W", with no Redis. One exact single limiter of the algorithm decides every
// arrival of the trace; each decision is then compared with what an exact sliding log of the
// same N per W would decide given the same history (the admissions this limiter made before it):
// a false allow admits a request although the last W already holds N; a false deny refuses one
// that would fit. Also the most the limiter lets through in any span of W (a fixed window admits
// up to 2N across a boundary). The figures of docs/algorithms.md's "Choosing an algorithm" (for
// sliding_window, the measure Cloudflare published 0.003 % wrong decisions with).

#ifndef SLUICE_SIM_COMPARE_H_
#define SLUICE_SIM_COMPARE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "sim/trace.h"
#include "sluice/limit.h"

namespace sluice::sim {

struct Accuracy {
  uint64_t decisions = 0;
  uint64_t admitted = 0;      // cost units
  uint64_t false_allows = 0;  // arrivals admitted that the exact log would refuse
  uint64_t false_denies = 0;  // arrivals refused that the exact log would admit
  // The most cost units one key was admitted in any span of W, over every key.
  uint64_t most_in_window = 0;
};

// `limit` must pass ValidateLimit; its N and W are the exact rule's.
absl::StatusOr<Accuracy> MeasureAccuracy(const Limit& limit, const Trace& trace, int64_t start_us);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_COMPARE_H_
