#include "sluice/limiter.h"

#include "backend/memory/memory_store.h"

namespace sluice {

struct Limiter::Store {
  explicit Store(const Options& options)
      : memory(
            {.max_entries = options.max_keys, .shards = options.shards, .on_full = options.on_full},
            options.clock) {}
  store::MemoryStore memory;
};

absl::StatusOr<std::unique_ptr<Limiter>> Limiter::Create(const Limit& limit,
                                                         const Options& options) {
  if (absl::Status s = ValidateLimit(limit); !s.ok()) return s;
  if (options.clock == nullptr) return absl::InvalidArgumentError("Limiter needs a clock");
  return std::unique_ptr<Limiter>(new Limiter(limit, options));
}

Limiter::Limiter(const Limit& limit, const Options& options)
    : limit_(limit), limit_id_(LimitId(limit)), store_(std::make_unique<Store>(options)) {}

Limiter::~Limiter() = default;

Decision Limiter::Decide(std::string_view key, uint64_t cost) {
  return store_->memory.Decide(limit_, limit_id_, key, cost);
}

Decision Limiter::DecideAt(std::string_view key, uint64_t cost, int64_t now_us) {
  return store_->memory.DecideAt(limit_, limit_id_, key, cost, now_us);
}

bool Limiter::Reset(std::string_view key) { return store_->memory.Reset(limit_id_, key); }

size_t Limiter::size() const { return store_->memory.GetStats().entries; }

}  // namespace sluice
