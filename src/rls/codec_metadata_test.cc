// The RLS v3 codec's dynamic metadata (codec.h; issue 19 (10)), as upstream's
// RESPONSE_DYNAMIC_METADATA builds it, in /json's answers on a real engine.

#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rls/codec.h"
#include "rls/codec_testing.h"
#include "rules/loader.h"

namespace sluice::rls {
namespace {

using test::RlsTest;
using ::testing::IsEmpty;

// Issue 19 (10): dynamic metadata, as upstream's RESPONSE_DYNAMIC_METADATA builds it; the
// cases of its TestRatelimitToMetadata (src/service/ratelimit_test.go), decided for real.
class DynamicMetadataTest : public RlsTest {
 protected:
  void SetUp() override {
    rules::LoadResult loaded = rules::LoadConfigText("md.yaml", R"yaml(domain: md
descriptors:
  - key: key1
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {name: never}
  - key: regular_key
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {name: service_1}
  - key: quota_key
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: service_2, nested: {a: 1}}
  - key: another_quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: "service_3", nested: {a: 2, b: "2"}, flag: true, list: [1, x]}
  - key: test_key
    rate_limit: {unit: minute, requests_per_unit: 10}
)yaml");
    ASSERT_THAT(loaded.errors, IsEmpty())
        << (loaded.errors.empty() ? "" : loaded.errors[0].ToString());
    config_ = loaded.config;
  }
  // The dynamicMetadata of /json's answer to `body` (the last field written).
  std::string Metadata(std::string_view body) {
    RlsOptions options;
    options.dynamic_metadata = true;
    const std::string answer = Json(body, options).body;
    const size_t at = answer.find(R"("dynamicMetadata":)");
    if (at == std::string::npos) return "none in " + answer;
    return answer.substr(at + 18, answer.size() - at - 19);
  }
};

TEST_F(DynamicMetadataTest, ADescriptorOverItsLimitGivesNoMetadata) {
  EXPECT_EQ(
      Metadata(R"({"domain":"md","descriptors":[{"entries":[{"key":"key1","value":"val1"}]}]})"),
      R"({"descriptors":[{"entries":["key1=val1"]}],"domain":"md"})");
}

TEST_F(DynamicMetadataTest, APassedQuotaGivesItsMetadata) {
  EXPECT_EQ(
      Metadata(R"({"domain":"md","descriptors":[{"entries":[{"key":"quota_key","value":"q"}]}]})"),
      R"({"descriptors":[{"entries":["quota_key=q"]}],"domain":"md","metadata":)"
      R"({"name":"service_2","nested":{"a":1}}})");
}

TEST_F(DynamicMetadataTest, PassedDescriptorsMergeInOrderTheFirstValueWinning) {
  EXPECT_EQ(Metadata(R"({"domain":"md","descriptors":[)"
                     R"({"entries":[{"key":"regular_key","value":"regular_val"}]},)"
                     R"({"entries":[{"key":"quota_key","value":"quota_val"}]},)"
                     R"({"entries":[{"key":"another_quota","value":"another_val"}]}]})"),
            R"({"descriptors":[{"entries":["regular_key=regular_val"]},)"
            R"({"entries":["quota_key=quota_val"]},{"entries":["another_quota=another_val"]}],)"
            R"("domain":"md","metadata":{"flag":true,"list":[1,"x"],"name":"service_2",)"
            R"("nested":{"a":1,"b":"2"}}})");
}

TEST_F(DynamicMetadataTest, HitsAddendsAndOverridesAreCarried) {
  EXPECT_EQ(
      Metadata(R"({"domain":"md","hitsAddend":5,"descriptors":[)"
               R"({"entries":[{"key":"test_key","value":"test_val"}]},)"
               R"({"entries":[{"key":"x","value":"y"}],"hitsAddend":"0",)"
               R"("limit":{"requestsPerUnit":7,"unit":"HOUR"}}]})"),
      R"({"descriptors":[{"entries":["test_key=test_val"]},{"entries":["x=y"],)"
      R"("hitsAddend":0,"limit":"requests_per_unit:7 unit:HOUR"}],"domain":"md","hitsAddend":5})");
}

TEST_F(DynamicMetadataTest, OffByDefault) {
  const JsonResult r =
      Json(R"({"domain":"md","descriptors":[{"entries":[{"key":"quota_key","value":"q"}]}]})");
  EXPECT_EQ(r.body.find("dynamicMetadata"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace sluice::rls
