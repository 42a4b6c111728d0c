// engine::MatchHolds (holds.h): the concurrency limits (`algorithm: concurrency`) a request's
// descriptors match, one HoldRequest per limit keyed by the descriptor's state key; and leases
// (EncodeLease / DecodeLease): any holds, any key bytes, back as they were; no lease from text
// that is not one.

#include "engine/holds.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/matcher.h"

namespace sluice::engine {
namespace {

using backend::Hold;
using test::Desc;
using test::kSecondUs;
using test::Req;

// ---- leases ----

TEST(HoldsLeaseTest, RoundTripsSeveralHolds) {
  const std::vector<Hold> holds = {
      {.limit_id = 0x1234abcdULL, .key = "6:report2:r1", .id = 1, .max_hold_us = 2 * kSecondUs},
      {.limit_id = UINT64_MAX,
       .key = std::string("a:b~c.d\n\xff\0z", 12),
       .id = 0x7fffffffffffffffULL,
       .max_hold_us = 60 * kSecondUs},
      {.limit_id = 0, .key = "", .id = 42, .max_hold_us = 1},
  };
  const std::string lease = EncodeLease(holds);
  // Only hex digits, dots and the separators: safe in a header or JSON string.
  EXPECT_EQ(lease.find_first_not_of("0123456789abcdef.~"), std::string::npos) << lease;
  const auto back = DecodeLease(lease);
  ASSERT_TRUE(back.has_value()) << lease;
  ASSERT_EQ(back->size(), 3u);
  for (size_t i = 0; i < holds.size(); ++i) {
    EXPECT_EQ((*back)[i].limit_id, holds[i].limit_id) << i;
    EXPECT_EQ((*back)[i].key, holds[i].key) << i;
    EXPECT_EQ((*back)[i].id, holds[i].id) << i;
    EXPECT_EQ((*back)[i].max_hold_us, holds[i].max_hold_us) << i;
    EXPECT_EQ((*back)[i].expires_us, 0) << i;  // the lease does not carry it
  }
}

TEST(HoldsLeaseTest, EncodesEachHoldAsIdsMaxHoldAndHexKey) {
  const std::vector<Hold> one = {
      {.limit_id = 255, .key = "A\xff", .id = 16, .max_hold_us = 1500000}};
  EXPECT_EQ(EncodeLease(one), "ff.10.1500000.41ff");
  const std::vector<Hold> two = {{.limit_id = 1, .key = "k", .id = 2, .max_hold_us = 3},
                                 {.limit_id = 4, .key = "", .id = 5, .max_hold_us = 6}};
  EXPECT_EQ(EncodeLease(two), "1.2.3.6b~4.5.6.");
  const auto back = DecodeLease("1.2.3.6b~4.5.6.");
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0], two[0]);
  EXPECT_EQ((*back)[1], two[1]);
}

TEST(HoldsLeaseTest, RejectsTextThatIsNoLease) {
  const std::string cases[] = {
      "",                          // no hold
      "zz",                        // one field
      "1.2.3",                     // the key's field missing
      "1.2",                       // two fields
      "~1.2.3.6b",                 // an empty hold first
      "1.zz.3.6b",                 // a non-hex id
      "g.2.3.6b",                  // a non-hex limit id
      "1.2.0.6b",                  // max_hold 0
      "1.2.-5.6b",                 // max_hold below 0
      "1.2.x.6b",                  // max_hold not a number
      "1.2.3.6",                   // odd-length hex key
      "1.2.3.6g",                  // non-hex key
      "1..3.6b",                   // an empty id
      "1.2.3.6b~1.2.3",            // the second hold short
      "1.2.3.6b.7",                // a fifth field (the key '6b.7' is no hex)
      "10000000000000000.2.3.6b",  // a limit id over 64 bits
  };
  for (const std::string& text : cases) {
    EXPECT_FALSE(DecodeLease(text).has_value()) << "'" << text << "'";
  }
}

// ---- MatchHolds ----

constexpr std::string_view kHoldsRules = R"yaml(domain: work
failure_mode: closed
descriptors:
  - key: report
    rate_limit: {algorithm: concurrency, requests: 3, max_hold: 2s, name: reports}
  - key: job
    limits:
      - {requests: 10, unit: minute}
      - {algorithm: concurrency, requests: 1}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {algorithm: concurrency, requests: 2, max_hold: 30s}
  - key: plain
    rate_limit: {requests: 5, unit: second}
)yaml";

class HoldsMatchTest : public test::EngineTest {
 protected:
  void SetUp() override { Load(kHoldsRules); }
  HoldTargets Match(engine::Descriptors descriptors, const std::string& domain = "work") {
    return MatchHolds(*config_, Req(domain, std::move(descriptors)));
  }
  const rules::RuleNode* Node(engine::Entries entries) {
    const rules::Domain* domain = config_->FindDomain("work");
    if (domain == nullptr) return nullptr;
    return rules::MatchDescriptor(*domain, std::span(entries.data(), entries.size()));
  }
};

