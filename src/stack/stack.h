// The backend stack a process decides on, built from the settings: the memory store alone
// (behind store::LocalLeases and store::LocalOverLimitCache: each thread's leases of hot states,
// for the domains that chose leases, and its kept denials), or
// Failover(Eventual(Leases(OverLimitCache(RedisStore))), memory store) for `backend: redis` (the
// cache only when redis.over_limit_cache > 0). The one place that knows the concrete backends:
// frontends see a backend::Backend (through the engine) and this class.

#ifndef SLUICE_STACK_STACK_H_
#define SLUICE_STACK_STACK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backend/backend.h"
#include "backend/holds.h"
#include "backend/reservations.h"
#include "metrics/registry.h"
#include "metrics/server_metrics.h"
#include "rules/config.h"
#include "rules/override_book.h"
#include "sluice/clock.h"

namespace sluice::stack {

class Stack {
 public:
  // The memory store as the settings size it (max_entries, on_full), and Redis when
  // `backend: redis` or `redis_url` says so (`redis_url` wins over the settings' url/nodes).
  // Connects to Redis, waiting a moment so that a wrong password is an error here; an
  // unreachable Redis is not (its domains' failure_mode answers until it comes). `clock` is not
  // owned and must outlive the stack.
  static absl::StatusOr<std::unique_ptr<Stack>> Build(const rules::Settings& settings,
                                                      const std::optional<std::string>& redis_url,
                                                      const Clock* clock);
  // The memory store alone, as the settings size it.
  static std::unique_ptr<Stack> Memory(const rules::Settings& settings, const Clock* clock);

  ~Stack();
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;

  // The top of the stack: what the engine decides on.
  backend::Backend& backend() const { return *top_; }
  // Where the concurrency limits' holds are kept: Redis when decisions go there, else this
  // process.
  backend::Holds& holds() const;
  // Where reservations of costs wait to be settled (POST /v1/reserve, /v1/settle): as the holds.
  backend::Reservations& reservations() const;
  // Whether decisions go to Redis.
  bool remote() const;
  // For messages: "memory", "redis 127.0.0.1:6379", "redis cluster via ...".
  const std::string& where() const { return where_; }

  // The book of runtime overrides (rules/override_book.h) for this stack: on Redis, shared by
  // every instance, when decisions go to Redis (read before returning, waiting a moment: an
  // unreachable Redis is no error, they are read once it answers); otherwise in
  // `state_dir`/overrides.jsonl, or in memory only when `state_dir` is empty (an error when the
  // file cannot be read). `config` gives the current rules (for reading stored overrides); the
  // stack and `clock` must outlive the book.
  absl::StatusOr<std::unique_ptr<rules::OverrideBook>> OpenOverrides(
      const rules::Settings& settings, const std::string& state_dir,
      std::function<std::shared_ptr<const rules::Config>()> config, const Clock* clock) const;

  // Gives back the unspent units of this instance's leases (consistency: leased) and merges what
  // it admitted on eventual copies, waiting up to `wait` for the backend to take them: at
  // shutdown, so that other instances can use them (and count what this one admitted).
  void ReturnLeases(absl::Duration wait);

  // Gives back every lease whenever `generation` moves (checked every lease interval): pass the
  // config manager's count of reloads, so that the leases of a limit a reload changed (its state
  // no longer used) go back for the other instances, within a lease interval of the reload.
  // The others lease again. Nothing without Redis.
  void ReturnLeasesOnChange(std::function<uint64_t()> generation);

  // The memory store's figures, for /metrics.
  metrics::ServerMetrics::StoreStats StoreStats() const;
  // Registers the Redis families (calls, errors, breaker, health, failure policy answers) on
  // `registry`; nothing without Redis.
  absl::Status RegisterBackendMetrics(metrics::Registry& registry) const;

  // What this stack has asked of Redis so far (read-only, for `sluice sim`); zeros without
  // Redis.
  struct RedisCounters {
    uint64_t decide_calls = 0;            // decisions that reached the Redis store
    uint64_t refused = 0;                 // of those, refused by its open breaker (no call)
    uint64_t script_calls = 0;            // script calls sent (a batch counts once)
    uint64_t over_limit_cache_hits = 0;   // decisions the over-limit cache denied, with no call
    uint64_t lease_local = 0;             // decisions made from leased units, with no call
    uint64_t leases = 0;                  // leases taken (script calls, in script_calls too)
    uint64_t lease_returns = 0;           // calls giving unspent units back
    uint64_t leases_fenced = 0;           // leases refused by an eventual copy's fence
    uint64_t leases_empty = 0;            // leases that got nothing (the state had none to spare)
    uint64_t eventual_local = 0;          // decisions made on eventual copies, with no call
    uint64_t eventual_leased = 0;         // eventual requests sent to leases (cold_keys: lease)
    uint64_t eventual_syncs = 0;          // merge calls (script calls, in script_calls too)
    uint64_t eventual_states_synced = 0;  // states those calls read and wrote
    int64_t eventual_max_round_trip_us = 0;  // the longest merge call (D)
  };
  RedisCounters GetRedisCounters() const;

  // (Defined in stack.cc.)
  struct Parts;

 private:
  explicit Stack(std::unique_ptr<Parts> parts);

  std::unique_ptr<Parts> parts_;
  backend::Backend* top_ = nullptr;
  std::string where_ = "memory";
};

}  // namespace sluice::stack

#endif  // SLUICE_STACK_STACK_H_
