// sluice::RateLimiter: the library's limiter over several limits, on one backend::Backend (the
// memory store, or Failover over the Redis store: stack::LibraryStack builds it) as `serve`'s
// engine is, without rules.

#include "sluice/rate_limiter.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backend/backend.h"
#include "backend/limit_id.h"
#include "fmt/format.h"
#include "stack/library_stack.h"

namespace sluice {

// The parts, in the order they may go: the stack last declared, so first destroyed (on Redis,
// its destructor fails the calls still in flight, whose callbacks use the limits, which must
// still be there).
struct RateLimiter::Impl {
  std::vector<Limit> limits;
  // One per limit: the limit, its state's id and the failure policy; key and cost per call.
  std::vector<backend::Item> items;
  std::string name;  // Options::name
  backend::FailureMode on_failure = backend::FailureMode::kOpen;
  const Clock* clock = nullptr;
  int64_t sync_wait_us = 0;  // Redis: how long a synchronous call waits
  std::unique_ptr<stack::LibraryStack> stack;
  backend::Backend* top = nullptr;

  // A key's runtime override (SetOverride): its limits and their items, as `limits` and `items`.
  struct Override {
    std::vector<Limit> limits;
    std::vector<backend::Item> items;
    int64_t until_us = 0;
  };
  mutable absl::Mutex overrides_mu;
  std::unordered_map<std::string, std::shared_ptr<const Override>> overrides
      ABSL_GUARDED_BY(overrides_mu);
  std::atomic<size_t> override_count{0};  // overrides.size(), read without the lock

  // `key`'s override in force at `now_us`, or null.
  std::shared_ptr<const Override> OverrideOf(std::string_view key, int64_t now_us) const {
    if (override_count.load(std::memory_order_acquire) == 0) return nullptr;
    absl::MutexLock lock(&overrides_mu);
    const auto it = overrides.find(std::string(key));
    if (it == overrides.end()) return nullptr;
    if (it->second->until_us != 0 && now_us >= it->second->until_us) return nullptr;
    return it->second;
  }

  // The items of `limits` for states named `name`, `limits` staying where they are.
  std::vector<backend::Item> ItemsOf(const std::vector<Limit>& of,
                                     const std::string& states) const {
    std::vector<backend::Item> out;
    for (const Limit& limit : of) {
      out.push_back({.limit = &limit,
                     .limit_id = backend::RuleLimitId(states, "", limit),
                     .key = {},  // and the cost: per call
                     .cost = 1,
                     .count_denied = false,
                     .shadow = false,
                     .sharing = {.on_failure = on_failure, .instances = 1}});
    }
    return out;
  }

