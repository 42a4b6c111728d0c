#include "stack/library_stack.h"

#include <chrono>
#include <utility>

#include "backend/failover.h"
#include "backend/memory/memory_holds.h"
#include "backend/memory/memory_store.h"
#include "backend/redis/redis_holds.h"
#include "backend/redis/redis_store.h"
#include "redis/client.h"
#include "stack/redis_connect.h"

namespace sluice::stack {

// The parts, in the order they may go: the client last declared, so first destroyed (its
// destructor fails the calls still in flight, whose callbacks use the Redis store and the
// failover, which must still be there).
struct LibraryStack::Parts {
  std::unique_ptr<store::MemoryStore> memory;
  std::unique_ptr<redis::RedisStore> redis_store;
  std::unique_ptr<backend::Failover> failover;
  std::unique_ptr<backend::Holds> holds;  // the concurrency limits' (ConcurrencyLimiter)
  std::unique_ptr<redis::Client> client;
};

LibraryStack::LibraryStack(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {
  top_ = parts_->failover ? static_cast<backend::Backend*>(parts_->failover.get())
                          : parts_->memory.get();
}

LibraryStack::~LibraryStack() = default;

backend::Holds& LibraryStack::holds() const { return *parts_->holds; }

absl::StatusOr<std::unique_ptr<LibraryStack>> LibraryStack::Build(
    const RateLimiter::Options& options, const Clock* clock) {
  auto parts = std::make_unique<Parts>();
  std::string where = "memory";
  if (options.redis) {
    const RateLimiter::RedisOptions& redis = *options.redis;
    auto connection = ConnectRedis({redis.url}, redis.cluster, redis.timeout_us,
                                   std::chrono::microseconds(redis.connect_wait_us));
    if (!connection.ok()) return connection.status();
    parts->client = std::move(connection->client);
    where = std::move(connection->where);
    redis::RedisStore::Options store_options;
    store_options.key_prefix = redis.key_prefix;
    parts->redis_store = std::make_unique<redis::RedisStore>(parts->client.get(), store_options);
    // open and closed never decide locally: no local backend.
    parts->failover = std::make_unique<backend::Failover>(parts->redis_store.get(), nullptr);
    parts->holds = std::make_unique<redis::RedisHolds>(parts->client.get(), redis.key_prefix);
  } else {
    parts->holds = std::make_unique<store::MemoryHolds>(options.memory.max_keys);
    parts->memory = std::make_unique<store::MemoryStore>(
        store::MemoryStore::Options{.max_entries = options.memory.max_keys,
                                    .shards = options.memory.shards,
                                    .on_full = options.memory.on_full},
        clock);
  }
  auto stack = std::unique_ptr<LibraryStack>(new LibraryStack(std::move(parts)));
  stack->where_ = std::move(where);
  return stack;
}

}  // namespace sluice::stack
