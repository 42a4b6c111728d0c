#include "backend/memory/compact_table.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::store {
namespace {

using algo::CompactState;
using Slot = CompactTable::Slot;

// In a table of kMinCapacity (16) slots, a hash's home is its top four bits (multiply-shift:
// hash * 16 >> 64). These helpers build hashes that land where a test needs them.
static_assert(CompactTable::kMinCapacity == 16);
uint64_t HashAtHome16(uint64_t home, uint64_t tag) { return home << 60 | (tag + 1); }

// The aux field of a slot's state, or a value no test uses when there is no slot (a test that
// catches a regression must not crash on it).
constexpr uint64_t kNoSlot = ~uint64_t{0};
uint64_t AuxOf(const Slot* slot) { return slot == nullptr ? kNoSlot : slot->state.aux; }

// Erases hash; false (and nothing done) when it is not in the table.
bool EraseHash(CompactTable& table, uint64_t hash) {
  Slot* slot = table.Find(hash);
  if (slot == nullptr) return false;
  table.Erase(slot);
  return true;
}

// Slot index of a slot relative to another one, wrapping at `capacity`.
size_t SlotsAfter(const Slot* from, const Slot* to, size_t capacity) {
  const std::ptrdiff_t d = to - from;
  return static_cast<size_t>(d >= 0 ? d : d + static_cast<std::ptrdiff_t>(capacity));
}

// A reference model: the table must behave as a map from hash to state.
class ModelChecker {
 public:
  explicit ModelChecker(CompactTable& table) : table_(table) {}

  void Insert(uint64_t hash, CompactState state) {
    ASSERT_EQ(table_.Find(hash), nullptr) << "hash " << hash << " is not in the table yet";
    Slot* slot = table_.Insert(hash, state);
    ASSERT_NE(slot, nullptr);
    EXPECT_EQ(slot->hash, hash);
    EXPECT_EQ(slot->state, state);
    index_[hash] = keys_.size();
    keys_.push_back(hash);
    model_[hash] = state;
  }

  void EraseAt(size_t position) {
    const uint64_t hash = keys_[position];
    Slot* slot = table_.Find(hash);
    ASSERT_NE(slot, nullptr) << "hash " << hash << " must be found before it is erased";
    table_.Erase(slot);
    EXPECT_EQ(table_.Find(hash), nullptr) << "hash " << hash << " still found after Erase";
    keys_[position] = keys_.back();
    index_[keys_[position]] = position;
    keys_.pop_back();
    index_.erase(hash);
    model_.erase(hash);
  }

  void Update(size_t position, CompactState state) {
    Slot* slot = table_.Find(keys_[position]);
    ASSERT_NE(slot, nullptr);
    slot->state = state;
    model_[keys_[position]] = state;
  }

  // Every hash of the model is found with its state, and the sizes agree.
  void CheckAll() const {
    ASSERT_EQ(table_.size(), model_.size());
    for (const auto& [hash, state] : model_) {
      const Slot* slot = table_.Find(hash);
      ASSERT_NE(slot, nullptr) << "hash " << hash << " lost";
      ASSERT_EQ(slot->hash, hash);
      ASSERT_EQ(slot->state, state) << "hash " << hash;
    }
  }

  bool Contains(uint64_t hash) const { return model_.contains(hash); }

  // A random hash not in the table yet.
  uint64_t FreshHash(std::mt19937_64& rng) const {
    for (;;) {
      const uint64_t h = CompactTable::NormalizeHash(rng());
      if (!Contains(h)) return h;
    }
  }
  size_t size() const { return keys_.size(); }

