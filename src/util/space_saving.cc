#include "util/space_saving.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace sluice::util {
namespace {

// Highest count first; equal counts by key, so that answers do not depend on the heap's order.
bool Before(const SpaceSaving::Entry& a, const SpaceSaving::Entry& b) {
  return a.count != b.count ? a.count > b.count : a.key < b.key;
}

std::vector<SpaceSaving::Entry> FirstN(std::vector<SpaceSaving::Entry> all, size_t n) {
  n = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), Before);
  all.resize(n);
  return all;
}

}  // namespace

SpaceSaving::SpaceSaving(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {
  entries_.reserve(capacity_);
  heap_.reserve(capacity_);
  at_.reserve(capacity_);
  index_.reserve(capacity_);
}

void SpaceSaving::Add(std::string_view key, uint64_t weight) {
  total_ += weight;
  if (auto it = index_.find(key); it != index_.end()) {
    entries_[it->second].count += weight;
    SiftDown(at_[it->second]);
    return;
  }
  if (entries_.size() < capacity_) {
    const auto entry = static_cast<uint32_t>(entries_.size());
    entries_.push_back(Entry{.key = std::string(key), .count = weight, .error = 0});
    index_.emplace(entries_.back().key, entry);
    heap_.push_back(entry);
    at_.push_back(static_cast<uint32_t>(heap_.size() - 1));
    SiftUp(heap_.size() - 1);
    return;
  }
  // Every counter taken: the least counted key gives its counter up.
  const uint32_t entry = heap_[0];
  Entry& e = entries_[entry];
  index_.erase(e.key);
  e.key.assign(key);
  e.error = e.count;
  e.count += weight;
  index_.emplace(e.key, entry);
  SiftDown(0);
}

void SpaceSaving::Clear() {
  index_.clear();
  entries_.clear();
  heap_.clear();
  at_.clear();
  total_ = 0;
}

std::vector<SpaceSaving::Entry> SpaceSaving::Top(size_t n) const { return FirstN(entries_, n); }

uint64_t SpaceSaving::Floor() const {
  return entries_.size() < capacity_ ? 0 : entries_[heap_[0]].count;
}

const SpaceSaving::Entry* SpaceSaving::Find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

void SpaceSaving::Place(size_t at, uint32_t entry) {
  heap_[at] = entry;
  at_[entry] = static_cast<uint32_t>(at);
}

void SpaceSaving::SiftDown(size_t at) {
  const uint32_t entry = heap_[at];
  for (;;) {
    size_t child = 2 * at + 1;
    if (child >= heap_.size()) break;
    if (child + 1 < heap_.size() && Less(heap_[child + 1], heap_[child])) ++child;
    if (!Less(heap_[child], entry)) break;
    Place(at, heap_[child]);
    at = child;
  }
  Place(at, entry);
}

void SpaceSaving::SiftUp(size_t at) {
  const uint32_t entry = heap_[at];
  while (at > 0) {
    const size_t parent = (at - 1) / 2;
    if (!Less(entry, heap_[parent])) break;
    Place(at, heap_[parent]);
    at = parent;
  }
  Place(at, entry);
}

std::vector<SpaceSaving::Entry> JoinedTop(std::span<const SpaceSaving* const> sketches, size_t n) {
  absl::flat_hash_set<std::string_view> keys;
  for (const SpaceSaving* s : sketches) {
    for (const auto& e : s->entries()) keys.insert(e.key);
  }
  std::vector<SpaceSaving::Entry> all;
  all.reserve(keys.size());
  for (std::string_view key : keys) {
    SpaceSaving::Entry joined{.key = std::string(key)};
    for (const SpaceSaving* s : sketches) {
      const SpaceSaving::Entry* e = s->Find(key);
      joined.count += e != nullptr ? e->count : s->Floor();
      joined.error += e != nullptr ? e->error : s->Floor();
    }
    all.push_back(std::move(joined));
  }
  return FirstN(std::move(all), n);
}

}  // namespace sluice::util
