#include "backend/redis/redis_reservations.h"

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "redis/resp.h"

namespace sluice::redis {

std::string RedisReservations::KeyOf(std::string_view id) const {
  return fmt::format("{}r:{{{}}}", prefix_, id);
}

void RedisReservations::Put(std::string id, std::string text, int64_t /*now_us*/, int64_t ttl_us,
                            PutDone done) {
  const std::string key = KeyOf(id);
  const std::string ttl_ms = std::to_string(std::max<int64_t>(1, (ttl_us + 999) / 1000));
  std::string command;
  AppendCommand(&command, {"SET", key, text, "PX", ttl_ms});
  client_->Send(key, std::move(command), [done = std::move(done)](absl::StatusOr<Reply> reply) {
    if (!reply.ok()) return done(reply.status());
    if (reply->IsError()) return done(absl::UnavailableError("redis: reservations: " + reply->str));
    done(absl::OkStatus());
  });
}

void RedisReservations::Take(std::string_view id, int64_t /*now_us*/, TakeDone done) {
  const std::string key = KeyOf(id);
  std::string command;
  AppendCommand(&command, {"GETDEL", key});
  client_->Send(key, std::move(command), [done = std::move(done)](absl::StatusOr<Reply> reply) {
    if (!reply.ok()) return done(reply.status());
    if (reply->IsError()) return done(absl::UnavailableError("redis: reservations: " + reply->str));
    if (reply->type != Reply::Type::kString)
      return done(absl::NotFoundError("no such reservation"));
    done(std::move(reply->str));
  });
}

}  // namespace sluice::redis