 private:
  CompactTable& table_;
  std::unordered_map<uint64_t, CompactState> model_;
  std::unordered_map<uint64_t, size_t> index_;
  std::vector<uint64_t> keys_;
};

CompactState RandomState(std::mt19937_64& rng) { return {static_cast<int64_t>(rng() >> 2), rng()}; }

// Random inserts, erases, updates and misses against the model, growing to `peak` entries, then
// shrinking to a few and growing again. `next_hash` draws the hashes.
template <typename NextHash>
void RunAgainstModel(uint64_t seed, size_t peak, NextHash next_hash) {
  std::mt19937_64 rng(seed);
  CompactTable table(size_t{1} << 22);
  ModelChecker model(table);
  const auto fresh_hash = [&] {
    for (;;) {
      const uint64_t h = CompactTable::NormalizeHash(next_hash(rng));
      if (!model.Contains(h)) return h;
    }
  };
  for (int phase = 0; phase < 4; ++phase) {
    const bool growing = phase % 2 == 0;
    const size_t target = growing ? peak : peak / 20;
    size_t ops = 0;
    while (growing ? model.size() < target : model.size() > target) {
      const uint64_t dice = rng() % 100;
      if (dice < (growing ? 60u : 25u) || model.size() == 0) {
        ASSERT_NO_FATAL_FAILURE(model.Insert(fresh_hash(), RandomState(rng)));
      } else if (dice < 90) {
        ASSERT_NO_FATAL_FAILURE(model.EraseAt(rng() % model.size()));
      } else if (dice < 95) {
        ASSERT_NO_FATAL_FAILURE(model.Update(rng() % model.size(), RandomState(rng)));
      } else {
        EXPECT_EQ(table.Find(fresh_hash()), nullptr);
      }
      if (++ops % 4096 == 0) {
        ASSERT_NO_FATAL_FAILURE(model.CheckAll());
      }
    }
    ASSERT_NO_FATAL_FAILURE(model.CheckAll());
  }
}

TEST(CompactTableTest, StartsEmptyWithMinimumCapacity) {
  CompactTable table(1000);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.capacity(), CompactTable::kMinCapacity);
  EXPECT_EQ(table.max_entries(), 1000u);
  EXPECT_EQ(table.memory_bytes(), CompactTable::kMinCapacity * sizeof(Slot));
  EXPECT_EQ(table.Find(12345), nullptr);
}

TEST(CompactTableTest, NormalizeHashRemapsOnlyZero) {
  EXPECT_NE(CompactTable::NormalizeHash(0), 0u);
  EXPECT_EQ(CompactTable::NormalizeHash(1), 1u);
  EXPECT_EQ(CompactTable::NormalizeHash(std::numeric_limits<uint64_t>::max()),
            std::numeric_limits<uint64_t>::max());
}

TEST(CompactTableTest, InsertThenFindReturnsTheStoredState) {
  CompactTable table(100);
  const CompactState state{.idle_at_us = 42, .aux = 7};
  Slot* inserted = table.Insert(0xABCDEF, state);
  ASSERT_NE(inserted, nullptr);
  Slot* found = table.Find(0xABCDEF);
  ASSERT_EQ(found, inserted);
  EXPECT_EQ(found->state, state);
  EXPECT_EQ(table.size(), 1u);
  found->state.aux = 8;  // a found slot is the live state
  EXPECT_EQ(AuxOf(table.Find(0xABCDEF)), 8u);
  EXPECT_EQ(table.Find(0xABCDEE), nullptr);
}

TEST(CompactTableTest, RandomOperationsMatchAnUnorderedMap) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    RunAgainstModel(seed, 20000, [](std::mt19937_64& rng) { return rng(); });
  }
}

// Hashes drawn from a few narrow ranges make long probe runs, many Robin Hood displacements and
// backward shifts across runs; the range at the top of the hash space wraps round the end of the
// table.
TEST(CompactTableTest, ClusteredHashesMatchAnUnorderedMap) {
  for (uint64_t seed : {4u, 5u}) {
    SCOPED_TRACE(seed);
    RunAgainstModel(seed, 6000, [](std::mt19937_64& rng) {
      const uint64_t cluster = rng() % 8 == 0 ? 63 : rng() % 64;
      return cluster << 58 | (rng() >> 50);  // 64 clusters, each a few thousand values wide
    });
  }
}

