// MemoryReservations (memory_reservations.h): a reservation is taken once, not after it expires,
// and the store keeps at most its maximum, dropping expired ones to make room.

#include "backend/memory/memory_reservations.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::store {
namespace {

absl::Status Put(MemoryReservations& r, const std::string& id, int64_t now_us, int64_t ttl_us) {
  absl::Status out = absl::InternalError("not answered");
  r.Put(id, "text of " + id, now_us, ttl_us, [&](absl::Status s) { out = s; });
  return out;
}

absl::StatusOr<std::string> Take(MemoryReservations& r, const std::string& id, int64_t now_us) {
  absl::StatusOr<std::string> out = absl::InternalError("not answered");
  r.Take(id, now_us, [&](absl::StatusOr<std::string> s) { out = std::move(s); });
  return out;
}

TEST(MemoryReservationsTest, TakenOnceThenGone) {
  MemoryReservations r;
  ASSERT_TRUE(Put(r, "a", 1000, 500).ok());
  auto first = Take(r, "a", 1200);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, "text of a");
  EXPECT_EQ(Take(r, "a", 1200).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Take(r, "never", 1200).status().code(), absl::StatusCode::kNotFound);
}

TEST(MemoryReservationsTest, AnExpiredOneIsNotTaken) {
  MemoryReservations r;
  ASSERT_TRUE(Put(r, "a", 1000, 500).ok());
  EXPECT_EQ(Take(r, "a", 1500).status().code(), absl::StatusCode::kNotFound);  // ends at 1500
  EXPECT_EQ(r.size(), 0u);
}

TEST(MemoryReservationsTest, FullUntilExpiredOnesMakeRoom) {
  MemoryReservations r(3);
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(Put(r, id, 0, 100).ok());
  EXPECT_EQ(Put(r, "d", 50, 100).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Take(r, "a", 50).ok()) << "a refusal loses none of those kept";
  EXPECT_TRUE(Put(r, "d", 50, 100).ok());
  EXPECT_TRUE(Put(r, "e", 100, 100).ok()) << "b and c expired at 100: dropped for room";
  EXPECT_EQ(r.size(), 2u);
}

TEST(MemoryReservationsTest, ManyPutsKeepOnlyTheLiveOnes) {
  MemoryReservations r;
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(Put(r, std::to_string(i), i, 10).ok());
  EXPECT_LT(r.size(), 1000u) << "expired ones are dropped as new ones come";
}

}  // namespace
}  // namespace sluice::store
