// Failover: a backend that applies the failure policy when the backend behind it fails.
//
// Decisions go to `primary` (Redis). When it cannot decide (not connected, timed out, the
// breaker open, an error), every item of the request is answered as its Item::on_failure says:
//   open    allowed, with its whole capacity remaining;
//   closed  denied (retry after 1 s) unless it is a shadow item;
//   local   decided on `local` (this process's store) with the limit divided by Item::instances,
//           under a state identity of its own, so that it never meets a state of the undivided
//           limit.
// The request stays one decision: if any item refuses, nothing is admitted. Outcome::fell_back
// tells the caller the policy answered. Refund, Reset and health are the primary's: what a
// policy admitted is never refunded (the primary never counted it).
//
// Safe for concurrent use if both backends are. Neither is owned; both must outlive this.

#ifndef SLUICE_BACKEND_FAILOVER_H_
#define SLUICE_BACKEND_FAILOVER_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "backend/backend.h"

namespace sluice::backend {

class Failover final : public Backend {
 public:
  Failover(Backend* primary, Backend* local) : primary_(primary), local_(local) {}

  void Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
              Done done) override;
  void Refund(std::span<const Item> items, int64_t decided_at_us, int64_t now_us,
              RefundDone done) override {
    primary_->Refund(items, decided_at_us, now_us, std::move(done));
  }
  void Reset(std::span<const Item> items, ResetDone done) override {
    primary_->Reset(items, std::move(done));
  }
  bool answers_inline() const override { return primary_->answers_inline(); }
  std::string_view name() const override { return primary_->name(); }
  Health GetHealth() override { return primary_->GetHealth(); }

  // Items answered by each policy since start (a request counts once per item).
  uint64_t fallbacks(FailureMode mode) const {
    return fallbacks_[static_cast<size_t>(mode)].load(std::memory_order_relaxed);
  }

 private:
  // The primary failed: every item by its policy.
  void FallBack(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                const Done& done);

  Backend* const primary_;
  Backend* const local_;
  std::array<std::atomic<uint64_t>, 3> fallbacks_ = {};
};

}  // namespace sluice::backend

#endif  // SLUICE_BACKEND_FAILOVER_H_
