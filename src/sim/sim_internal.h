// The pieces of RunSim (sim.cc), shared by the files that hold them: the options' checks
// (options.cc), the fleet (fleet.cc), the open-loop play (playback.cc) and the report
// (report.cc). Not part of sim's interface: only those include it.
//
// Playback's records are written by the completions, on any thread (each slot by its arrival's
// only), and read once every instance is gone; the rest is used by RunSim's thread alone.

#ifndef SLUICE_SIM_SIM_INTERNAL_H_
#define SLUICE_SIM_SIM_INTERNAL_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "cli/bench/redis_stats.h"
#include "redis/client.h"
#include "sim/admission.h"
#include "sim/sim.h"
#include "sim/trace.h"
#include "sluice/limit.h"
#include "stack/stack.h"

namespace sluice::sim {

using SteadyClock = std::chrono::steady_clock;

// Arrivals not sent by the end of the run plus this are dropped (the machine cannot keep up).
constexpr int64_t kLateLimitUs = 1000000;

inline int64_t MicrosSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - start).count();
}

// What the completion of one decision records.
struct Record {
  int64_t done_us = -1;       // steady µs from the start of the run; -1: not answered
  int64_t decided_at_us = 0;  // Outcome::decided_at_us (the backend's clock, µs since the epoch)
  bool admitted = false;
  bool failed = false;  // an error, or answered by the failure policy (closed: denied)
};

// One run's decisions: items, answers and records, one slot per arrival, written by that
// arrival's completion (on any thread) and read after every instance is gone.
struct Playback {
  std::vector<backend::Item> items;
  std::vector<Decision> answers;
  std::vector<Record> records;
  SteadyClock::time_point start;
  std::atomic<size_t> answered{0};

  void Complete(size_t i, const backend::Outcome& outcome) {
    Record& r = records[i];
    r.done_us = MicrosSince(start);
    r.decided_at_us = outcome.decided_at_us;
    r.admitted = outcome.status.ok() && outcome.allowed;
    r.failed = !outcome.status.ok() || outcome.fell_back;
    answered.fetch_add(1, std::memory_order_release);
  }
};

// --- options.cc

// The options RunSim cannot run with: 2 (a message on `err`), else 0.
int CheckSimOptions(const SimOptions& o, std::ostream& err);

// The trace the options name, for a run starting at `start_us` (the backend's clock).
absl::StatusOr<Trace> MakeTrace(const SimOptions& o, int64_t start_us);

// --- fleet.cc

// The instances of a run and the connections that watch Redis.
struct Fleet {
  std::vector<std::unique_ptr<stack::Stack>> instances;
  std::unique_ptr<redis::Client> probe;  // INFO and TIME
  std::vector<std::unique_ptr<redis::Client>> stats_clients;
};

// Builds the instances (sets config.key_prefix) and the watching connections: 0, or RunSim's exit
// status with a message on `err`.
int StartFleet(const SimOptions& o, InstanceConfig& config, Fleet& fleet, std::ostream& err);

// One look (cost 0) on each instance, awaited, so that every instance has its connections and
// Redis has the script before the run: a cold first call (NOSCRIPT, then the script loaded)
// would be decided late, in Redis's next window.
void WarmUp(const std::vector<std::unique_ptr<stack::Stack>>& instances, const Limit& limit,
            int64_t timeout_us);

// Redis's clock minus this machine's wall clock (µs), from TIME; 0 if it cannot be read.
int64_t RedisClockOffset(redis::Client& client);

// --- playback.cc

// Redis's work once the warm-up is over (--warmup): the decisions due from then on, and what the
// instances asked and Redis did from that moment to the end of the run.
struct Steady {
  size_t decisions = 0;
  stack::Stack::RedisCounters work;
  tools::RedisExecuted executed;
};

// What Redis did during the run, and after its warm-up.
struct Measured {
  size_t sent = 0;
  stack::Stack::RedisCounters work;
  tools::RedisExecuted executed;
  std::optional<Steady> steady;  // --warmup
};

// Plays the trace from play.start and waits for its answers (at most the Redis timeout plus 5 s),
// reading the work before, after and, with --warmup, when the warm-up ends. Ends with the
// instances gone: every completion has run (those still waiting failed), so the records are final.
Measured PlayAndMeasure(const SimOptions& o, const Trace& trace, Fleet& fleet, Playback& play,
                        int64_t timeout_us);

// What the decisions sent came to, from their records.
struct Results {
  std::vector<int64_t> admitted_at;  // Redis's time of each admission; kNotAdmitted
  std::vector<int64_t> latencies;    // µs, of those answered
  uint64_t errors = 0;               // failed or never answered
  int64_t last_done_us = 1;          // the last answer, from the start
};

Results Collect(const Playback& play, const Trace& trace, size_t sent, int64_t start_us);

// --- report.cc

// `text` as a JSON string, quotes included.
std::string Json(std::string_view text);

// DIR/windows.csv: for the keys with the most arrivals, what was admitted in each epoch-aligned
// window of the run, by the instances and by the exact model, next to the allowance.
absl::Status WriteWindowsCsv(const SimOptions& o, const Trace& trace,
                             std::span<const int64_t> admitted_at, const std::vector<bool>& exact,
                             int64_t start_us);

// What a run's JSON line reports, besides the options.
struct Line {
  size_t sent, not_sent;
  uint64_t errors;
  int64_t last_done_us;
  stack::Stack::RedisCounters work;
  tools::RedisExecuted executed;
  Judgement judged;
  std::optional<EventualBound> bound;  // eventual mode
  int64_t bound_span_us = 0;
  std::optional<Steady> steady;  // --warmup
};

// Prints the run's JSON line; in eventual mode with the bound checked on the run.
void PrintLine(const SimOptions& o, const Trace& trace, std::span<const int64_t> admitted_at,
               Line line, std::vector<int64_t>& latencies, std::ostream& out);

}  // namespace sluice::sim

#endif  // SLUICE_SIM_SIM_INTERNAL_H_
