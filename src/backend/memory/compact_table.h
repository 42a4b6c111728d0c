// CompactTable: the open-addressing hash table behind one shard of the memory store.
//
// Each slot is 24 bytes: the 64-bit hash of (limit id, key) and the algorithm's 16-byte
// CompactState. Keys themselves are not stored; two different (limit, key) pairs share state only
// if their 64-bit hashes collide, which for K live keys happens with probability about
// K^2 / 2^65 (about 3e-6 at 10 million keys). Hash 0 marks an empty slot (a real 0 is remapped).
//
// Robin Hood linear probing with backward-shift deletion (no tombstones), loads up to 90 %, and
// growth by 1.2x rather than 2x so that the table stays between 75 % and 90 % full once it has
// grown: at most 32 bytes per live entry. Capacity is not a power of two; a slot's home is
// chosen by multiply-shift on the high bits of the hash (the store picks the shard with the low
// bits).
//
// Not thread-safe: the store guards each table with its shard's mutex. Slot pointers are
// invalidated by Insert and Erase.

#ifndef SLUICE_BACKEND_MEMORY_COMPACT_TABLE_H_
#define SLUICE_BACKEND_MEMORY_COMPACT_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "algo/algorithms.h"

namespace sluice::store {

class CompactTable {
 public:
  struct Slot {
    uint64_t hash;  // 0 = empty
    algo::CompactState state;
  };
  static_assert(sizeof(Slot) == 24);

  static constexpr size_t kMinCapacity = 16;

  // max_entries: the table never holds more; Insert fails (returns nullptr) when it would.
  explicit CompactTable(size_t max_entries);

  CompactTable(const CompactTable&) = delete;
  CompactTable& operator=(const CompactTable&) = delete;

  // The slot holding hash, or nullptr.
  Slot* Find(uint64_t hash);

  // Starts loading hash's home slot into the cache. Safe to call without the table's lock and
  // concurrently with anything: it reads a possibly stale view of the slot array, and a prefetch
  // of a stale address is harmless.
  void Prefetch(uint64_t hash) const {
    const Slot* slots = slots_view_.load(std::memory_order_relaxed);
    const size_t capacity = capacity_view_.load(std::memory_order_relaxed);
    __extension__ using u128 = unsigned __int128;
    const Slot* home = slots + static_cast<size_t>((static_cast<u128>(hash) * capacity) >> 64);
    // A 24-byte slot and its Robin Hood neighbours often straddle two cache lines.
    __builtin_prefetch(home, 1);
    __builtin_prefetch(reinterpret_cast<const char*>(home) + 64, 1);
  }

  // Adds hash (which must be absent) with state, growing if needed. nullptr when the table holds
  // max_entries already: the caller reclaims first (the store never drops a live entry).
  Slot* Insert(uint64_t hash, const algo::CompactState& state);

  void Erase(Slot* slot);

  // Erases every idle entry (now_us >= idle_at_us); returns how many.
  size_t EraseIdle(int64_t now_us);

  // Examines up to `count` slots from a rolling cursor and erases the idle ones: a little
  // housekeeping on each insert keeps long-idle keys from piling up. Returns how many it erased.
  size_t SweepSome(int64_t now_us, size_t count);

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  size_t max_entries() const { return max_entries_; }
  size_t memory_bytes() const { return capacity_ * sizeof(Slot); }

  // True when one more entry would take the table past 90 % full.
  bool NeedsGrowth() const { return (size_ + 1) * 10 > capacity_ * 9; }

  static uint64_t NormalizeHash(uint64_t hash) { return hash == 0 ? 1 : hash; }

 private:
  size_t Home(uint64_t hash) const {
    __extension__ using u128 = unsigned __int128;
    return static_cast<size_t>((static_cast<u128>(hash) * capacity_) >> 64);
  }
  size_t Next(size_t i) const { return i + 1 == capacity_ ? 0 : i + 1; }
  size_t Distance(uint64_t hash, size_t i) const {
    const size_t home = Home(hash);
    return i >= home ? i - home : i + capacity_ - home;
  }
  void Rehash(size_t new_capacity);
  Slot* Place(uint64_t hash, const algo::CompactState& state);
  void EraseAt(size_t i);

  // Slot arrays of 64 KiB and more are mapped straight from the kernel and unmapped when the
  // table grows, so their memory goes back to the system at once instead of lingering in the
  // allocator's heap; fresh anonymous pages are already zero, i.e. empty slots.
  struct SlotArrayDeleter {
    size_t capacity;
    void operator()(Slot* slots) const;
  };
  using SlotArray = std::unique_ptr<Slot[], SlotArrayDeleter>;
  static SlotArray AllocateSlots(size_t capacity);

  SlotArray slots_;
  size_t capacity_ = 0;
  std::atomic<const Slot*> slots_view_{nullptr};  // for Prefetch only
  std::atomic<size_t> capacity_view_{0};
  size_t size_ = 0;
  size_t max_entries_;
  size_t max_capacity_;
  size_t sweep_cursor_ = 0;
};

}  // namespace sluice::store

#endif  // SLUICE_BACKEND_MEMORY_COMPACT_TABLE_H_
