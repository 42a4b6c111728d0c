// The traces `sluice sim` plays: when each decision is asked, for which key, at what cost, and on
// which of the simulated instances. Synthetic traces are generated from a seed (the same options
// give the same trace); recorded ones are `T_MS KEY [COST]` lines, as `sluice replay` reads.
//
// Synthetic arrivals are evenly spaced in time (deterministic, so that runs compare); only the
// keys are random:
//   uniform   rate R, keys uniform over K
//   zipf      rate R, key of rank k (1-based, "k0" the most frequent) with probability ∝ 1/k^s
//   onoff     keys as zipf; bursts of 4R for 100 ms, then 300 ms of silence (R on average)
//   hot       rate R, one key ("hot")
//   boundary  the boundary-burst attack on a window W: the R·W decisions of each window are sent
//             half in the last W/10 before an epoch-aligned window boundary and half in the first
//             W/10 after it, the keys round-robin over K (use a small K: each key then gets twice
//             what a window admits within W/5)
// Pure functions; no clock is read (the caller says where the run starts in its window).

#ifndef SLUICE_SIM_TRACE_H_
#define SLUICE_SIM_TRACE_H_

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::sim {

// One decision to ask.
struct Arrival {
  int64_t t_us = 0;       // from the start of the run
  uint32_t key = 0;       // index into Trace::keys
  uint32_t instance = 0;  // which instance asks (SpreadOverInstances)
  uint64_t cost = 1;
};

struct Trace {
  std::vector<std::string> keys;
  std::vector<Arrival> arrivals;  // in time order
};

enum class TraceKind { kUniform, kZipf, kOnOff, kHot, kBoundary, kPoisson, kFile };

// The --trace argument: a generator's name, else a file name (kFile).
TraceKind ParseTraceKind(std::string_view name);

// No trace holds more arrivals (memory: ~150 bytes per arrival while the run keeps its records).
inline constexpr size_t kMaxArrivals = 20'000'000;

struct TraceOptions {
  TraceKind kind = TraceKind::kZipf;
  uint64_t keys = 10000;  // K
  double zipf_s = 1.0;    // s (>= 0; 0 is uniform)
  double rate = 50000;    // R: decisions per second, all instances together
  double seconds = 5;     // the run's length; a recorded trace is cut there
  uint64_t seed = 1;
  // boundary: the limit's window W, and where the run starts in its epoch-aligned window
  // ((start time) mod W), so that the bursts straddle the windows the backend counts.
  int64_t window_us = 1000000;
  int64_t window_phase_us = 0;
};

// A synthetic trace (any kind but kFile). InvalidArgument when the options make no trace (no
// keys, a rate or length <= 0, more than kMaxArrivals, boundary with no window boundary whose
// bursts fit in the run).
absl::StatusOr<Trace> GenerateTrace(const TraceOptions& options);

// A recorded trace: `T_MS KEY [COST]` lines (blank lines and '#' comments skipped), times made
// relative to the earliest, stably sorted by time; requests at or after options.seconds are
// left out. InvalidArgument "line N: reason" on a malformed line or more than kMaxArrivals.
absl::StatusOr<Trace> ReadTrace(std::istream& in, const TraceOptions& options);

// How arrivals are spread over the instances: in turn, or by the key's hash (every request of a
// key on one instance, as behind a consistent-hashing load balancer).
enum class Spread { kRoundRobin, kHash };

// Sets every arrival's instance, among `instances` (>= 1).
void SpreadOverInstances(Trace& trace, uint32_t instances, Spread spread);

// Draws ranks 0..K-1 with probability ∝ 1/(rank+1)^s by inverting the cumulative distribution
// (a table of K doubles, a binary search per draw).
class ZipfSampler {
 public:
  ZipfSampler(uint64_t keys, double s);
  // `u` uniform in [0, 1).
  uint32_t Rank(double u) const;

 private:
  std::vector<double> cdf_;
};

}  // namespace sluice::sim

#endif  // SLUICE_SIM_TRACE_H_
