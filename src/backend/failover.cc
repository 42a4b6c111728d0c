#include "backend/failover.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace sluice::backend {

void Failover::Decide(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                      Done done) {
  // `done` moves into the primary's completion, which either passes the outcome on or falls
  // back; the items and `out` stay valid until `done` has run (the caller's promise).
  primary_->Decide(items, now_us, out,
                   [this, items, now_us, out, done = std::move(done)](const Outcome& outcome) {
                     if (outcome.status.ok()) return done(outcome);
                     FallBack(items, now_us, out, done);
                   });
}

void Failover::FallBack(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                        const Done& done) {
  // Each policy used counts once per call (one call is one request, or several decided as one).
  std::array<bool, 3> used = {};
  for (const Item& item : items) used[static_cast<size_t>(item.sharing.on_failure)] = true;
  for (size_t mode = 0; mode < used.size(); ++mode) {
    if (used[mode]) fallbacks_[mode].fetch_add(1, std::memory_order_relaxed);
  }

  // The local items go to `local` together (one all-or-nothing decision), each on its share of
  // the limit: the divided limits live here until that decision is made, inline or not.
  struct Local {
    std::vector<Limit> shares;
    std::vector<Item> items;
    std::vector<size_t> index;  // into `items` of the call
    std::vector<Decision> decisions;
  };
  auto local = std::make_shared<Local>();
  bool allowed = true;
  for (size_t k = 0; k < items.size(); ++k) {
    const Item& item = items[k];
    switch (item.sharing.on_failure) {
      case FailureMode::kClosed:
        allowed = allowed && item.shadow;
        out[k] = {.allowed = false,
                  .remaining = 0,
                  .retry_after_us = kUnavailableRetryAfterUs,
                  .reset_after_us = kUnavailableRetryAfterUs,
                  .delay_us = 0};
        break;
      case FailureMode::kLocal:
        local->index.push_back(k);
        break;
      case FailureMode::kOpen:
        out[k] = {.allowed = true,
                  .remaining = static_cast<int64_t>(item.limit->Capacity()),
                  .retry_after_us = 0,
                  .reset_after_us = 0,
                  .delay_us = 0};
        break;
    }
  }
  if (local->index.empty()) {
    return done({.status = absl::OkStatus(),
                 .allowed = allowed,
                 .decided_at_us = now_us,
                 .fell_back = true});
  }
  local->shares.reserve(local->index.size());  // pointers into it stay valid
  for (const size_t k : local->index) {
    const Item& item = items[k];
    const uint64_t instances = std::max<uint32_t>(1, item.sharing.instances);
    Limit share = *item.limit;
    share.requests = std::max<uint64_t>(1, share.requests / instances);
    if (share.burst) {
      const uint64_t least = share.algorithm == Algorithm::kTokenBucket ? 1 : 0;
      share.burst = std::max<uint64_t>(least, *share.burst / instances);
    }
    local->shares.push_back(share);
    Item divided = item;
    divided.limit = &local->shares.back();
    divided.limit_id = item.limit_id ^ (0x9e3779b97f4a7c15ULL * instances);
    local->items.push_back(divided);
  }
  local->decisions.resize(local->items.size());
  local_->Decide(local->items, now_us, local->decisions,
                 [local, out, allowed, now_us, done](const Outcome& decided) {
                   for (size_t i = 0; i < local->index.size(); ++i) {
                     out[local->index[i]] = local->decisions[i];
                   }
                   // (What local consumed for a request denied after all stays consumed on this
                   // process's store: a share of the limit while the primary is away.)
                   done({.status = decided.status,
                         .allowed = decided.status.ok() && decided.allowed && allowed,
                         .decided_at_us = now_us,
                         .fell_back = true});
                 });
}

}  // namespace sluice::backend
