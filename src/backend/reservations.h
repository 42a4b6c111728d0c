// Reservations of a cost to settle later (engine/reservation.h): where they wait between
// POST /v1/reserve and /v1/settle, behind one interface as decisions are behind Backend. Each is
// an opaque text under a random id, kept until it is taken or it expires; it is taken at most
// once, so that a settlement is never applied twice. In this process for the memory store
// (backend/memory/memory_reservations.h); on Redis for every instance
// (backend/redis/redis_reservations.h), so that any instance may settle what another reserved.
// A reservation that expires unsettled keeps its estimate: nothing is done then.

#ifndef SLUICE_BACKEND_RESERVATIONS_H_
#define SLUICE_BACKEND_RESERVATIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::backend {

class Reservations {
 public:
  virtual ~Reservations() = default;

  // Keeps `text` under `id` for `ttl_us` from `now_us` (the memory store's clock; Redis counts
  // the ttl itself). ResourceExhausted when this process keeps as many as it may. `done` runs
  // once, on any thread, perhaps before this returns.
  using PutDone = std::function<void(absl::Status)>;
  virtual void Put(std::string id, std::string text, int64_t now_us, int64_t ttl_us,
                   PutDone done) = 0;
  // Takes the text under `id`, once: NotFound when there is none (expired, taken, or never put).
  using TakeDone = std::function<void(absl::StatusOr<std::string>)>;
  virtual void Take(std::string_view id, int64_t now_us, TakeDone done) = 0;
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_RESERVATIONS_H_
