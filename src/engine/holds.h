// The concurrency limits (`algorithm: concurrency`) a request's descriptors match, as the holds
// to ask a backend::Holds for, and the lease that names the holds given: what a client sends
// back to release or renew them (POST /v1/acquire, /v1/release, /v1/renew), on whichever
// instance. The lease carries each hold's limit, key, id and max_hold, so no instance has to
// remember it.

#ifndef SLUICE_ENGINE_HOLDS_H_
#define SLUICE_ENGINE_HOLDS_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/holds.h"
#include "engine/engine.h"
#include "rules/config.h"

namespace sluice::engine {

struct HoldTargets {
  std::vector<std::string> keys;  // the states' keys, which `requests` point into
  std::vector<backend::HoldRequest> requests;
  std::vector<std::string> names;  // each limit's name ("5-concurrent" when it has none)
  std::vector<backend::FailureMode> on_failure;  // each one's domain's failure_mode
  std::vector<std::string> domains;              // each one's domain
};

// One hold per concurrency limit of every descriptor of `request` that matches a rule with one.
// A descriptor that carries its own RLS limit takes none (it is decided by that limit alone); a
// runtime override changes rates only, so the rules' concurrency limits still apply. None for an
// unknown domain.
HoldTargets MatchHolds(const rules::Config& config, const Request& request);

// Every concurrency limit of `config`: its domain, name (as MatchHolds names it) and id.
struct ConfiguredHold {
  std::string domain, name;
  uint64_t limit_id = 0;
  int64_t max_hold_us = 0;
};
std::vector<ConfiguredHold> ConfiguredConcurrency(const rules::Config& config);

// The lease of `holds`, and back; nullopt for text that is no lease. A lease is not a secret:
// whoever has it may release or renew its holds (as anyone may spend a key's rate).
std::string EncodeLease(std::span<const backend::Hold> holds);
std::optional<std::vector<backend::Hold>> DecodeLease(std::string_view lease);

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_HOLDS_H_
