// The most frequent keys of a stream in fixed memory: the space-saving algorithm (Metwally,
// Agrawal and El Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data Streams",
// 2005). At most `capacity` keys are counted. A new key, when every counter is taken, replaces
// the key with the lowest count and inherits that count as its error. With N the weight added
// so far, for any key of true weight w:
//   - counted: count - error <= w <= count, and error <= N / capacity;
//   - not counted: w <= Floor() <= N / capacity; so every key with w > N / capacity is counted.
// Not thread-safe (the owner locks). Memory: `capacity` entries of the key's bytes and ~80 more.
// docs/operations.md ("Who is being limited") states what the console and /v1/top make of these
// bounds.

#ifndef SLUICE_UTIL_SPACE_SAVING_H_
#define SLUICE_UTIL_SPACE_SAVING_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace sluice::util {

class SpaceSaving {
 public:
  struct Entry {
    std::string key;
    uint64_t count = 0;  // at least the key's true weight
    uint64_t error = 0;  // count - error is at most its true weight
  };

  explicit SpaceSaving(size_t capacity);
  SpaceSaving(const SpaceSaving&) = delete;
  SpaceSaving& operator=(const SpaceSaving&) = delete;

  void Add(std::string_view key, uint64_t weight = 1);
  // Forgets every key (the capacity stays).
  void Clear();

  // The `n` counted keys of highest count, highest first (equal counts: by key).
  std::vector<Entry> Top(size_t n) const;
  // The most an uncounted key can weigh: the lowest count once every counter is taken, else 0.
  uint64_t Floor() const;
  // The counted entry of `key`, or null.
  const Entry* Find(std::string_view key) const;
  std::span<const Entry> entries() const { return entries_; }
  uint64_t total() const { return total_; }
  size_t capacity() const { return capacity_; }

 private:
  bool Less(uint32_t a, uint32_t b) const { return entries_[a].count < entries_[b].count; }
  void SiftDown(size_t at);
  void SiftUp(size_t at);
  void Place(size_t at, uint32_t entry);

  size_t capacity_;
  std::vector<Entry> entries_;  // reserved to capacity_ once: keys' views below stay valid
  std::vector<uint32_t> heap_;  // entries_ indexes, a min-heap by count
  std::vector<uint32_t> at_;    // an entry's place in heap_
  absl::flat_hash_map<std::string_view, uint32_t> index_;  // views of entries_[i].key
  uint64_t total_ = 0;
};

// The top `n` keys of several sketches' streams taken as one (the minutes of a window): a key's
// count and error are the sums over the sketches, each counting an uncounted key at its Floor(),
// so the bounds above still hold for the joined stream. Highest count first (ties: by key).
std::vector<SpaceSaving::Entry> JoinedTop(std::span<const SpaceSaving* const> sketches, size_t n);

}  // namespace sluice::util

#endif  // SLUICE_UTIL_SPACE_SAVING_H_
