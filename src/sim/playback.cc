// sim's open-loop play: the trace's arrivals sent at their times, the answers awaited, Redis's
// work read around the run (and when the warm-up ends), and the records collected.
#include <algorithm>
#include <chrono>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "sim/sim_internal.h"
#include "spdlog/spdlog.h"
#include "util/log.h"

namespace sluice::sim {
namespace {

using namespace std::chrono_literals;

// Plays the trace open loop from `start`: every arrival due is sent to its instance, then a
// sleep until the next one; stops once it is kLateLimitUs behind. Before the first arrival due at
// or after `mark_us` (if any), calls `at_mark` once. Returns how many were sent.
template <typename AtMark>
size_t PlayOpenLoop(const Trace& trace, const std::vector<std::unique_ptr<stack::Stack>>& instances,
                    Playback& play, SteadyClock::time_point start, int64_t duration_us,
                    int64_t mark_us, AtMark&& at_mark) {
  const size_t n = trace.arrivals.size();
  size_t sent = 0;
  bool marked = mark_us <= 0;
  while (sent < n) {
    const int64_t now = MicrosSince(start);
    if (now > duration_us + kLateLimitUs) break;
    for (; sent < n && trace.arrivals[sent].t_us <= now; ++sent) {
      if (!marked && trace.arrivals[sent].t_us >= mark_us) {
        marked = true;
        at_mark(sent);
      }
      Playback* p = &play;
      const size_t i = sent;
      instances[trace.arrivals[i].instance]->backend().Decide(
          std::span(&play.items[i], 1), SystemClock::Get()->NowMicros(),
          std::span(&play.answers[i], 1),
          [p, i](const backend::Outcome& outcome) { p->Complete(i, outcome); });
    }
    if (sent < n) {
      std::this_thread::sleep_for(std::chrono::microseconds(trace.arrivals[sent].t_us - now));
    }
  }
  return sent;
}

// What the instances asked of Redis since `before`.
stack::Stack::RedisCounters WorkSince(const std::vector<std::unique_ptr<stack::Stack>>& instances,
                                      const std::vector<stack::Stack::RedisCounters>& before) {
  stack::Stack::RedisCounters work;
  for (size_t i = 0; i < instances.size(); ++i) {
    const stack::Stack::RedisCounters now = instances[i]->GetRedisCounters();
    work.decide_calls += now.decide_calls - before[i].decide_calls;
    work.refused += now.refused - before[i].refused;
    work.script_calls += now.script_calls - before[i].script_calls;
    work.over_limit_cache_hits += now.over_limit_cache_hits - before[i].over_limit_cache_hits;
    work.lease_local += now.lease_local - before[i].lease_local;
    work.leases += now.leases - before[i].leases;
    work.lease_returns += now.lease_returns - before[i].lease_returns;
    work.eventual_local += now.eventual_local - before[i].eventual_local;
    work.eventual_leased += now.eventual_leased - before[i].eventual_leased;
    work.leases_fenced += now.leases_fenced - before[i].leases_fenced;
    work.leases_empty += now.leases_empty - before[i].leases_empty;
    work.eventual_syncs += now.eventual_syncs - before[i].eventual_syncs;
    work.eventual_states_synced += now.eventual_states_synced - before[i].eventual_states_synced;
    work.eventual_max_round_trip_us =
        std::max(work.eventual_max_round_trip_us, now.eventual_max_round_trip_us);
  }
  return work;
}

// The instances' stores' counters and Redis's INFO at one moment, for WorkSince and
// RedisExecutedBetween.
struct WorkSnapshot {
  std::vector<stack::Stack::RedisCounters> counters;
  tools::RedisSnapshot info;
};

WorkSnapshot TakeWorkSnapshot(const Fleet& fleet) {
  WorkSnapshot s;
  for (const auto& instance : fleet.instances) s.counters.push_back(instance->GetRedisCounters());
  s.info = tools::TakeRedisSnapshot(fleet.stats_clients);
  return s;
}

// Waits until the first `n` arrivals are answered, at most the Redis timeout plus 5 s.
void WaitForAnswers(const Playback& play, size_t n, int64_t timeout_us,
                    std::chrono::microseconds poll) {
  const auto deadline = SteadyClock::now() + std::chrono::microseconds(timeout_us) + 5s;
  while (play.answered.load(std::memory_order_acquire) < n && SteadyClock::now() < deadline)
    std::this_thread::sleep_for(poll);
}

}  // namespace

// Plays the trace from play.start and waits for its answers (at most the Redis timeout plus 5 s),
// reading the work before, after and, with --warmup, when the warm-up ends. Ends with the
// instances gone: every completion has run (those still waiting failed), so the records are final.
Measured PlayAndMeasure(const SimOptions& o, const Trace& trace, Fleet& fleet, Playback& play,
                        int64_t timeout_us) {
  const WorkSnapshot before = TakeWorkSnapshot(fleet);
  const auto warmup_us = static_cast<int64_t>(o.warmup_seconds * 1e6);
  // The work when the warm-up ends is read in the open loop, before the first arrival due after
  // it is sent, once every earlier one is answered: so the steady counts hold exactly the
  // decisions due after the warm-up, however late a loaded machine runs (a reader woken at the
  // warm-up's end on a clock of its own could come tens of milliseconds late). The loop pauses
  // for that one INFO round trip; the arrivals due meanwhile go out late, as any backlog does.
  std::optional<WorkSnapshot> warm_end;
  const auto read_warm_end = [&](size_t sent) {
    WaitForAnswers(play, sent, timeout_us, 100us);
    warm_end = TakeWorkSnapshot(fleet);
  };
  if (const auto late = SteadyClock::now() - play.start; late > 0ms) {
    util::Log().warn(
        "the trace starts {} ms late (building it took longer): the first decisions' "
        "latencies include that",
        std::chrono::duration_cast<std::chrono::milliseconds>(late).count());
  }
  std::this_thread::sleep_until(play.start);
  Measured m;
  m.sent = PlayOpenLoop(trace, fleet.instances, play, play.start,
                        static_cast<int64_t>(o.trace.seconds * 1e6), warmup_us, read_warm_end);
  WaitForAnswers(play, m.sent, timeout_us, 2ms);
  // A recorded trace may end before its warm-up does: then the warm-up ends with the run.
  if (warmup_us > 0 && !warm_end) warm_end = TakeWorkSnapshot(fleet);
  const tools::RedisSnapshot info_after = tools::TakeRedisSnapshot(fleet.stats_clients);
  for (const tools::RedisSnapshot* s : {&before.info, &info_after}) {
    if (!s->error.empty())
      util::Log().warn("INFO failed, so the Redis counts are not right: {}", s->error);
  }
  m.work = WorkSince(fleet.instances, before.counters);
  m.executed = tools::RedisExecutedBetween(before.info, info_after);
  if (warmup_us > 0) {
    Steady steady{.work = WorkSince(fleet.instances, warm_end->counters),
                  .executed = tools::RedisExecutedBetween(warm_end->info, info_after)};
    for (size_t i = 0; i < m.sent; ++i)
      if (trace.arrivals[i].t_us >= warmup_us) ++steady.decisions;
    m.steady = steady;
  }
  fleet.instances.clear();
  return m;
}

Results Collect(const Playback& play, const Trace& trace, size_t sent, int64_t start_us) {
  Results r;
  r.admitted_at.assign(trace.arrivals.size(), kNotAdmitted);
  r.latencies.reserve(sent);
  for (size_t i = 0; i < sent; ++i) {
    const Record& record = play.records[i];
    if (record.failed || record.done_us < 0) ++r.errors;
    if (record.done_us < 0) continue;
    r.last_done_us = std::max(r.last_done_us, record.done_us);
    r.latencies.push_back(record.done_us - trace.arrivals[i].t_us);
    if (record.admitted) {
      r.admitted_at[i] =
          record.decided_at_us > 0 ? record.decided_at_us : start_us + record.done_us;
    }
  }
  return r;
}

}  // namespace sluice::sim
