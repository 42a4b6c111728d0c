// CachedDenial: a denial kept in an over-limit cache, to answer later requests without asking
// the backend again.
//
// A backend that denies an item with retry_after r says that nothing admits the same request on
// that state before r has passed, unless something gives quota back (a Reset, a Refund, a
// changed limit): more traffic only pushes the state further from admitting. So until r the
// denial can be answered again, from memory. Two over-limit caches keep them:
// backend::OverLimitCache (in front of Redis, one map per instance) and
// store::LocalOverLimitCache (in front of the memory store, one table per thread); each says how
// it hears of what gives quota back. These are the rules they share: which decisions may be
// cached, and what a cached denial answers later.

#ifndef SLUICE_BACKEND_CACHED_DENIAL_H_
#define SLUICE_BACKEND_CACHED_DENIAL_H_

#include <algorithm>
#include <cstdint>

#include "backend/backend.h"
#include "sluice/limit.h"

namespace sluice::backend {

struct CachedDenial {
  int64_t until_us = 0;        // denied until then
  int64_t reset_until_us = 0;  // the state is back to a new key's then (with no other traffic)
};

// Whether every request of `item` must reach the backend: a count_denied item's (the backend
// records each of its costs, denied or not) and a penalized one's (each denial counts towards
// an offence, Limit::penalty).
inline bool MustReachBackend(const Item& item) {
  return item.count_denied || item.limit->penalty.has_value();
}

// Whether `decision`, `item`'s answer in a denied request, may be kept. Not a shadow item's (its
// deny does not decide the request), nor a look (cost 0), nor a count_denied item's (the backend
// must record each of its costs, denied or not), nor a denial with no end (kNever: a cost above
// the capacity, which the backend answers at once anyway, and which a config change could make
// admissible).
inline bool MayCacheDenial(const Item& item, const Decision& decision) {
  return !item.shadow && !MustReachBackend(item) && item.cost > 0 && !decision.allowed &&
         decision.retry_after_us > 0;
}

// The denial `decision` holds when the backend decided it at `decided_at_us` (in the clock the
// keeper will answer in; if that is not the backend's, a time no earlier than the backend's
// decision, so that the denial ends no later than the one it copies).
inline CachedDenial CacheDenial(const Decision& decision, int64_t decided_at_us) {
  return {
      .until_us = decided_at_us + decision.retry_after_us,
      .reset_until_us = decided_at_us + std::max(decision.reset_after_us, decision.retry_after_us)};
}

// What `held` answers at `now_us` (before until_us): denied, the retry_after and reset_after left,
// and `remaining` (a keeper that cannot know it says 0).
inline Decision DenialAt(const CachedDenial& held, int64_t now_us, int64_t remaining) {
  const int64_t retry = held.until_us - now_us;
  return {.allowed = false,
          .remaining = remaining,
          .retry_after_us = retry,
          .reset_after_us = std::max(retry, held.reset_until_us - now_us),
          .delay_us = 0};
}

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_CACHED_DENIAL_H_
