// `sluice bench store`: decisions per second and bytes per key of the in-memory store.

#ifndef SLUICE_CLI_BENCH_BENCH_STORE_H_
#define SLUICE_CLI_BENCH_BENCH_STORE_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "sluice/limit.h"

namespace sluice::tools {

struct BenchStoreOptions {
  Limit limit;
  uint64_t keys = 1;
  int threads = 1;
  double seconds = 1;
  std::string distribution = "uniform";  // or "zipf" (exponent 0.99)
  // Read the system clock once per this many decisions, as a server reads it once per
  // event-loop pass. 1 = every decision (clock_gettime alone can cost ~45 ns on a VM).
  int clock_every = 1;
  // Prefetch the state of the key this many decisions ahead (0 = off), as a server with several
  // decisions at hand can (MemoryStore::Prefetch).
  int prefetch = 0;
  // What decides: "store" (MemoryStore::DecideAt), "backend" (the store as a backend::Backend,
  // one item a request: the memory-only server before issue 23), "local_over_limit_cache" (the
  // store behind store::LocalOverLimitCache: the memory-only server now) or "local_leases"
  // (store::LocalLeases in front of that: leases of hot states per thread, not in the server yet).
  std::string through = "store";
};

// Touches every key once (measuring RSS growth), then lets `threads` threads decide on keys drawn
// from `distribution` for `seconds`. Prints one JSON line to `out`. Returns the exit status.
int RunBenchStore(const BenchStoreOptions& options, std::ostream& out, std::ostream& err);

}  // namespace sluice::tools

#endif  // SLUICE_CLI_BENCH_BENCH_STORE_H_
