// The RLS v3 codec's /json endpoint (codec.h, HandleJson; docs/rls.md §6.1): its exact bytes and
// statuses on a real engine, and the cases of envoyproxy/ratelimit's own TestJsonHandler.

#include <string>
#include <string_view>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rls/codec.h"
#include "rls/codec_testing.h"

namespace sluice::rls {
namespace {

using test::RejectUnknown;
using test::RlsTest;

constexpr std::string_view kBadRequest = "Bad Request\n";

void ExpectBadRequest(const JsonResult& r) {
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.content_type, "text/plain; charset=utf-8");
  EXPECT_EQ(r.body, kBadRequest);
  EXPECT_TRUE(r.nosniff);
}

TEST_F(RlsTest, JsonAllowed) {
  const JsonResult r = Json(
      R"({"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_FALSE(r.nosniff);
  EXPECT_EQ(r.body,
            R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,)"
            R"("unit":"SECOND"},"limitRemaining":9,"durationUntilReset":"1s"}]})");
}

// The request and response of the reference's example, byte for byte.
TEST_F(RlsTest, JsonReferenceExampleOverLimit) {
  // Prime: one hit on the address, 4 of the 5 on /login.
  ASSERT_EQ(
      Json(
          R"({"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]})")
          .status,
      200);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(
        Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"}],)"
             R"("limit":{"requests_per_unit":5,"unit":"MINUTE"},"hitsAddend":"2"}]})")
            .status,
        200);
  }
  const JsonResult r = Json(R"({"domain":"edge","hits_addend":1,
 "descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]},
                {"entries":[{"key":"path","value":"/login"}],
                 "limit":{"requests_per_unit":5,"unit":"MINUTE"},"hitsAddend":"2"}]})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(
      r.body,
      R"({"overallCode":"OVER_LIMIT","statuses":[)"
      R"({"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"SECOND"},"limitRemaining":9,"durationUntilReset":"1s"},)"
      R"({"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":5,"unit":"MINUTE"},"durationUntilReset":"40s"}]})");
}

// Issue 19 (7): a descriptor with no entries is answered OK with no limit, as upstream answers
// it ({"code":"OK"}); with a limit in the request, that limit applies to it, as upstream's does
// (on the domain alone).
TEST_F(RlsTest, JsonDescriptorWithNoEntriesIsOkWithoutALimit) {
  const JsonResult r = Json(R"({"domain":"edge","descriptors":[{"entries":[]},)"
                            R"({"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(
      r.body,
      R"({"overallCode":"OK","statuses":[{"code":"OK"},{"code":"OK","currentLimit":)"
      R"({"requestsPerUnit":10,"unit":"SECOND"},"limitRemaining":9,"durationUntilReset":"1s"}]})");
  const std::string with_limit =
      R"({"domain":"edge","descriptors":[{"entries":[],"limit":{"requests_per_unit":1,"unit":"HOUR"}}]})";
  EXPECT_EQ(Json(with_limit).status, 200);
  EXPECT_EQ(Json(with_limit).status, 429);
  EXPECT_EQ(Json(R"({"domain":"edge","descriptors":[]})").status, 400);
}

TEST_F(RlsTest, JsonWithTooManyDescriptorsIsBadRequest) {
  std::string body = R"({"domain":"edge","descriptors":[)";
  for (int i = 0; i < 10000; ++i) {
    body += i == 0 ? "" : ",";
    body += R"({"entries":[{"key":"remote_address","value":"10.0.0.1"}]})";
  }
  body += "]}";
  ExpectBadRequest(Json(body));
}

// Issue 19 (6): protojson writes fields in declaration order, and rls.proto declares the
// limit's `name` before `requests_per_unit` (proto_json_test checks every message).
TEST_F(RlsTest, JsonPrintsTheLimitNameFirst) {
  const JsonResult r =
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"login","value":"a"}]}]})");
  EXPECT_EQ(
      r.body,
      R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"login",)"
      R"("requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"40s"}]})");
}

TEST_F(RlsTest, JsonUnknownDomainIsOkWithBareStatuses) {
  const JsonResult r = Json(
      R"({"domain":"nowhere","descriptors":[{"entries":[{"key":"a","value":"1"}]},{"entries":[{"key":"b"}]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"overallCode":"OK","statuses":[{"code":"OK"},{"code":"OK"}]})");
}

TEST_F(RlsTest, JsonUnknownDomainRejectedIsBadRequestWhenConfigured) {
  ExpectBadRequest(
      Json(R"({"domain":"nowhere","descriptors":[{"entries":[{"key":"a"}]}]})", RejectUnknown()));
}

TEST_F(RlsTest, JsonUnlimited) {
  const JsonResult r =
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"monitor","value":"m"}]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body,
            R"({"overallCode":"OK","statuses":[{"code":"OK","limitRemaining":4294967295}]})");
}

TEST_F(RlsTest, JsonUnknownFieldIsBadRequest) {
  ExpectBadRequest(
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}],"extra":1})"));
  ExpectBadRequest(
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a","val":"1"}]}]})"));
}