TEST(CompactTableTest, GrowthKeepsEverythingFindable) {
  std::mt19937_64 rng(7);
  CompactTable table(size_t{1} << 20);
  ModelChecker model(table);
  size_t last_capacity = table.capacity();
  int growths = 0;
  for (int i = 0; i < 50000; ++i) {
    ASSERT_NO_FATAL_FAILURE(model.Insert(model.FreshHash(rng), RandomState(rng)));
    if (table.capacity() != last_capacity) {
      EXPECT_GT(table.capacity(), last_capacity);
      last_capacity = table.capacity();
      ++growths;
      ASSERT_NO_FATAL_FAILURE(model.CheckAll()) << "after growing to " << last_capacity;
    }
  }
  EXPECT_GT(growths, 10);
  ASSERT_NO_FATAL_FAILURE(model.CheckAll());
}

TEST(CompactTableTest, InsertDisplacesRicherEntriesAndFindStillReachesAll) {
  CompactTable table(100);
  // Three entries at home 3, then one at home 4 which must go after them (Robin Hood), then one
  // more at home 3 which takes the home-4 entry's place.
  const uint64_t a = HashAtHome16(3, 0), b = HashAtHome16(3, 1), c = HashAtHome16(3, 2);
  const uint64_t d = HashAtHome16(4, 0), e = HashAtHome16(3, 3);
  for (uint64_t h : {a, b, c, d, e}) ASSERT_NE(table.Insert(h, {}), nullptr);
  ASSERT_EQ(table.capacity(), 16u);
  const Slot* sa = table.Find(a);
  ASSERT_NE(sa, nullptr);
  EXPECT_EQ(SlotsAfter(sa, table.Find(b), 16), 1u);
  EXPECT_EQ(SlotsAfter(sa, table.Find(c), 16), 2u);
  EXPECT_EQ(SlotsAfter(sa, table.Find(e), 16), 3u);
  EXPECT_EQ(SlotsAfter(sa, table.Find(d), 16), 4u);
  // A miss for home 4 stops at the first entry closer to its home than the probe distance.
  EXPECT_EQ(table.Find(HashAtHome16(4, 9)), nullptr);
  EXPECT_EQ(table.Find(HashAtHome16(3, 9)), nullptr);
}

TEST(CompactTableTest, EraseShiftsTheFollowingRunBackTowardsHome) {
  CompactTable table(100);
  const uint64_t a = HashAtHome16(5, 0), b = HashAtHome16(5, 1), c = HashAtHome16(5, 2);
  const uint64_t d = HashAtHome16(6, 0), f = HashAtHome16(9, 0);
  for (uint64_t h : {a, b, c, d, f}) {
    ASSERT_NE(table.Insert(h, {.idle_at_us = 1, .aux = h}), nullptr);
  }
  const Slot* sa = table.Find(a);
  ASSERT_EQ(SlotsAfter(sa, table.Find(d), 16), 3u);  // d was pushed two past its home
  ASSERT_TRUE(EraseHash(table, a));
  // b, c and d each moved one step back: b is now where a was, d is one past its home.
  const Slot* sb = table.Find(b);
  ASSERT_EQ(sb, sa);
  EXPECT_EQ(SlotsAfter(sb, table.Find(c), 16), 1u);
  EXPECT_EQ(SlotsAfter(sb, table.Find(d), 16), 2u);
  // f sits at its home, after the end of the run: untouched.
  EXPECT_EQ(SlotsAfter(sb, table.Find(f), 16), 4u);
  ASSERT_TRUE(EraseHash(table, c));
  EXPECT_EQ(SlotsAfter(sb, table.Find(d), 16), 1u);  // d is home again
  EXPECT_EQ(table.size(), 3u);
  for (uint64_t h : {b, d, f}) {
    EXPECT_EQ(AuxOf(table.Find(h)), h) << "state moved with its hash";
  }
  EXPECT_EQ(table.Find(a), nullptr);
  EXPECT_EQ(table.Find(c), nullptr);
}

