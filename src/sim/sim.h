// `sluice sim`: N instances in one process, each deciding on a stack of its own (its own Redis
// client and connections, its own over-limit cache), against one real Redis or Redis Cluster,
// driven by a trace played in real time; prints one JSON line that says how much Redis work a
// decision cost and what the instances admitted, against the limit and against an exact single
// limiter run on the same arrivals. The fields are defined in docs/sim.md.
//
// The trace is played open loop: each decision is asked at its arrival time (never waiting for
// earlier answers), and its completion records when it finished, whether it was admitted and the
// time the backend decided it at. Bounded: at most kMaxArrivals decisions; arrivals that could
// not be sent within a second of the run's end are dropped (counted in not_sent), and answers
// are awaited at most the Redis timeout plus 5 s.

#ifndef SLUICE_SIM_SIM_H_
#define SLUICE_SIM_SIM_H_

#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "sim/instance.h"
#include "sim/trace.h"
#include "sluice/limit.h"

namespace sluice::sim {

struct SimOptions {
  int instances = 4;
  InstanceConfig instance;  // mode, Redis, over-limit cache, timeout (key_prefix: set per run)
  Limit limit;
  std::string trace_name;  // --trace as given: a generator's name or a file
  TraceOptions trace;
  Spread spread = Spread::kRoundRobin;
  std::string csv_dir;  // empty: no CSV
  // Seconds from the start after which Redis's work is also counted on its own (the steady_*
  // fields): what a long-running fleet pays once every key's first lease or copy is taken. 0: no
  // such fields. Less than trace.seconds.
  double warmup_seconds = 0;
  // Eventual mode: a key under this many decisions per second on an instance is decided from
  // leases, a hotter one on copies (a domain's cold_keys: lease with this hot_key_rate). 0: every
  // key on copies.
  uint32_t cold_keys_rate = 0;
  // No Redis and no instances: `limit`'s exact model on the trace, judged against the exact
  // log of the same N per W (sim/compare.h).
  bool accuracy = false;
};

// Parses "ALGORITHM:N/WINDOW[:burst=B]", e.g. "fixed_window:100/1s", "token_bucket:10/1s:burst=20"
// (ALGORITHM as ParseAlgorithm, WINDOW as ParseDuration); the limit passes ValidateLimit.
absl::StatusOr<Limit> ParseLimitSpec(std::string_view text);

// Runs the simulation (or, with options.accuracy, the accuracy measure) and prints its JSON line on
// `out`. Returns 0; 1 when some decision failed
// or Redis could not be reached (the line still printed when the run happened); 2 on a usage
// error (bad options, a mode not built yet), with a message on `err`.
int RunSim(const SimOptions& options, std::ostream& out, std::ostream& err);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_SIM_H_
