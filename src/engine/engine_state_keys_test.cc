// The identity of the limiters' state, in memory and in Redis, which must not change from one
// version to the next: each descriptor's state key (length-prefixed entries) and each rule limit's
// id (XXH3 of the node path, the plan and LimitId).

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::engine {
namespace {

using test::Desc;
using test::EngineTest;
using test::kExampleC;
using test::kSecondUs;
using test::Req;
using ::testing::SizeIs;

// Limiter state (in memory and in Redis) is keyed by the state key too, so its bytes must not
// change: each entry's key and value (a shared wildcard's pattern in place of the value), each
// prefixed with its length and ':'. Several descriptors, an override and keys longer than the
// batch's inline room all keep their own.
TEST_F(EngineTest, StateKeysAreLengthPrefixedEntries) {
  Load(kExampleC);
  std::string long_path(300, 'x');
  long_path.insert(0, "/downloads/");
  Descriptor override = Desc({{"api_key", "k1"}, {"path", "/o"}});
  override.limit = LimitOverride{.requests_per_unit = 5, .window_us = kSecondUs, .unit = "second"};
  Refundable consumed;
  const std::vector<Response> responses = engine_.CheckAll(
      *config_,
      std::vector<Request>{Req("files", {Desc({{"bucket", "reports-2025"}}),
                                         Desc({{"path", "/downloads/x.zip"}}), override}),
                           Req("files", {Desc({{"path", long_path}}), Desc({{"api_key", "k1"}})})},
      clock_.NowMicros(), &consumed);
  ASSERT_THAT(responses, SizeIs(2));
  ASSERT_TRUE(responses[0].allowed);
  std::vector<std::string> keys;
  for (const Refundable::Item& item : consumed.items) keys.push_back(item.key);
  EXPECT_THAT(keys, ::testing::ElementsAre("6:bucket9:reports-*", "4:path16:/downloads/x.zip",
                                           "7:api_key2:k14:path2:/o", "4:path311:" + long_path,
                                           "7:api_key2:k1"));
}

// Limiter state (in memory and in Redis) is keyed by this id, so its value must not change: the
// XXH3 hash of the node path, a zero byte, the plan and LimitId, both for an input hashed in one
// call and for one too long for that (streamed).
TEST(RuleLimitIdTest, IsTheHashOfPathZeroPlanAndDefinition) {
  const Limit limit{
      .algorithm = Algorithm::kTokenBucket, .requests = 10, .window_us = 1000000, .burst = 20};
  const uint64_t definition = LimitId(limit);
  for (const std::string& path : {std::string("api/key"), std::string(300, 'p')}) {
    std::string bytes = path;
    bytes += '\0';
    bytes += "pro";
    bytes.append(reinterpret_cast<const char*>(&definition), sizeof definition);
    EXPECT_EQ(RuleLimitId(path, "pro", limit), XXH3_64bits(bytes.data(), bytes.size()))
        << path.size() << " bytes of path";
  }
  EXPECT_NE(RuleLimitId("api/key", "pro", limit), RuleLimitId("api/key", "", limit));
}

}  // namespace
}  // namespace sluice::engine