TEST(CompactTableTest, RunsWrapAroundTheEndOfTheTable) {
  CompactTable table(100);
  // Four entries whose home is the last slot: they occupy 15, 0, 1, 2; an entry with home 0 goes
  // after them, to 3.
  const uint64_t w0 = HashAtHome16(15, 0), w1 = HashAtHome16(15, 1), w2 = HashAtHome16(15, 2),
                 w3 = HashAtHome16(15, 3);
  const uint64_t z = HashAtHome16(0, 0);
  for (uint64_t h : {w0, w1, w2, w3, z}) {
    ASSERT_NE(table.Insert(h, {.idle_at_us = 0, .aux = h}), nullptr);
  }
  ASSERT_EQ(table.capacity(), 16u);
  const Slot* s15 = table.Find(w0);
  ASSERT_NE(s15, nullptr);
  EXPECT_EQ(SlotsAfter(s15, table.Find(w1), 16), 1u);
  EXPECT_EQ(SlotsAfter(s15, table.Find(w3), 16), 3u);
  EXPECT_EQ(SlotsAfter(s15, table.Find(z), 16), 4u);
  EXPECT_EQ(table.Find(HashAtHome16(15, 9)), nullptr);
  EXPECT_EQ(table.Find(HashAtHome16(0, 9)), nullptr);

  // Erasing the entry in the last slot pulls the wrapped run back across the end.
  ASSERT_TRUE(EraseHash(table, w0));
  EXPECT_EQ(table.Find(w1), s15);
  EXPECT_EQ(SlotsAfter(s15, table.Find(w2), 16), 1u);
  EXPECT_EQ(SlotsAfter(s15, table.Find(w3), 16), 2u);
  EXPECT_EQ(SlotsAfter(s15, table.Find(z), 16), 3u);
  // Erasing in slot 0 shifts the rest of the run, whose entries' homes are 15 and 0.
  ASSERT_TRUE(EraseHash(table, w2));
  EXPECT_EQ(SlotsAfter(s15, table.Find(w3), 16), 1u);
  EXPECT_EQ(SlotsAfter(s15, table.Find(z), 16), 2u);
  EXPECT_EQ(table.size(), 3u);
  for (uint64_t h : {w1, w3, z}) EXPECT_EQ(AuxOf(table.Find(h)), h);
  EXPECT_EQ(table.Find(w0), nullptr);
  EXPECT_EQ(table.Find(w2), nullptr);
}

TEST(CompactTableTest, ChurnDoesNotGrowTheTable) {
  // Backward-shift deletion leaves no tombstones: a table that never holds more than a few
  // entries stays at its minimum size however many come and go.
  std::mt19937_64 rng(11);
  CompactTable table(1000);
  ModelChecker model(table);
  for (int i = 0; i < 100000; ++i) {
    if (model.size() < 10) {
      ASSERT_NO_FATAL_FAILURE(model.Insert(model.FreshHash(rng), {}));
    } else {
      ASSERT_NO_FATAL_FAILURE(model.EraseAt(rng() % model.size()));
    }
  }
  EXPECT_EQ(table.capacity(), CompactTable::kMinCapacity);
  ASSERT_NO_FATAL_FAILURE(model.CheckAll());
}

