// The identity of a configured limit's state: under which id a backend keeps the state of a limit
// that sits somewhere in the rules (domain, descriptor path, plan), so that the state survives
// any reload that leaves the limit where it was and as it was.

#ifndef SLUICE_BACKEND_LIMIT_ID_H_
#define SLUICE_BACKEND_LIMIT_ID_H_

#include <cstdint>
#include <string_view>

#include "sluice/limit.h"

namespace sluice::backend {

// A hash of where the limit sits (`node_path`, `plan`) and of its definition (LimitId). The
// config computes it at load for limits without a plan (LimitRule::state_id); the engine for
// plans and overrides; the library (sluice/rate_limiter.h) for its limits, under its name.
uint64_t RuleLimitId(std::string_view node_path, std::string_view plan, const Limit& limit);

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_LIMIT_ID_H_