  // One call's items, their key and their decisions, alive until its completion has run (with
  // the override whose limits the items point to, if any).
  struct Call {
    std::string key;
    std::vector<backend::Item> items;
    std::vector<Decision> out;
    std::shared_ptr<const Override> override;
  };
  std::shared_ptr<Call> NewCall(std::string_view key, uint64_t cost) const {
    auto call = std::make_shared<Call>();
    call->key = std::string(key);
    call->override = OverrideOf(key, clock->NowMicros());
    call->items = call->override ? call->override->items : items;
    for (backend::Item& item : call->items) {
      item.key = call->key;
      item.cost = cost;
    }
    call->out.resize(call->items.size());
    return call;
  }
};

namespace {

absl::Status Validate(const std::vector<Limit>& limits, const RateLimiter::Options& options) {
  if (limits.empty()) return absl::InvalidArgumentError("a RateLimiter needs at least one limit");
  for (size_t i = 0; i < limits.size(); ++i) {
    if (absl::Status s = ValidateLimit(limits[i]); !s.ok()) {
      return absl::InvalidArgumentError(fmt::format("limit {}: {}", i, std::string(s.message())));
    }
    for (size_t j = 0; j < i; ++j) {
      if (limits[j] == limits[i]) {
        return absl::InvalidArgumentError(
            fmt::format("limit {} repeats limit {} ({}): they would share one state", i, j,
                        DescribeLimit(limits[i])));
      }
    }
  }
  if (options.redis) {
    if (options.redis->timeout_us < 1000) {
      return absl::InvalidArgumentError("RedisOptions::timeout_us must be at least 1000 (1 ms)");
    }
    if (options.redis->connect_wait_us < 0) {
      return absl::InvalidArgumentError("RedisOptions::connect_wait_us must not be negative");
    }
  } else if (options.clock == nullptr) {
    return absl::InvalidArgumentError("a RateLimiter on memory needs a clock");
  }
  return absl::OkStatus();
}

// The request's verdict from its limits' decisions.
Verdict MakeVerdict(const backend::Outcome& outcome, std::vector<Decision> decisions) {
  Verdict verdict;
  verdict.allowed = outcome.allowed;
  verdict.fell_back = outcome.fell_back;
  verdict.remaining = decisions.empty() ? 0 : decisions[0].remaining;
  for (const Decision& d : decisions) {
    verdict.remaining = std::min(verdict.remaining, d.remaining);
    verdict.delay_us = std::max(verdict.delay_us, d.delay_us);
    if (outcome.allowed || d.allowed) continue;
    if (d.retry_after_us == Decision::kNever || verdict.retry_after_us == Decision::kNever) {
      verdict.retry_after_us = Decision::kNever;
    } else {
      verdict.retry_after_us = std::max(verdict.retry_after_us, d.retry_after_us);
    }
  }
  if (!outcome.allowed) verdict.delay_us = 0;
  verdict.decisions = std::move(decisions);
  return verdict;
}

// Blocks until a completion hands over its value, or `wait_us` has passed (nullopt then; a
// later completion is then `late`'s to handle).
template <typename T>
class Waiter {
 public:
  void Set(T value) ABSL_LOCKS_EXCLUDED(mu_) {
    std::function<void(T)> late;
    {
      absl::MutexLock lock(&mu_);
      if (!abandoned_) {
        value_.emplace(std::move(value));
        return;
      }
      late = std::move(late_);
    }
    if (late) late(std::move(value));
  }
  std::optional<T> Wait(int64_t wait_us, std::function<void(T)> late) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(this, &Waiter::Answered),
                              absl::Microseconds(wait_us))) {
      abandoned_ = true;
      late_ = std::move(late);
      return std::nullopt;
    }
    return std::move(value_);
  }

 private:
  bool Answered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return value_.has_value(); }

  absl::Mutex mu_;
  std::optional<T> value_ ABSL_GUARDED_BY(mu_);
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(T)> late_ ABSL_GUARDED_BY(mu_);
};

// Runs `start` (which calls its argument exactly once) and returns what it got: inline on a
// backend that answers inline, else waiting up to `wait_us`.
template <typename T>
T RunSync(const backend::Backend& backend, int64_t wait_us,
          const std::function<void(std::function<void(T)>)>& start,
          std::function<void(T)> late = nullptr) {
  if (backend.answers_inline()) {
    std::optional<T> value;
    start([&value](T v) { value.emplace(std::move(v)); });
    return std::move(*value);
  }
  auto waiter = std::make_shared<Waiter<T>>();
  start([waiter](T v) { waiter->Set(std::move(v)); });
  std::optional<T> value = waiter->Wait(wait_us, std::move(late));
  if (!value) {
    return absl::DeadlineExceededError(
        fmt::format("the backend did not answer within {} us", wait_us));
  }
  return std::move(*value);
}

}  // namespace

RateLimiter::RateLimiter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RateLimiter::~RateLimiter() = default;