TEST(CompactTableTest, InsertFailsOnceMaxEntriesAreHeld) {
  CompactTable table(100);
  std::mt19937_64 rng(13);
  std::vector<uint64_t> hashes;
  while (hashes.size() < 100) {
    const uint64_t h = CompactTable::NormalizeHash(rng());
    ASSERT_NE(table.Insert(h, {}), nullptr) << "entry " << hashes.size();
    hashes.push_back(h);
  }
  EXPECT_EQ(table.Insert(0xFEEDFACE, {}), nullptr);
  EXPECT_EQ(table.size(), 100u);
  EXPECT_EQ(table.Find(0xFEEDFACE), nullptr);
  EXPECT_LE(table.capacity(), 100u * 10 / 9 + 2) << "never grows past what max_entries needs";
  for (uint64_t h : hashes) EXPECT_NE(table.Find(h), nullptr);

  ASSERT_TRUE(EraseHash(table, hashes[17]));
  EXPECT_NE(table.Insert(0xFEEDFACE, {}), nullptr) << "room again after an erase";
  EXPECT_EQ(table.Insert(0xC0FFEE, {}), nullptr);
  EXPECT_EQ(table.size(), 100u);
}

TEST(CompactTableTest, MaxEntriesBelowOneMeansOne) {
  CompactTable table(0);
  EXPECT_EQ(table.max_entries(), 1u);
  EXPECT_NE(table.Insert(5, {}), nullptr);
  EXPECT_EQ(table.Insert(6, {}), nullptr);
}

TEST(CompactTableTest, EraseIdleRemovesExactlyTheIdleEntries) {
  std::mt19937_64 rng(17);
  CompactTable table(size_t{1} << 20);
  std::unordered_map<uint64_t, CompactState> model;
  while (model.size() < 20000) {
    const uint64_t h = CompactTable::NormalizeHash(rng());
    if (model.contains(h)) continue;
    const CompactState s{.idle_at_us = static_cast<int64_t>(rng() % 1000), .aux = h};
    ASSERT_NE(table.Insert(h, s), nullptr);
    model[h] = s;
  }
  size_t idle = 0;
  for (const auto& [h, s] : model) idle += s.idle_at_us <= 500 ? 1 : 0;  // idle_at == now is idle

  EXPECT_EQ(table.EraseIdle(500), idle);
  EXPECT_EQ(table.size(), model.size() - idle);
  for (const auto& [h, s] : model) {
    const Slot* slot = table.Find(h);
    if (s.idle_at_us <= 500) {
      EXPECT_EQ(slot, nullptr) << "idle entry kept: idle_at " << s.idle_at_us;
    } else {
      ASSERT_NE(slot, nullptr) << "busy entry erased: idle_at " << s.idle_at_us;
      EXPECT_EQ(slot->state, s);
    }
  }
  EXPECT_EQ(table.EraseIdle(500), 0u);
  EXPECT_EQ(table.EraseIdle(std::numeric_limits<int64_t>::max()), model.size() - idle);
  EXPECT_EQ(table.size(), 0u);
}

// Small full tables whose runs wrap round the end, with idle and busy entries mixed: the cases
// where an erase shifts an entry into a slot the scan has already passed.
TEST(CompactTableTest, EraseIdleHandlesRunsThatWrapAround) {
  std::mt19937_64 rng(19);
  for (int trial = 0; trial < 3000; ++trial) {
    CompactTable table(1000);
    std::unordered_map<uint64_t, CompactState> model;
    const size_t n = 1 + rng() % 14;  // up to 14 entries fit in 16 slots without growth
    while (model.size() < n) {
      const uint64_t home = (12 + rng() % 7) % 16;  // homes 12..15 and 0..2
      const uint64_t h = HashAtHome16(home, rng() % 1000);
      if (model.contains(h)) continue;
      const CompactState s{.idle_at_us = static_cast<int64_t>(rng() % 2), .aux = h};
      ASSERT_NE(table.Insert(h, s), nullptr);
      model[h] = s;
    }
    ASSERT_EQ(table.capacity(), 16u);
    size_t idle = 0;
    for (const auto& [h, s] : model) idle += s.idle_at_us <= 0 ? 1 : 0;
    ASSERT_EQ(table.EraseIdle(0), idle) << "trial " << trial;
    for (const auto& [h, s] : model) {
      ASSERT_EQ(table.Find(h) != nullptr, s.idle_at_us > 0) << "trial " << trial;
    }
  }
}