TEST_F(RlsTest, JsonMalformedIsBadRequest) {
  ExpectBadRequest(Json("}"));
  ExpectBadRequest(Json("{"));
  ExpectBadRequest(Json(R"({"domain":"edge",})"));
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}]} trailing)"));
  ExpectBadRequest(Json(R"({"domain":5,"descriptors":[{"entries":[{"key":"a"}]}]})"));
  ExpectBadRequest(Json(R"(["domain"])"));
  ExpectBadRequest(Json("not json"));
}

TEST_F(RlsTest, JsonEmptyBodyIsBadRequest) {
  ExpectBadRequest(Json(""));
  ExpectBadRequest(Json(" \n"));
}

TEST_F(RlsTest, JsonServiceErrorsAreBadRequest) {
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[]})"));  // empty descriptors
  ExpectBadRequest(Json(R"({"domain":"edge"})"));
  ExpectBadRequest(Json("{}"));  // empty domain
  ExpectBadRequest(
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"","value":"v"}]}]})"));
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[{"entries":[{"value":"v"}]}]})"));
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a"}],)"
                        R"("limit":{"requests_per_unit":5}}]})"));  // UNKNOWN unit
  ExpectBadRequest(Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"a"}],)"
                        R"("limit":{"requests_per_unit":5,"unit":"WEEK"}}]})"));  // no WEEK here
}

TEST_F(RlsTest, JsonAcceptsBothNameSpellingsAndEnumNumbers) {
  const JsonResult r = Json(
      R"({"domain":"edge","hitsAddend":2,"descriptors":[{"entries":[{"key":"remote_address","value":"x"}],)"
      R"("limit":{"requestsPerUnit":7,"unit":2},"hits_addend":3}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body,
            R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":7,)"
            R"("unit":"MINUTE"},"limitRemaining":4,"durationUntilReset":"40s"}]})");
}

TEST_F(RlsTest, JsonDescriptorHitsAddendZeroPeeks) {
  const std::string_view peek =
      R"({"domain":"edge","descriptors":[{"entries":[{"key":"login","value":"p"}],"hitsAddend":"0"}]})";
  for (int i = 0; i < 3; ++i) {
    const JsonResult r = Json(peek);
    EXPECT_EQ(r.status, 200);
    EXPECT_THAT(r.body, ::testing::HasSubstr(R"("limitRemaining":2,)"));
  }
}

TEST_F(RlsTest, JsonHugeHitsAddendIsDeniedNotACrash) {
  const JsonResult r =
      Json(R"({"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"h"}],)"
           R"("hitsAddend":"18446744073709551615"}]})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.body,
            R"({"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":)"
            R"({"requestsPerUnit":10,"unit":"SECOND"},"durationUntilReset":"1s"}]})");
}

TEST_F(RlsTest, JsonCarriesResponseHeadersOnlyWhenEnabled) {
  RlsOptions options;
  options.response_headers = [](const engine::Response&, std::vector<HeaderField>* out) {
    out->push_back({"RateLimit-Policy", "\"login\";q=2;w=60"});
  };
  const JsonResult r = Json(
      R"({"domain":"edge","descriptors":[{"entries":[{"key":"login","value":"h"}]}]})", options);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(
      r.body,
      R"({"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"login",)"
      R"("requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"40s"}],)"
      R"("responseHeadersToAdd":[{"key":"RateLimit-Policy","value":"\"login\";q=2;w=60"}]})");
}

// The cases of envoyproxy/ratelimit's own TestJsonHandler (test/server/server_impl_test.go),
// with a stand-in for the RPC.
TEST(HandleJsonTest, UpstreamHandlerCases) {
  int calls = 0;
  absl::StatusOr<RateLimitResponse> answer = RateLimitResponse();
  const auto rpc = [&](const RateLimitRequest& request) -> absl::StatusOr<RateLimitResponse> {
    ++calls;
    EXPECT_EQ(request.domain(), "foo");
    return answer;
  };
  ExpectBadRequest(HandleJson("", rpc));   // missing body
  ExpectBadRequest(HandleJson("}", rpc));  // not JSON
  EXPECT_EQ(calls, 0);

  JsonResult r = HandleJson(R"({"domain": "foo"})", rpc);  // unknown overall code
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, "{}");

  answer = absl::UnknownError("some error");
  ExpectBadRequest(HandleJson(R"({"domain": "foo"})", rpc));

  RateLimitResponse ok;
  ok.set_overall_code(RateLimitResponse::OK);
  answer = ok;
  r = HandleJson(R"({"domain": "foo"})", rpc);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, R"({"overallCode":"OK"})");

  RateLimitResponse over;
  over.set_overall_code(RateLimitResponse::OVER_LIMIT);
  answer = over;
  r = HandleJson(R"({"domain": "foo"})", rpc);
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, R"({"overallCode":"OVER_LIMIT"})");
  EXPECT_EQ(calls, 4);
}

}  // namespace
}  // namespace sluice::rls
