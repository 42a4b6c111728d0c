#include "algo/concurrency.h"

#include <algorithm>

namespace sluice::algo {
namespace {

// Drops the holds that expired by now_us.
void DropExpired(ConcurrencyState& state, int64_t now_us) {
  std::erase_if(state.holds,
                [now_us](const ConcurrencyState::Hold& h) { return h.expires_us <= now_us; });
}

}  // namespace

bool ConcurrencyState::IsIdle(int64_t now_us) const { return LiveHolds(*this, now_us) == 0; }

uint64_t LiveHolds(const ConcurrencyState& state, int64_t now_us) {
  return static_cast<uint64_t>(
      std::count_if(state.holds.begin(), state.holds.end(),
                    [now_us](const ConcurrencyState::Hold& h) { return h.expires_us > now_us; }));
}

Acquired Acquire(ConcurrencyState& state, int64_t now_us, uint64_t n, int64_t max_hold_us) {
  DropExpired(state, now_us);
  Acquired a;
  if (state.holds.size() >= n) {
    if (state.holds.empty()) {
      a.retry_after_us = -1;  // n == 0: never
      return a;
    }
    const auto earliest =
        std::min_element(state.holds.begin(), state.holds.end(),
                         [](const auto& x, const auto& y) { return x.expires_us < y.expires_us; });
    a.retry_after_us = earliest->expires_us - now_us;
    return a;
  }
  a.ok = true;
  a.id = state.next_id++;
  if (state.next_id == 0) state.next_id = 1;
  a.expires_us = now_us + max_hold_us;
  state.holds.push_back({a.id, a.expires_us});
  a.remaining = static_cast<int64_t>(n - state.holds.size());
  return a;
}

bool Release(ConcurrencyState& state, uint64_t id, int64_t now_us) {
  DropExpired(state, now_us);
  const auto it = std::find_if(state.holds.begin(), state.holds.end(),
                               [id](const ConcurrencyState::Hold& h) { return h.id == id; });
  if (it == state.holds.end()) return false;
  state.holds.erase(it);
  return true;
}

std::optional<int64_t> Renew(ConcurrencyState& state, uint64_t id, int64_t now_us,
                             int64_t max_hold_us) {
  DropExpired(state, now_us);
  for (ConcurrencyState::Hold& h : state.holds) {
    if (h.id == id) {
      h.expires_us = now_us + max_hold_us;
      return h.expires_us;
    }
  }
  return std::nullopt;
}

}  // namespace sluice::algo
