// Reservations on Redis (backend/reservations.h), for every instance: one string per
// reservation, `PREFIXr:{ID}`, set with its ttl (SET ... PX) and taken with GETDEL, so that one
// settlement takes it, whichever instance it reaches, and a reservation never settled expires with
// its key (keeping its estimate).

#ifndef SLUICE_BACKEND_REDIS_REDIS_RESERVATIONS_H_
#define SLUICE_BACKEND_REDIS_REDIS_RESERVATIONS_H_

#include <string>

#include "backend/reservations.h"
#include "redis/client.h"

namespace sluice::redis {

class RedisReservations : public backend::Reservations {
 public:
  // `client` is not owned and must outlive this.
  RedisReservations(Client* client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}

  void Put(std::string id, std::string text, int64_t now_us, int64_t ttl_us, PutDone done) override;
  void Take(std::string_view id, int64_t now_us, TakeDone done) override;

  // The key of reservation `id` (for tests).
  std::string KeyOf(std::string_view id) const;

 private:
  Client* client_;
  const std::string prefix_;
};

}  // namespace sluice::redis

#endif  // SLUICE_BACKEND_REDIS_REDIS_RESERVATIONS_H_
