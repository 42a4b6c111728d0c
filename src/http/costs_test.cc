// Costs read from HTTP messages (costs.h) and put on the descriptors of a route (http_routes.h):
// a reserve from a JSON field of the body, a header or a fixed number, its default when missing;
// the descriptors without a cost left alone; the usage of an answer's JSON body and of an event
// stream's last event that has it, fed in pieces cut anywhere.

#include "http/costs.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http/http_routes.h"
#include "rules/loader.h"

namespace sluice::http {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr std::string_view kCostsConfig = R"yaml(domain: llm
http:
  routes:
    - match: {prefix: /chat}
      rate_limits:
        - actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: tokens}}]
          cost: {reserve: {json: limits.max_tokens, default: 64}, settle: {json: usage.total_tokens}}
        - actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: calls}}]
        - actions: [{generic_key: {descriptor_value: bytes}}]
          cost: {reserve: {header: X-Size}}
    - match: {prefix: /fixed}
      rate_limits:
        - actions: [{generic_key: {descriptor_value: fixed}}]
          cost: {reserve: {fixed: 7}}
descriptors: []
)yaml";

class RouteCostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rules::LoadResult loaded = rules::LoadConfigText("llm.yaml", kCostsConfig);
    ASSERT_THAT(loaded.errors, IsEmpty())
        << (loaded.errors.empty() ? "" : loaded.errors[0].ToString());
    config_ = loaded.config;
  }
  RouteChecks Build(std::string_view path) {
    auto checks = BuildRouteChecks(
        *config_, {.method = "POST", .path = path, .peer = "192.0.2.1", .headers = &request_});
    EXPECT_TRUE(checks.ok()) << checks.status();
    return checks.ok() ? *std::move(checks) : RouteChecks{};
  }
  std::vector<std::optional<uint64_t>> Costs(const RouteChecks& checks) {
    std::vector<std::optional<uint64_t>> out;
    for (const auto& d : checks.requests.at(0).descriptors) out.push_back(d.hits_addend);
    return out;
  }
  std::shared_ptr<const rules::Config> config_;
  HttpRequest request_;
};

TEST_F(RouteCostsTest, ReserveFromTheBodyAHeaderOrTheRules) {
  request_.set("X-Api-Key", "acme");
  request_.set("X-Size", " 4096 ");
  request_.body() = R"({"model":"m","limits":{"max_tokens":300}})";
  RouteChecks checks = Build("/chat");
  EXPECT_THAT(Costs(checks), ElementsAre(300u, std::nullopt, 4096u));
  ASSERT_EQ(checks.costed.size(), 2u);
  EXPECT_EQ(checks.costed[0].descriptor, 0u);
  EXPECT_EQ(checks.costed[1].descriptor, 2u);
  EXPECT_TRUE(checks.costed[0].cost->settle.has_value());
  EXPECT_FALSE(checks.costed[1].cost->settle.has_value());
  EXPECT_THAT(Costs(Build("/fixed")), ElementsAre(7u));
  EXPECT_TRUE(ReadsRequestBody(*config_, "POST", "/chat/completions"));
  EXPECT_FALSE(ReadsRequestBody(*config_, "POST", "/fixed"));
}

TEST_F(RouteCostsTest, DefaultsWhenTheSourceSaysNothingUsable) {
  request_.set("X-Api-Key", "acme");
  for (const char* body : {"", "not json", R"({"limits":{"max_tokens":-3}})",
                           R"({"limits":{"max_tokens":2.5}})", R"({"limits":{}})"}) {
    request_.body() = body;
    request_.set("X-Size", "lots");
    EXPECT_THAT(Costs(Build("/chat")), ElementsAre(64u, std::nullopt, 1u)) << body;
  }
  request_.body() = R"({"limits":{"max_tokens":0}})";  // 0 would only look: at least 1
  EXPECT_EQ(Costs(Build("/chat"))[0], 1u);
}

TEST_F(RouteCostsTest, AMissingHeaderSkipsItsDescriptorAndItsCost) {
  request_.body() = R"({"limits":{"max_tokens":300}})";
  RouteChecks checks = Build("/chat");  // no X-Api-Key: only the bytes descriptor is left
  EXPECT_THAT(Costs(checks), ElementsAre(1u));
  ASSERT_EQ(checks.costed.size(), 1u);
  EXPECT_EQ(checks.costed[0].descriptor, 0u);
  EXPECT_FALSE(checks.costed[0].cost->settle.has_value());
}

TEST(UsageMeterTest, AJsonBodyParsedOnceItHasEnded) {
  const std::string body = R"({"choices":[],"usage":{"prompt_tokens":5,"total_tokens":812}})";
  for (size_t cut = 0; cut <= body.size(); cut += 7) {
    UsageMeter meter({"/usage/total_tokens", "/usage/prompt_tokens", "/usage/none"}, false);
    meter.Feed(body.substr(0, cut));
    meter.Feed(body.substr(cut));
    EXPECT_THAT(meter.End(), ElementsAre(812u, 5u, std::nullopt)) << cut;
  }
}

TEST(UsageMeterTest, AnEventStreamsLastEventWithTheField) {
  const std::string stream =
      "data: {\"choices\":[{\"delta\":{\"content\":\"total_tokens\"}}]}\r\n\r\n"
      ": a comment\n"
      "data: {\"usage\":{\"total_tokens\":40}}\n\n"
      "event: x\ndata: {\"usage\":{\"total_tokens\":51}}\n\n"
      "data: [DONE]\n\n";
  for (size_t step = 1; step <= stream.size(); step += 5) {
    UsageMeter meter({"/usage/total_tokens"}, true);
    for (size_t at = 0; at < stream.size(); at += step) meter.Feed(stream.substr(at, step));
    EXPECT_THAT(meter.End(), ElementsAre(51u)) << step;
  }
  UsageMeter none({"/usage/total_tokens"}, true);
  none.Feed("data: {\"choices\":[]}\n\ndata: [DONE]");
  EXPECT_THAT(none.End(), ElementsAre(std::nullopt));
}

TEST(UsageMeterTest, TooMuchToHoldGivesUp) {
  UsageMeter body({"/n"}, false);
  body.Feed("{\"n\":1,\"pad\":\"");
  body.Feed(std::string(UsageMeter::kMaxBytes, 'x'));
  body.Feed("\"}");
  EXPECT_THAT(body.End(), ElementsAre(std::nullopt));
  UsageMeter stream({"/n"}, true);
  stream.Feed("data: {\"pad\":\"" + std::string(UsageMeter::kMaxBytes, 'x') + "\"}\n");
  stream.Feed("data: {\"n\":9}\n");  // the next line is read again
  EXPECT_THAT(stream.End(), ElementsAre(9u));
}

TEST(ReadCostTest, HeadersAreWholeNumbers) {
  rules::CostSource header;
  header.kind = rules::CostSource::Kind::kHeader;
  header.name = "X-T";
  EXPECT_EQ(ReadCost(header, "17", ""), 17u);
  EXPECT_EQ(ReadCost(header, "\t17 ", ""), 17u);
  EXPECT_EQ(ReadCost(header, "17k", ""), std::nullopt);
  EXPECT_EQ(ReadCost(header, "-1", ""), std::nullopt);
  EXPECT_EQ(ReadCost(header, "", ""), std::nullopt);
  EXPECT_EQ(ReadCost(header, std::nullopt, ""), std::nullopt);
}

}  // namespace
}  // namespace sluice::http
