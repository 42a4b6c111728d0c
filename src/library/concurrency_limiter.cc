// sluice::ConcurrencyLimiter: the holds of one concurrency limit, on the library's stack (the
// memory store's process, or Redis), waited for synchronously.

#include "sluice/concurrency_limiter.h"

#include <future>
#include <utility>

#include "backend/holds.h"
#include "backend/limit_id.h"
#include "fmt/format.h"
#include "stack/library_stack.h"

namespace sluice {

struct ConcurrencyLimiter::Impl {
  uint64_t n = 0;
  int64_t max_hold_us = 0;
  uint64_t limit_id = 0;
  const Clock* clock = nullptr;
  int64_t wait_us = 0;  // how long a call waits for Redis
  std::unique_ptr<stack::LibraryStack> stack;
};

namespace {

// Runs `start`, which hands its answer to the function it is given once (on any thread), and
// waits up to `wait_us` for it.
template <typename T>
absl::StatusOr<T> Await(int64_t wait_us, const std::function<void(std::function<void(T)>)>& start) {
  auto answer = std::make_shared<std::promise<T>>();
  std::future<T> got = answer->get_future();
  start([answer](T value) { answer->set_value(std::move(value)); });
  if (got.wait_for(std::chrono::microseconds(wait_us)) != std::future_status::ready) {
    return absl::DeadlineExceededError(fmt::format("no answer within {} us", wait_us));
  }
  return got.get();
}

}  // namespace

ConcurrencyLimiter::Hold& ConcurrencyLimiter::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::exchange(other.owner_, nullptr);
    key_ = std::move(other.key_);
    id_ = other.id_;
    retry_after_us_ = other.retry_after_us_;
    remaining_ = other.remaining_;
  }
  return *this;
}

void ConcurrencyLimiter::Hold::Release() {
  if (owner_ == nullptr) return;
  (void)owner_->Finish(*this, /*renew=*/false);  // an error leaves it to end on its own
  owner_ = nullptr;
}

absl::Status ConcurrencyLimiter::Hold::Renew() {
  if (owner_ == nullptr) return absl::FailedPreconditionError("not held");
  absl::StatusOr<size_t> live = owner_->Finish(*this, /*renew=*/true);
  if (!live.ok()) return live.status();
  if (*live == 0) return absl::NotFoundError("the hold had ended: acquire again");
  return absl::OkStatus();
}

ConcurrencyLimiter::ConcurrencyLimiter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConcurrencyLimiter::~ConcurrencyLimiter() = default;

absl::StatusOr<std::unique_ptr<ConcurrencyLimiter>> ConcurrencyLimiter::Create(
    uint64_t n, int64_t max_hold_us, const RateLimiter::Options& options) {
  if (max_hold_us <= 0) return absl::InvalidArgumentError("max_hold_us must be above 0");
  if (n > kMaxRequests) {
    return absl::InvalidArgumentError(fmt::format("n must be at most {}", kMaxRequests));
  }
  auto impl = std::make_unique<Impl>();
  impl->n = n;
  impl->max_hold_us = max_hold_us;
  Limit identity;  // its size and max_hold name its holds, as a limit's do its states
  identity.requests = n;
  identity.window_us = max_hold_us;
  impl->limit_id = backend::RuleLimitId(options.name + "#concurrency", "", identity);
  impl->clock = options.clock != nullptr ? options.clock : SystemClock::Get();
  impl->wait_us =
      options.redis ? options.redis->timeout_us + RateLimiter::kSyncGraceUs : INT64_MAX / 4;
  auto built = stack::LibraryStack::Build(options, impl->clock);
  if (!built.ok()) return built.status();
  impl->stack = *std::move(built);
  return std::unique_ptr<ConcurrencyLimiter>(new ConcurrencyLimiter(std::move(impl)));
}

absl::StatusOr<ConcurrencyLimiter::Hold> ConcurrencyLimiter::Acquire(std::string_view key) {
  const backend::HoldRequest request{
      .limit_id = impl_->limit_id, .key = key, .n = impl_->n, .max_hold_us = impl_->max_hold_us};
  absl::StatusOr<backend::Acquisition> got = Await<backend::Acquisition>(
      impl_->wait_us, [&](std::function<void(backend::Acquisition)> done) {
        impl_->stack->holds().Acquire(std::span(&request, 1), impl_->clock->NowMicros(),
                                      std::move(done));
      });
  if (!got.ok()) return got.status();
  if (!got->status.ok()) return got->status;
  Hold hold;
  if (!got->ok) {
    hold.retry_after_us_ = got->retry_after_us;
    return hold;
  }
  hold.owner_ = this;
  hold.key_ = std::string(key);
  hold.id_ = got->holds.front().id;
  hold.remaining_ = got->remaining;
  return hold;
}

absl::StatusOr<size_t> ConcurrencyLimiter::Finish(const Hold& hold, bool renew) {
  const backend::Hold held{.limit_id = impl_->limit_id,
                           .key = hold.key_,
                           .id = hold.id_,
                           .max_hold_us = impl_->max_hold_us,
                           .expires_us = 0};
  absl::StatusOr<absl::StatusOr<size_t>> live = Await<absl::StatusOr<size_t>>(
      impl_->wait_us, [&](std::function<void(absl::StatusOr<size_t>)> done) {
        backend::Holds& holds = impl_->stack->holds();
        const int64_t now_us = impl_->clock->NowMicros();
        if (renew) return holds.Renew(std::span(&held, 1), now_us, std::move(done));
        holds.Release(std::span(&held, 1), now_us, std::move(done));
      });
  if (!live.ok()) return live.status();
  return *live;
}

}  // namespace sluice