absl::StatusOr<std::unique_ptr<RateLimiter>> RateLimiter::Create(std::vector<Limit> limits,
                                                                 const Options& options) {
  if (absl::Status s = Validate(limits, options); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->limits = std::move(limits);
  impl->clock = options.clock != nullptr ? options.clock : SystemClock::Get();
  impl->name = options.name;
  impl->on_failure = options.redis && options.redis->on_failure == FailurePolicy::kClosed
                         ? backend::FailureMode::kClosed
                         : backend::FailureMode::kOpen;
  impl->items = impl->ItemsOf(impl->limits, impl->name);
  auto built = stack::LibraryStack::Build(options, impl->clock);
  if (!built.ok()) return built.status();
  impl->stack = *std::move(built);
  impl->top = &impl->stack->backend();
  if (options.redis) impl->sync_wait_us = options.redis->timeout_us + kSyncGraceUs;
  return std::unique_ptr<RateLimiter>(new RateLimiter(std::move(impl)));
}

void RateLimiter::DecideAsync(std::string_view key, uint64_t cost, VerdictDone done) {
  std::shared_ptr<Impl::Call> call = impl_->NewCall(key, cost);
  impl_->top->Decide(call->items, impl_->clock->NowMicros(), call->out,
                     [this, call, cost, done = std::move(done)](const backend::Outcome& outcome) {
                       if (!outcome.status.ok()) return done(outcome.status);
                       Verdict verdict = MakeVerdict(outcome, std::move(call->out));
                       if (verdict.allowed && cost > 0 && !outcome.fell_back) {
                         verdict.consumption.owner_ = this;
                         verdict.consumption.key_ = std::move(call->key);
                         verdict.consumption.cost_ = cost;
                         verdict.consumption.decided_at_us_ = outcome.decided_at_us;
                       }
                       done(std::move(verdict));
                     });
}

absl::StatusOr<Verdict> RateLimiter::Decide(std::string_view key, uint64_t cost) {
  return RunSync<absl::StatusOr<Verdict>>(
      *impl_->top, impl_->sync_wait_us,
      [&](VerdictDone done) { DecideAsync(key, cost, std::move(done)); },
      // Answered after the caller gave up: what it consumed goes back.
      [this](absl::StatusOr<Verdict> late) {
        if (late.ok() && !late->consumption.empty()) RefundAsync(late->consumption, nullptr);
      });
}

void RateLimiter::PeekAsync(std::string_view key, VerdictDone done) {
  DecideAsync(key, 0, std::move(done));
}

absl::StatusOr<Verdict> RateLimiter::Peek(std::string_view key) { return Decide(key, 0); }

void RateLimiter::RefundAsync(Consumption& consumption, RefundDone done) {
  if (!done) done = [](absl::Status) {};
  if (consumption.empty()) return done(absl::OkStatus());
  if (consumption.owner_ != this) {
    return done(absl::InvalidArgumentError("the Consumption is another RateLimiter's"));
  }
  Consumption taken = std::move(consumption);
  std::shared_ptr<Impl::Call> call = impl_->NewCall(taken.key_, taken.cost_);
  impl_->top->Refund(call->items, taken.decided_at_us_, impl_->clock->NowMicros(),
                     [call, done = std::move(done)](absl::Status status) { done(status); });
}

absl::Status RateLimiter::Refund(Consumption& consumption) {
  return RunSync<absl::Status>(*impl_->top, impl_->sync_wait_us,
                               [&](RefundDone done) { RefundAsync(consumption, std::move(done)); });
}

void RateLimiter::SettleAsync(Consumption& consumption, uint64_t actual_cost, RefundDone done) {
  if (!done) done = [](absl::Status) {};
  if (consumption.owner_ != nullptr && consumption.owner_ != this) {
    return done(absl::InvalidArgumentError("the Consumption is another RateLimiter's"));
  }
  if (consumption.empty() || actual_cost == consumption.cost_) {
    consumption = Consumption();
    return done(absl::OkStatus());
  }
  Consumption taken = std::move(consumption);
  if (actual_cost < taken.cost_) {  // the difference back
    std::shared_ptr<Impl::Call> call = impl_->NewCall(taken.key_, taken.cost_ - actual_cost);
    return impl_->top->Refund(call->items, taken.decided_at_us_, impl_->clock->NowMicros(),
                              [call, done = std::move(done)](absl::Status s) { done(s); });
  }
  // The excess recorded past the limits.
  std::shared_ptr<Impl::Call> call = impl_->NewCall(taken.key_, actual_cost - taken.cost_);
  impl_->top->RecordPastLimits(call->items, impl_->clock->NowMicros(), std::move(done));
}

absl::Status RateLimiter::Settle(Consumption& consumption, uint64_t actual_cost) {
  return RunSync<absl::Status>(*impl_->top, impl_->sync_wait_us, [&](RefundDone done) {
    SettleAsync(consumption, actual_cost, std::move(done));
  });
}

absl::StatusOr<Verdict> RateLimiter::Record(std::string_view key, uint64_t cost) {
  return RunSync<absl::StatusOr<Verdict>>(*impl_->top, impl_->sync_wait_us, [&](VerdictDone done) {
    std::shared_ptr<Impl::Call> call = impl_->NewCall(key, cost);
    for (backend::Item& item : call->items) item.count_denied = true;
    impl_->top->Decide(call->items, impl_->clock->NowMicros(), call->out,
                       [call, done = std::move(done)](const backend::Outcome& outcome) {
                         if (!outcome.status.ok()) return done(outcome.status);
                         done(MakeVerdict(outcome, std::move(call->out)));
                       });
  });
}

void RateLimiter::ResetAsync(std::string_view key, ResetDone done) {
  std::shared_ptr<Impl::Call> call = impl_->NewCall(key, 0);
  impl_->top->Reset(call->items, [call, done = std::move(done)](absl::StatusOr<size_t> n) {
    done(std::move(n));
  });
}

absl::StatusOr<size_t> RateLimiter::Reset(std::string_view key) {
  return RunSync<absl::StatusOr<size_t>>(*impl_->top, impl_->sync_wait_us,
                                         [&](ResetDone done) { ResetAsync(key, std::move(done)); });
}

absl::Status RateLimiter::SetOverride(std::string_view key, std::vector<Limit> limits,
                                      int64_t until_us) {
  RateLimiter::Options memory;  // only the limits are checked here
  if (absl::Status s = Validate(limits, memory); !s.ok()) return s;
  if (until_us != 0 && until_us <= impl_->clock->NowMicros()) {
    return absl::InvalidArgumentError("the override's end has passed");
  }
  auto o = std::make_shared<Impl::Override>();
  o->limits = std::move(limits);
  o->until_us = until_us;
  // States of its own: named by the limiter and the key (and, as ever, the limit).
  o->items = impl_->ItemsOf(o->limits, fmt::format("{}#override:{}", impl_->name, key));
  const int64_t now_us = impl_->clock->NowMicros();
  absl::MutexLock lock(&impl_->overrides_mu);
  std::erase_if(impl_->overrides, [now_us](const auto& entry) {  // the ended ones go here
    return entry.second->until_us != 0 && now_us >= entry.second->until_us;
  });
  impl_->overrides[std::string(key)] = std::move(o);
  impl_->override_count.store(impl_->overrides.size(), std::memory_order_release);
  return absl::OkStatus();
}

bool RateLimiter::RemoveOverride(std::string_view key) {
  const int64_t now_us = impl_->clock->NowMicros();
  absl::MutexLock lock(&impl_->overrides_mu);
  const auto it = impl_->overrides.find(std::string(key));
  if (it == impl_->overrides.end()) return false;
  const bool in_force = it->second->until_us == 0 || now_us < it->second->until_us;
  impl_->overrides.erase(it);
  impl_->override_count.store(impl_->overrides.size(), std::memory_order_release);
  return in_force;
}

const std::vector<Limit>& RateLimiter::limits() const { return impl_->limits; }

const std::string& RateLimiter::where() const { return impl_->stack->where(); }

}  // namespace sluice
