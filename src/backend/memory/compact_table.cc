#include "backend/memory/compact_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <utility>

namespace sluice::store {
namespace {

constexpr size_t kMapThresholdBytes = size_t{64} << 10;
constexpr size_t kHugePageThresholdBytes = size_t{4} << 20;

}  // namespace

CompactTable::SlotArray CompactTable::AllocateSlots(size_t capacity) {
  const size_t bytes = capacity * sizeof(Slot);
  void* memory;
  if (bytes >= kMapThresholdBytes) {
    memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    // Random probes into a big table miss the TLB on every lookup with 4 KiB pages; transparent
    // huge pages (where the system allows them) make most of those misses go away.
    if (bytes >= kHugePageThresholdBytes) madvise(memory, bytes, MADV_HUGEPAGE);
  } else {
    memory = std::calloc(capacity, sizeof(Slot));
    if (memory == nullptr) throw std::bad_alloc();
  }
  return SlotArray(static_cast<Slot*>(memory), SlotArrayDeleter{capacity});
}

void CompactTable::SlotArrayDeleter::operator()(Slot* slots) const {
  const size_t bytes = capacity * sizeof(Slot);
  if (bytes >= kMapThresholdBytes) {
    munmap(slots, bytes);
  } else {
    std::free(slots);
  }
}

CompactTable::CompactTable(size_t max_entries)
    : max_entries_(std::max<size_t>(max_entries, 1)),
      max_capacity_(std::max(kMinCapacity, max_entries_ * 10 / 9 + 2)) {
  Rehash(std::min(kMinCapacity, max_capacity_));
}

CompactTable::Slot* CompactTable::Find(uint64_t hash) {
  size_t i = Home(hash);
  for (size_t dist = 0;; ++dist, i = Next(i)) {
    const uint64_t h = slots_[i].hash;
    if (h == hash) return &slots_[i];
    // Robin Hood invariant: had hash been here, it would sit before any entry closer to home.
    if (h == 0 || Distance(h, i) < dist) return nullptr;
  }
}

CompactTable::Slot* CompactTable::Insert(uint64_t hash, const algo::CompactState& state) {
  if (size_ >= max_entries_) return nullptr;
  if (NeedsGrowth()) {
    if (capacity_ >= max_capacity_) return nullptr;
    Rehash(std::min(max_capacity_, std::max(capacity_ + 1, capacity_ * 6 / 5)));
  }
  ++size_;
  return Place(hash, state);
}

CompactTable::Slot* CompactTable::Place(uint64_t hash, const algo::CompactState& state) {
  Slot carry{hash, state};
  Slot* placed = nullptr;
  size_t i = Home(hash);
  for (size_t dist = 0;; ++dist, i = Next(i)) {
    Slot& s = slots_[i];
    if (s.hash == 0) {
      s = carry;
      return placed != nullptr ? placed : &s;
    }
    const size_t resident = Distance(s.hash, i);
    if (resident < dist) {  // take from the rich: the resident moves on instead
      std::swap(carry, s);
      if (placed == nullptr) placed = &s;
      dist = resident;
    }
  }
}

void CompactTable::Erase(Slot* slot) { EraseAt(static_cast<size_t>(slot - slots_.get())); }

void CompactTable::EraseAt(size_t i) {
  // Backward shift: pull the following run one step towards home.
  for (size_t j = Next(i); slots_[j].hash != 0 && Distance(slots_[j].hash, j) > 0; j = Next(j)) {
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i].hash = 0;
  --size_;
}

size_t CompactTable::EraseIdle(int64_t now_us) {
  size_t erased = 0;
  for (size_t i = 0; i < capacity_;) {
    if (slots_[i].hash != 0 && slots_[i].state.IsIdle(now_us)) {
      EraseAt(i);  // a later entry may have moved into i: look at it again
      ++erased;
    } else {
      ++i;
    }
  }
  return erased;
}

size_t CompactTable::SweepSome(int64_t now_us, size_t count) {
  size_t erased = 0;
  for (size_t n = 0; n < count; ++n) {
    if (sweep_cursor_ >= capacity_) sweep_cursor_ = 0;
    Slot& s = slots_[sweep_cursor_];
    if (s.hash != 0 && s.state.IsIdle(now_us)) {
      EraseAt(sweep_cursor_);
      ++erased;
    } else {
      ++sweep_cursor_;
    }
  }
  return erased;
}

void CompactTable::Rehash(size_t new_capacity) {
  SlotArray old = std::move(slots_);
  const size_t old_capacity = capacity_;
  slots_ = AllocateSlots(new_capacity);  // zeroed: every hash 0
  capacity_ = new_capacity;
  slots_view_.store(slots_.get(), std::memory_order_relaxed);
  capacity_view_.store(capacity_, std::memory_order_relaxed);
  sweep_cursor_ = 0;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old[i].hash != 0) Place(old[i].hash, old[i].state);
  }
}

}  // namespace sluice::store
