// The range a shared backend decides exactly. Redis's scripts compute in Lua numbers, doubles,
// exact for integers below 2^53; a limit whose products could pass that (capacity x W for the
// buckets, 2 x N x W for sliding_window, W in µs) cannot be decided exactly there. The rules
// loader refuses such limits when decisions go to Redis (backend: redis, or serve --redis), and
// `sluice sim` and `sluice bench redis` refuse them too.

#ifndef SLUICE_BACKEND_EXACT_RANGE_H_
#define SLUICE_BACKEND_EXACT_RANGE_H_

#include "absl/status/status.h"
#include "sluice/limit.h"

namespace sluice::backend {

// OK, or InvalidArgument naming the limit, the product and what to change.
absl::Status CheckExactRange(const Limit& limit);

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_EXACT_RANGE_H_
