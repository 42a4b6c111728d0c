// Ticker: runs a function every interval on a thread of its own, until stopped. The backends'
// periodic work (eventual's merges, ending leases on an idle instance) runs on one; the wait
// between ticks is the one wait on real time there: what a tick does reads its own clock.

#ifndef SLUICE_BACKEND_TICKER_H_
#define SLUICE_BACKEND_TICKER_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice::backend {

class Ticker {
 public:
  // Starts the thread; the first tick comes one interval from now.
  Ticker(absl::Duration interval, std::function<void()> tick);
  ~Ticker() { Stop(); }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  // No tick after this returns (one running finishes first). Idempotent; not from a tick.
  void Stop();

 private:
  void Run();

  const absl::Duration interval_;
  const std::function<void()> tick_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_TICKER_H_
