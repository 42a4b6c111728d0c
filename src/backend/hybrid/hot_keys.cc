#include "backend/hybrid/hot_keys.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "sluice/limit.h"

namespace sluice::backend {

HotKeys::HotKeys(size_t slots) : capacity_(std::max<size_t>(1, slots)) {
  absl::MutexLock lock(&mu_);
  slots_.resize(capacity_);
  heap_.reserve(capacity_);
  // Twice the slots: erasing and inserting at a bounded size then never grows the table.
  index_.reserve(2 * capacity_);
}

double HotKeys::Rate(const Slot& slot, int64_t mono) {
  const double left = 1.0 - static_cast<double>(mono % kSecondUs) / static_cast<double>(kSecondUs);
  return static_cast<double>(slot.own_now) + static_cast<double>(slot.own_last) * left;
}

bool HotKeys::Record(const Item& item, int64_t mono) {
  const uint64_t hash = absl::HashOf(item.limit_id, item.key);
  absl::MutexLock lock(&mu_);
  Roll(mono / kSecondUs);
  Slot& slot = Find(hash);
  slot.hot_key_rate = item.sharing.hot_key_rate;
  if (!slot.promoted && item.sharing.hot_key_rate > 0 &&
      Rate(slot, mono) > static_cast<double>(item.sharing.hot_key_rate)) {
    slot.promoted = true;
    slot.quiet_seconds = 0;
    slot.key.assign(item.key);
    slot.limit = DescribeLimit(*item.limit);
    ++promoted_;
    ++promotions_;
  }
  return slot.promoted;
}

HotKeys::Slot& HotKeys::Find(uint64_t hash) {
  if (const auto it = index_.find(hash); it != index_.end()) {
    Slot& slot = slots_[it->second];
    ++slot.weight_now;
    ++slot.own_now;
    SiftDown(slot.heap_index);
    return slot;
  }
  if (heap_.size() < capacity_) {  // a free slot
    const auto i = static_cast<uint32_t>(heap_.size());
    Slot& slot = slots_[i];
    slot.hash = hash;
    slot.weight_now = slot.own_now = 1;
    heap_.push_back(i);
    slot.heap_index = static_cast<uint32_t>(heap_.size() - 1);
    SiftUp(slot.heap_index);
    index_.emplace(hash, i);
    return slot;
  }
  // The least requested state gives its slot up: the new one inherits its weight, plus one.
  const uint32_t i = heap_.front();
  Slot& slot = slots_[i];
  index_.erase(slot.hash);
  if (slot.promoted) Demote(slot);
  slot.hash = hash;
  ++slot.weight_now;
  slot.own_now = 1;
  slot.own_last = 0;
  slot.quiet_seconds = 0;
  SiftDown(0);
  index_.emplace(hash, i);
  return slot;
}

void HotKeys::Demote(Slot& slot) {
  slot.promoted = false;
  slot.key.clear();
  slot.limit.clear();
  --promoted_;
  ++demotions_;
}

void HotKeys::Roll(int64_t second) {
  if (second <= second_) return;
  const int64_t elapsed = second - second_;
  second_ = second;
  for (const uint32_t i : heap_) {
    Slot& slot = slots_[i];
    if (slot.promoted) {
      // The seconds that ended: the first with own_now requests, any others with none.
      const bool quiet = uint64_t{2} * slot.own_now < slot.hot_key_rate;
      const int64_t quiet_seconds = quiet ? slot.quiet_seconds + elapsed : elapsed - 1;
      slot.quiet_seconds =
          static_cast<uint32_t>(std::min<int64_t>(quiet_seconds, kDemoteAfterSeconds));
      if (slot.quiet_seconds >= kDemoteAfterSeconds) Demote(slot);
    }
    slot.weight_last = elapsed == 1 ? slot.weight_now : 0;
    slot.own_last = elapsed == 1 ? slot.own_now : 0;
    slot.weight_now = 0;
    slot.own_now = 0;
  }
  for (size_t at = heap_.size() / 2; at-- > 0;) SiftDown(at);
}

bool HotKeys::Less(uint32_t a, uint32_t b) const { return Weight(slots_[a]) < Weight(slots_[b]); }

void HotKeys::Place(size_t at, uint32_t slot) {
  heap_[at] = slot;
  slots_[slot].heap_index = static_cast<uint32_t>(at);
}

void HotKeys::SiftUp(size_t at) {
  const uint32_t moving = heap_[at];
  while (at > 0) {
    const size_t parent = (at - 1) / 2;
    if (!Less(moving, heap_[parent])) break;
    Place(at, heap_[parent]);
    at = parent;
  }
  Place(at, moving);
}

void HotKeys::SiftDown(size_t at) {
  const uint32_t moving = heap_[at];
  const size_t n = heap_.size();
  for (;;) {
    size_t child = 2 * at + 1;
    if (child >= n) break;
    if (child + 1 < n && Less(heap_[child + 1], heap_[child])) ++child;
    if (!Less(heap_[child], moving)) break;
    Place(at, heap_[child]);
    at = child;
  }
  Place(at, moving);
}

std::vector<HotKeys::Hot> HotKeys::Top(size_t k, int64_t mono) {
  std::vector<Hot> hot;
  absl::MutexLock lock(&mu_);
  Roll(mono / kSecondUs);
  for (const uint32_t i : heap_) {
    const Slot& slot = slots_[i];
    if (slot.promoted)
      hot.push_back({.key = slot.key, .limit = slot.limit, .rate = Rate(slot, mono)});
  }
  const auto by_rate = [](const Hot& a, const Hot& b) {
    return a.rate != b.rate ? a.rate > b.rate : std::tie(a.key, a.limit) < std::tie(b.key, b.limit);
  };
  if (hot.size() > k) {
    std::partial_sort(hot.begin(), hot.begin() + static_cast<std::ptrdiff_t>(k), hot.end(),
                      by_rate);
    hot.resize(k);
  } else {
    std::sort(hot.begin(), hot.end(), by_rate);
  }
  return hot;
}

HotKeys::Stats HotKeys::GetStats() const {
  absl::MutexLock lock(&mu_);
  return {.tracked = heap_.size(),
          .promoted = promoted_,
          .promotions = promotions_,
          .demotions = demotions_};
}

size_t HotKeys::memory_bytes() const {
  absl::MutexLock lock(&mu_);
  return slots_.capacity() * sizeof(Slot) + heap_.capacity() * sizeof(uint32_t) +
         index_.capacity() * (sizeof(std::pair<uint64_t, uint32_t>) + 1);
}

}  // namespace sluice::backend