TEST(CompactTableTest, SweepSomeRemovesExactlyTheIdleEntriesBitByBit) {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 200; ++trial) {
    CompactTable table(1000);
    std::unordered_map<uint64_t, CompactState> model;
    const size_t n = 1 + rng() % 600;
    while (model.size() < n) {
      // Half the trials crowd the hashes at the top so that runs wrap round the end.
      const uint64_t h =
          CompactTable::NormalizeHash(trial % 2 == 0 ? rng() : rng() | (uint64_t{7} << 61));
      if (model.contains(h)) continue;
      const CompactState s{.idle_at_us = static_cast<int64_t>(rng() % 100), .aux = h};
      ASSERT_NE(table.Insert(h, s), nullptr);
      model[h] = s;
    }
    // Move the cursor to a random slot first; nothing is idle at time -1.
    ASSERT_EQ(table.SweepSome(-1, rng() % table.capacity()), 0u);

    size_t idle = 0;
    for (const auto& [h, s] : model) idle += s.idle_at_us <= 50 ? 1 : 0;
    // Each step either erases or moves on, so 2 * capacity steps cover every slot.
    size_t erased = 0;
    for (size_t steps = 0; steps < 2 * table.capacity();) {
      const size_t count = 1 + rng() % 5;
      const size_t e = table.SweepSome(50, count);
      ASSERT_LE(e, count) << "examines at most count slots";
      erased += e;
      steps += count;
    }
    ASSERT_EQ(erased, idle) << "trial " << trial;
    ASSERT_EQ(table.size(), n - idle);
    for (const auto& [h, s] : model) {
      const Slot* slot = table.Find(h);
      if (s.idle_at_us <= 50) {
        ASSERT_EQ(slot, nullptr) << "trial " << trial;
      } else {
        ASSERT_NE(slot, nullptr) << "trial " << trial;
        ASSERT_EQ(slot->state, s);
      }
    }
  }
}

TEST(CompactTableTest, SweepSomeExaminesOnlyCountSlotsPerCall) {
  CompactTable table(1000);
  for (uint64_t tag = 0; tag < 10; ++tag) {
    ASSERT_NE(table.Insert(HashAtHome16(0, tag), {.idle_at_us = 0, .aux = 0}), nullptr);
  }
  // The cursor starts at slot 0; all ten entries are idle and form one run from slot 0, so each
  // erase shifts the next one into the cursor's slot.
  EXPECT_EQ(table.SweepSome(10, 3), 3u);
  EXPECT_EQ(table.size(), 7u);
  EXPECT_EQ(table.SweepSome(10, 0), 0u);
  EXPECT_EQ(table.SweepSome(10, 100), 7u);
  EXPECT_EQ(table.size(), 0u);
}

TEST(CompactTableTest, MemoryStaysAtMost32BytesPerEntryOnceGrown) {
  std::mt19937_64 rng(29);
  CompactTable table(size_t{1} << 21);
  std::vector<std::pair<size_t, size_t>> checkpoints;  // (entries, bytes)
  for (size_t n = 1; n <= 1000000; ++n) {
    ASSERT_NE(table.Insert(CompactTable::NormalizeHash(rng()), {}), nullptr);
    // Once past the first growth, every size: right after a 1.2x growth the table is 75 % full.
    if (n >= 1000) {
      ASSERT_LE(table.memory_bytes(), 32 * table.size()) << "at " << n << " entries";
    }
    if (n == 100000 || n == 300000 || n == 1000000) {
      checkpoints.emplace_back(n, table.memory_bytes());
    }
  }
  for (const auto& [n, bytes] : checkpoints) {
    SCOPED_TRACE(n);
    EXPECT_LE(static_cast<double>(bytes) / static_cast<double>(n), 32.0);
    EXPECT_GE(static_cast<double>(bytes) / static_cast<double>(n), 24.0 / 0.9 - 0.01);
  }
}

}  // namespace
}  // namespace sluice::store