TEST_F(HoldsMatchTest, ARateLimitOfAlgorithmConcurrencyIsOneHoldRequest) {
  const HoldTargets t = Match({Desc({{"report", "r1"}})});
  ASSERT_EQ(t.requests.size(), 1u);
  ASSERT_EQ(t.names.size(), 1u);
  ASSERT_EQ(t.on_failure.size(), 1u);
  EXPECT_EQ(t.requests[0].n, 3u);
  EXPECT_EQ(t.requests[0].max_hold_us, 2 * kSecondUs);
  EXPECT_EQ(t.requests[0].key, "6:report2:r1");
  EXPECT_NE(t.requests[0].limit_id, 0u);
  EXPECT_EQ(t.names[0], "reports");
  EXPECT_EQ(t.on_failure[0], backend::FailureMode::kClosed);
  const rules::RuleNode* report = Node({{"report", "r1"}});
  ASSERT_NE(report, nullptr);
  EXPECT_TRUE(report->limits.empty());
  ASSERT_EQ(report->concurrency.size(), 1u);
  EXPECT_EQ(t.requests[0].limit_id, report->concurrency[0].state_id);
}

TEST_F(HoldsMatchTest, AConcurrencyEntryOfLimitsKeepsTheRateLimitApart) {
  const HoldTargets t = Match({Desc({{"job", "build"}})});
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].n, 1u);
  EXPECT_EQ(t.requests[0].max_hold_us, rules::kDefaultMaxHoldUs);
  EXPECT_EQ(t.requests[0].max_hold_us, 60 * kSecondUs);
  EXPECT_EQ(t.requests[0].key, "3:job5:build");
  ASSERT_EQ(t.names.size(), 1u);
  EXPECT_EQ(t.names[0], "1-concurrent");
  const rules::RuleNode* job = Node({{"job", "build"}});
  ASSERT_NE(job, nullptr);
  ASSERT_EQ(job->limits.size(), 1u);
  EXPECT_EQ(job->limits[0].limit.requests, 10u);
  EXPECT_EQ(job->limits[0].limit.window_us, 60 * kSecondUs);
  ASSERT_EQ(job->concurrency.size(), 1u);
  EXPECT_EQ(job->concurrency[0].requests, 1u);
  EXPECT_NE(job->concurrency[0].state_id, job->limits[0].state_id);
}

TEST_F(HoldsMatchTest, ANestedDescriptorHoldsUnderItsFullKey) {
  const HoldTargets t = Match({Desc({{"tenant", "t1"}, {"user", "u1"}})});
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].n, 2u);
  EXPECT_EQ(t.requests[0].max_hold_us, 30 * kSecondUs);
  EXPECT_EQ(t.requests[0].key, "6:tenant2:t14:user2:u1");
  EXPECT_EQ(t.names[0], "2-concurrent");
  // The tenant alone matches no concurrency limit.
  EXPECT_TRUE(Match({Desc({{"tenant", "t1"}})}).requests.empty());
}

TEST_F(HoldsMatchTest, EveryMatchedLimitOnceWithDistinctIds) {
  const HoldTargets t = Match({Desc({{"report", "r1"}}), Desc({{"plain", "p"}}),
                               Desc({{"job", "j"}}), Desc({{"tenant", "t"}, {"user", "u"}})});
  ASSERT_EQ(t.requests.size(), 3u);
  ASSERT_EQ(t.names.size(), 3u);
  EXPECT_EQ(t.names[0], "reports");
  EXPECT_EQ(t.names[1], "1-concurrent");
  EXPECT_EQ(t.names[2], "2-concurrent");
  EXPECT_EQ(t.requests[0].key, "6:report2:r1");
  EXPECT_EQ(t.requests[1].key, "3:job1:j");
  EXPECT_EQ(t.requests[2].key, "6:tenant1:t4:user1:u");
  const std::set<uint64_t> ids = {t.requests[0].limit_id, t.requests[1].limit_id,
                                  t.requests[2].limit_id};
  EXPECT_EQ(ids.size(), 3u);
}

TEST_F(HoldsMatchTest, TwoValuesAreTwoKeysOfOneLimit) {
  const HoldTargets t = Match({Desc({{"report", "r1"}}), Desc({{"report", "r2"}})});
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].limit_id, t.requests[1].limit_id);
  EXPECT_EQ(t.requests[0].key, "6:report2:r1");
  EXPECT_EQ(t.requests[1].key, "6:report2:r2");
  ASSERT_EQ(t.keys.size(), 2u);
  // The requests' keys are views of `keys`.
  EXPECT_EQ(t.requests[0].key.data(), t.keys[0].data());
  EXPECT_EQ(t.requests[1].key.data(), t.keys[1].data());
}

TEST_F(HoldsMatchTest, NoHoldsWithoutAConcurrencyLimit) {
  EXPECT_TRUE(Match({Desc({{"plain", "p"}})}).requests.empty());
  EXPECT_TRUE(Match({Desc({{"nothing", "x"}})}).requests.empty());
  EXPECT_TRUE(Match({}).requests.empty());
  const HoldTargets unknown = Match({Desc({{"report", "r1"}})}, "nowhere");
  EXPECT_TRUE(unknown.requests.empty());
  EXPECT_TRUE(unknown.keys.empty());
  EXPECT_TRUE(unknown.names.empty());
}

TEST_F(HoldsMatchTest, TheSameLimitInAnotherConfigKeepsItsId) {
  const uint64_t before = Match({Desc({{"report", "r1"}})}).requests.at(0).limit_id;
  Load(kHoldsRules);  // a reload: the holds taken before are still the same state's
  EXPECT_EQ(Match({Desc({{"report", "r1"}})}).requests.at(0).limit_id, before);
}

}  // namespace
}  // namespace sluice::engine
