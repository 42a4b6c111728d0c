#include "sluice/limiter.h"

#include "store/memory_store.h"

namespace sluice {

absl::StatusOr<std::unique_ptr<Limiter>> Limiter::Create(const Limit& limit,
                                                         const Options& options) {
  if (absl::Status s = ValidateLimit(limit); !s.ok()) return s;
  if (options.clock == nullptr) return absl::InvalidArgumentError("Limiter needs a clock");
  return std::unique_ptr<Limiter>(new Limiter(limit, options));
}

Limiter::Limiter(const Limit& limit, const Options& options)
    : limit_(limit),
      limit_id_(LimitId(limit)),
      store_(std::make_unique<store::MemoryStore>(
          store::MemoryStore::Options{.max_entries = options.max_keys,
                                      .shards = options.shards,
                                      .on_full = options.on_full},
          options.clock)) {}

Limiter::~Limiter() = default;

Decision Limiter::Decide(std::string_view key, uint64_t cost) {
  return store_->Decide(limit_, limit_id_, key, cost);
}

Decision Limiter::DecideAt(std::string_view key, uint64_t cost, int64_t now_us) {
  return store_->DecideAt(limit_, limit_id_, key, cost, now_us);
}

bool Limiter::Reset(std::string_view key) { return store_->Reset(limit_id_, key); }

size_t Limiter::size() const { return store_->GetStats().entries; }

}  // namespace sluice
