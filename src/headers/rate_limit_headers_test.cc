// Rate-limit response headers (rate_limit_headers.h): exact field values for hand-built engine
// responses (one limit, several, denies, shadow, never, unlimited, none), rounding, clamping, name
// escaping, the styles, and one end-to-end run through the real engine.

#include "headers/rate_limit_headers.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/memory/memory_store.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "sluice/clock.h"
#include "sluice/limit.h"

namespace sluice::render {
namespace {

using engine::AppliedLimit;
using engine::DescriptorResult;
using engine::Response;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kSecondUs = 1000000;
constexpr int64_t kMinuteUs = 60 * kSecondUs;
constexpr int64_t kDayUs = 86400 * kSecondUs;

constexpr HeaderStyles kBoth{};
constexpr HeaderStyles kXOnly{.x_ratelimit = true, .ietf = false};
constexpr HeaderStyles kIetfOnly{.x_ratelimit = false, .ietf = true};
constexpr HeaderStyles kNone{.x_ratelimit = false, .ietf = false};

Decision Allow(int64_t remaining, int64_t reset_after_us) {
  return Decision{.allowed = true, .remaining = remaining, .reset_after_us = reset_after_us};
}

Decision Deny(int64_t retry_after_us, int64_t reset_after_us, int64_t remaining = 0) {
  return Decision{.allowed = false,
                  .remaining = remaining,
                  .retry_after_us = retry_after_us,
                  .reset_after_us = reset_after_us};
}

AppliedLimit Applied(std::string name, uint64_t requests, int64_t window_us, Decision decision,
                     bool shadow = false) {
  AppliedLimit a;
  a.limit = Limit{.algorithm = Algorithm::kFixedWindow,
                  .requests = requests,
                  .window_us = window_us,
                  .burst = std::nullopt};
  a.name = std::move(name);
  a.shadow = shadow;
  a.decision = decision;
  return a;
}

// A response as the engine shapes it; the headline (descriptor, limit) and `remaining` are given
// explicitly so the tests do not re-implement the engine's choice.
Response MakeResponse(bool allowed, std::vector<engine::AppliedLimits> descriptors,
                      int headline_descriptor, int headline_limit, int64_t remaining) {
  Response r;
  r.domain_found = true;
  r.allowed = allowed;
  for (auto& limits : descriptors) {
    DescriptorResult d;
    d.limits = std::move(limits);
    r.descriptors.push_back(std::move(d));
  }
  r.headline_descriptor = headline_descriptor;
  r.headline_limit = headline_limit;
  r.remaining = remaining;
  return r;
}

std::vector<Header> Render(const Response& response, const HeaderStyles& styles = kBoth) {
  std::vector<Header> headers;
  AppendRateLimitHeaders(response, styles, &headers);
  // The text form (what the HTTP server sends) says the same, in the same order, in every test.
  std::string expected_lines;
  for (const Header& h : headers) expected_lines += h.name + ": " + h.value + "\r\n";
  std::string lines = "Before: 1\r\n";  // appended to, not replaced
  AppendRateLimitFieldLines(response, styles, &lines);
  EXPECT_EQ(lines, "Before: 1\r\n" + expected_lines);
  return headers;
}

// The value of the only field `name`, "<absent>" or "<repeated>".
std::string Field(const std::vector<Header>& headers, std::string_view name) {
  std::string value = "<absent>";
  int seen = 0;
  for (const Header& h : headers) {
    if (h.name == name) {
      value = h.value;
      ++seen;
    }
  }
  return seen > 1 ? "<repeated>" : value;
}

// ---------------------------------------------------------------------------------------------
// The `headers:` setting.

TEST(ParseHeaderStylesTest, AcceptsEachStyleNoneAndEmpty) {
  const std::vector<std::string> both = {"x_ratelimit", "ietf"};
  const std::vector<std::string> x = {"x_ratelimit"};
  const std::vector<std::string> ietf = {"ietf", "ietf"};
  const std::vector<std::string> none = {"none"};
  const std::vector<std::string> empty;
  EXPECT_EQ(*ParseHeaderStyles(both), kBoth);
  EXPECT_EQ(*ParseHeaderStyles(x), kXOnly);
  EXPECT_EQ(*ParseHeaderStyles(ietf), kIetfOnly);
  EXPECT_EQ(*ParseHeaderStyles(none), kNone);
  EXPECT_EQ(*ParseHeaderStyles(empty), kNone);
}

TEST(ParseHeaderStylesTest, SettingsDefaultIsBothStyles) {
  const rules::Settings settings;
  EXPECT_EQ(*ParseHeaderStyles(settings.headers), kBoth);
  EXPECT_EQ(HeaderStyles{}, kBoth);
}

TEST(ParseHeaderStylesTest, RejectsUnknownNamesAndNoneWithAnotherStyle) {
  const std::vector<std::string> unknown = {"ietf", "draft7"};
  const auto bad = ParseHeaderStyles(unknown);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("'draft7'"));

  const std::vector<std::string> mixed = {"none", "x_ratelimit"};
  const auto conflict = ParseHeaderStyles(mixed);
  ASSERT_FALSE(conflict.ok());
  EXPECT_THAT(conflict.status().message(), ::testing::HasSubstr("none"));
}

// ---------------------------------------------------------------------------------------------
// One limit.

TEST(RateLimitHeadersTest, SingleLimitAllowedSendsBothFamiliesAndNoRetryAfter) {
  const Response r =
      MakeResponse(true, {{Applied("per-ip", 100, kSecondUs, Allow(99, 10000))}}, 0, 0, 99);
  EXPECT_THAT(Render(r),
              ElementsAre(Header{"X-RateLimit-Limit", "100"}, Header{"X-RateLimit-Remaining", "99"},
                          Header{"X-RateLimit-Reset", "1"},
                          Header{"RateLimit-Policy", "\"per-ip\";q=100;w=1"},
                          Header{"RateLimit", "\"per-ip\";r=99;t=1"}));
}

TEST(RateLimitHeadersTest, SingleLimitDeniedAddsRetryAfterFromTheWait) {
  // Token bucket style: the request fits again in 2.5 s, the bucket is full in 60 s.
  const Response r =
      MakeResponse(false, {{Applied("per-key", 60, kMinuteUs, Deny(2500000, kMinuteUs))}}, 0, 0, 0);
  EXPECT_THAT(Render(r),
              ElementsAre(Header{"X-RateLimit-Limit", "60"}, Header{"X-RateLimit-Remaining", "0"},
                          Header{"X-RateLimit-Reset", "3"},
                          Header{"RateLimit-Policy", "\"per-key\";q=60;w=60"},
                          Header{"RateLimit", "\"per-key\";r=0;t=3"}, Header{"Retry-After", "3"}));
}

// Issue 22 (3): a token bucket with a burst reports the burst as its limit (in both families),
// so Remaining never exceeds Limit; an unnamed one is "<requests>-per-<window>" as everywhere.
TEST(RateLimitHeadersTest, ABurstLargerThanTheRateIsTheReportedLimit) {
  AppliedLimit bucket = Applied("", 100, kSecondUs, Allow(199, 10000));
  bucket.limit.algorithm = Algorithm::kTokenBucket;
  bucket.limit.burst = 200;
  const Response r = MakeResponse(true, {{bucket}}, 0, 0, 199);
  EXPECT_THAT(Render(r),
              ElementsAre(Header{"X-RateLimit-Limit", "200"},
                          Header{"X-RateLimit-Remaining", "199"}, Header{"X-RateLimit-Reset", "1"},
                          Header{"RateLimit-Policy", "\"100-per-1s\";q=200;w=1"},
                          Header{"RateLimit", "\"100-per-1s\";r=199;t=1"}));
  // A burst below the rate leaves the rate as the limit.
  bucket.limit.burst = 10;
  bucket.decision = Allow(9, 10000);
  EXPECT_EQ(Field(Render(MakeResponse(true, {{bucket}}, 0, 0, 9)), "X-RateLimit-Limit"), "100");
}

TEST(RateLimitHeadersTest, CallbackSeesTheSameFieldsInTheSameOrder) {
  const Response r =
      MakeResponse(false, {{Applied("per-key", 60, kMinuteUs, Deny(2500000, kMinuteUs))}}, 0, 0, 0);
  std::vector<Header> seen;
  ForEachRateLimitHeader(r, kBoth, [&](std::string_view name, std::string_view value) {
    seen.push_back(Header{std::string(name), std::string(value)});
  });
  EXPECT_EQ(seen, Render(r));
}

TEST(RateLimitHeadersTest, FieldLinesAreTheWholeFieldsAsText) {
  const Response r =
      MakeResponse(false, {{Applied("per-key", 60, kMinuteUs, Deny(2500000, kMinuteUs))}}, 0, 0, 0);
  std::string lines;
  AppendRateLimitFieldLines(r, kBoth, &lines);
  EXPECT_EQ(lines,
            "X-RateLimit-Limit: 60\r\nX-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 3\r\n"
            "RateLimit-Policy: \"per-key\";q=60;w=60\r\nRateLimit: \"per-key\";r=0;t=3\r\n"
            "Retry-After: 3\r\n");
}

// ---------------------------------------------------------------------------------------------
// Several limits.

TEST(RateLimitHeadersTest, SeveralLimitsHeadlineAndLowestRemainingMostConstrainedFirst) {
  // Descriptor 0: 10/s (9 left) and 1000/d (3 left); descriptor 1: 50/min (20 left).
  const Response r =
      MakeResponse(true,
                   {{Applied("per-second", 10, kSecondUs, Allow(9, 100000)),
                     Applied("daily", 1000, kDayUs, Allow(3, int64_t{35000} * kSecondUs))},
                    {Applied("per-user", 50, kMinuteUs, Allow(20, 45 * kSecondUs))}},
                   0, 1, 3);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "X-RateLimit-Limit"), "1000");
  EXPECT_EQ(Field(h, "X-RateLimit-Remaining"), "3");
  EXPECT_EQ(Field(h, "X-RateLimit-Reset"), "35000");
  EXPECT_EQ(Field(h, "RateLimit-Policy"),
            "\"daily\";q=1000;w=86400, \"per-second\";q=10;w=1, \"per-user\";q=50;w=60");
  EXPECT_EQ(Field(h, "RateLimit"),
            "\"daily\";r=3;t=35000, \"per-second\";r=9;t=1, \"per-user\";r=20;t=45");
  EXPECT_EQ(Field(h, "Retry-After"), "<absent>");
}

TEST(RateLimitHeadersTest, RemainingIsTheResponsesLowestEvenWhenTheHeadlineHasMore) {
  // On a deny the headline is the longest wait; another limit may have less left.
  const Response r = MakeResponse(
      false,
      {{Applied("burst", 5, kSecondUs, Allow(0, 800000)),
        Applied("hourly", 100, 60 * kMinuteUs, Deny(600 * kSecondUs, 600 * kSecondUs, 2))}},
      0, 1, 0);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "X-RateLimit-Limit"), "100");
  EXPECT_EQ(Field(h, "X-RateLimit-Remaining"), "0");
  EXPECT_EQ(Field(h, "X-RateLimit-Reset"), "600");
  EXPECT_EQ(Field(h, "RateLimit"), "\"hourly\";r=2;t=600, \"burst\";r=0;t=1");
  EXPECT_EQ(Field(h, "Retry-After"), "600");
}

TEST(RateLimitHeadersTest, RetryAfterIsTheLongestWaitOfTheViolatedLimits) {
  const Response r =
      MakeResponse(false,
                   {{Applied("a", 10, kSecondUs, Deny(2 * kSecondUs, 2 * kSecondUs))},
                    {Applied("b", 10, kMinuteUs, Deny(30 * kSecondUs, 30 * kSecondUs))},
                    {Applied("c", 10, kDayUs, Allow(4, kDayUs))}},
                   1, 0, 0);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "Retry-After"), "30");
  EXPECT_EQ(Field(h, "X-RateLimit-Reset"), "30");
  EXPECT_EQ(Field(h, "RateLimit"), "\"b\";r=0;t=30, \"a\";r=0;t=2, \"c\";r=4;t=86400");
}

TEST(RateLimitHeadersTest, IetfListsStartWithTheEnginesHeadlineWhateverItChose) {
  // Should the engine's choice ever differ from this module's ordering, the first IETF item
  // still names the limit the X-RateLimit fields describe.
  const Response r = MakeResponse(true,
                                  {{Applied("low", 10, kSecondUs, Allow(1, kSecondUs)),
                                    Applied("chosen", 10, kMinuteUs, Allow(5, kMinuteUs))}},
                                  0, 1, 1);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "X-RateLimit-Reset"), "60");
  EXPECT_EQ(Field(h, "RateLimit"), "\"chosen\";r=5;t=60, \"low\";r=1;t=1");
}

TEST(RateLimitHeadersTest, SamePolicyThroughTwoDescriptorsIsListedOnceMostConstrained) {
  const Response r = MakeResponse(
      true,
      {{Applied("per-second", 10, kSecondUs, Allow(5, 500000))},
       {Applied("per-second", 10, kSecondUs, Allow(2, 500000))},
       {Applied("", 7, kSecondUs, Allow(6, 100000)), Applied("", 7, kSecondUs, Allow(6, 100000))}},
      1, 0, 2);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "RateLimit-Policy"), "\"per-second\";q=10;w=1, \"7-per-1s\";q=7;w=1");
  EXPECT_EQ(Field(h, "RateLimit"), "\"per-second\";r=2;t=1, \"7-per-1s\";r=6;t=1");
}

// ---------------------------------------------------------------------------------------------
// Rounding: seconds are always rounded up.

TEST(RateLimitHeadersTest, ResetAndRetryRoundUpToWholeSeconds) {
  struct Case {
    int64_t us;
    std::string seconds;
  };
  for (const Case& c : {Case{1, "1"}, Case{999999, "1"}, Case{1000000, "1"}, Case{1000001, "2"},
                        Case{59 * kSecondUs + 1, "60"}}) {
    SCOPED_TRACE(c.us);
    const Response deny =
        MakeResponse(false, {{Applied("x", 1, kDayUs, Deny(c.us, c.us))}}, 0, 0, 0);
    const auto h = Render(deny);
    EXPECT_EQ(Field(h, "Retry-After"), c.seconds);
    EXPECT_EQ(Field(h, "X-RateLimit-Reset"), c.seconds);
    EXPECT_EQ(Field(h, "RateLimit"), "\"x\";r=0;t=" + c.seconds);

    const Response allow = MakeResponse(true, {{Applied("x", 5, kDayUs, Allow(4, c.us))}}, 0, 0, 4);
    EXPECT_EQ(Field(Render(allow), "X-RateLimit-Reset"), c.seconds);
  }
}

TEST(RateLimitHeadersTest, NothingToResetIsZeroButRetryAfterIsAtLeastOne) {
  // A peek at an untouched key: nothing to reset.
  const Response allow = MakeResponse(true, {{Applied("x", 5, kSecondUs, Allow(5, 0))}}, 0, 0, 5);
  EXPECT_EQ(Field(Render(allow), "X-RateLimit-Reset"), "0");
  EXPECT_EQ(Field(Render(allow), "RateLimit"), "\"x\";r=5;t=0");
  // A deny whose wait is (already) zero still says "wait a second", never "Retry-After: 0".
  const Response deny = MakeResponse(false, {{Applied("x", 5, kSecondUs, Deny(0, 0))}}, 0, 0, 0);
  EXPECT_EQ(Field(Render(deny), "Retry-After"), "1");
}

// ---------------------------------------------------------------------------------------------
// Never admitted (Decision::kNever).

TEST(RateLimitHeadersTest, NeverAdmittedAsksToWaitADay) {
  // N == 0: a "blocked" plan.
  const Response r =
      MakeResponse(false, {{Applied("blocked", 0, kSecondUs, Deny(Decision::kNever, 0))}}, 0, 0, 0);
  EXPECT_THAT(
      Render(r),
      ElementsAre(Header{"X-RateLimit-Limit", "0"}, Header{"X-RateLimit-Remaining", "0"},
                  Header{"X-RateLimit-Reset", "86400"},
                  Header{"RateLimit-Policy", "\"blocked\";q=0;w=1"},
                  Header{"RateLimit", "\"blocked\";r=0;t=86400"}, Header{"Retry-After", "86400"}));
  EXPECT_EQ(kNeverRetryAfterSeconds, 86400);
}

TEST(RateLimitHeadersTest, NeverDoesNotShortenALongerViolatedWait) {
  // The engine makes the never-limit the headline; Retry-After still covers the weekly wait.
  const Response r =
      MakeResponse(false,
                   {{Applied("too-big", 10, kSecondUs, Deny(Decision::kNever, 0, 10)),
                     Applied("weekly", 100, 7 * kDayUs, Deny(2 * kDayUs, 2 * kDayUs))}},
                   0, 0, 0);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "X-RateLimit-Reset"), "86400");
  EXPECT_EQ(Field(h, "Retry-After"), "172800");
  EXPECT_EQ(Field(h, "RateLimit"), "\"too-big\";r=10;t=86400, \"weekly\";r=0;t=172800");
}

// ---------------------------------------------------------------------------------------------
// Shadow mode.

TEST(RateLimitHeadersTest, ShadowDenialReportsZeroRemainingButNoRetryAfter) {
  // The engine allows, reports the shadow limit with remaining 0 and makes it the headline.
  const Response r = MakeResponse(
      true,
      {{Applied("enforced", 100, kMinuteUs, Allow(7, 40 * kSecondUs)),
        Applied("trial", 10, kMinuteUs, Deny(5 * kSecondUs, 50 * kSecondUs), /*shadow=*/true)}},
      0, 1, 0);
  EXPECT_THAT(
      Render(r),
      ElementsAre(Header{"X-RateLimit-Limit", "10"}, Header{"X-RateLimit-Remaining", "0"},
                  Header{"X-RateLimit-Reset", "5"},
                  Header{"RateLimit-Policy", "\"trial\";q=10;w=60, \"enforced\";q=100;w=60"},
                  Header{"RateLimit", "\"trial\";r=0;t=5, \"enforced\";r=7;t=40"}));
}

TEST(RateLimitHeadersTest, ShadowDenialDoesNotLengthenAnEnforcedDenysRetryAfter) {
  const Response r =
      MakeResponse(false,
                   {{Applied("enforced", 1, kSecondUs, Deny(kSecondUs, kSecondUs)),
                     Applied("trial", 1, kMinuteUs, Deny(kMinuteUs, kMinuteUs), /*shadow=*/true)}},
                   0, 0, 0);
  EXPECT_EQ(Field(Render(r), "Retry-After"), "1");
}

// ---------------------------------------------------------------------------------------------
// Nothing applied.

TEST(RateLimitHeadersTest, NoAppliedLimitSendsNoHeaderAtAll) {
  Response unknown_domain;  // as the engine returns it
  unknown_domain.descriptors.resize(2);
  EXPECT_THAT(Render(unknown_domain), IsEmpty());

  Response no_rule = MakeResponse(true, {{}, {}}, -1, -1, -1);
  EXPECT_THAT(Render(no_rule), IsEmpty());

  Response unlimited = MakeResponse(true, {{}}, -1, -1, -1);
  unlimited.descriptors[0].unlimited = true;
  EXPECT_THAT(Render(unlimited), IsEmpty());
}

TEST(RateLimitHeadersTest, UnlimitedDescriptorContributesNothing) {
  Response r =
      MakeResponse(true, {{}, {Applied("per-ip", 10, kSecondUs, Allow(9, 100000))}}, 1, 0, 9);
  r.descriptors[0].unlimited = true;
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "RateLimit-Policy"), "\"per-ip\";q=10;w=1");
  EXPECT_EQ(Field(h, "RateLimit"), "\"per-ip\";r=9;t=1");
  EXPECT_EQ(Field(h, "X-RateLimit-Remaining"), "9");
}

// ---------------------------------------------------------------------------------------------
// Styles.

TEST(RateLimitHeadersTest, XRateLimitOnlyStyle) {
  const Response r =
      MakeResponse(false, {{Applied("x", 10, kSecondUs, Deny(300000, 300000))}}, 0, 0, 0);
  EXPECT_THAT(Render(r, kXOnly),
              ElementsAre(Header{"X-RateLimit-Limit", "10"}, Header{"X-RateLimit-Remaining", "0"},
                          Header{"X-RateLimit-Reset", "1"}, Header{"Retry-After", "1"}));
}

TEST(RateLimitHeadersTest, IetfOnlyStyle) {
  const Response r =
      MakeResponse(false, {{Applied("x", 10, kSecondUs, Deny(300000, 300000))}}, 0, 0, 0);
  EXPECT_THAT(Render(r, kIetfOnly),
              ElementsAre(Header{"RateLimit-Policy", "\"x\";q=10;w=1"},
                          Header{"RateLimit", "\"x\";r=0;t=1"}, Header{"Retry-After", "1"}));
}

TEST(RateLimitHeadersTest, NoneStyleKeepsOnlyRetryAfterOnADeny) {
  const Response deny =
      MakeResponse(false, {{Applied("x", 10, kSecondUs, Deny(300000, 300000))}}, 0, 0, 0);
  EXPECT_THAT(Render(deny, kNone), ElementsAre(Header{"Retry-After", "1"}));
  const Response allow = MakeResponse(true, {{Applied("x", 10, kSecondUs, Allow(3, 1))}}, 0, 0, 3);
  EXPECT_THAT(Render(allow, kNone), IsEmpty());
}

// ---------------------------------------------------------------------------------------------
// Structured-field details.

TEST(RateLimitHeadersTest, NamesAreEscapedAndLimitedToPrintableAscii) {
  const Response r = MakeResponse(true,
                                  {{Applied("a\"b\\c", 1, kSecondUs, Allow(0, 1)),
                                    Applied("evil\r\nSet-Cookie: x=1", 2, kSecondUs, Allow(1, 1)),
                                    Applied("caf\xc3\xa9\t", 3, kSecondUs, Allow(2, 1))}},
                                  0, 0, 0);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "RateLimit-Policy"),
            "\"a\\\"b\\\\c\";q=1;w=1, \"evil??Set-Cookie: x=1\";q=2;w=1, \"caf???\";q=3;w=1");
  for (const Header& header : h) {
    for (const char c : header.value) {
      EXPECT_TRUE(c >= 0x20 && c <= 0x7E) << header.name << " has byte " << int{c};
    }
  }
}

// The lists are written into room sized beforehand: names long enough (and needing escapes)
// to outgrow the usual room come out whole.
TEST(RateLimitHeadersTest, LongNamesNeedingEscapesComeOutWhole) {
  const std::string quoted(300, '"');
  const std::string plain(400, 'n');
  const Response r = MakeResponse(
      true,
      {{Applied(quoted, 1, kSecondUs, Allow(0, 1)), Applied(plain, 2, kSecondUs, Allow(1, 1))}}, 0,
      0, 0);
  std::string escaped;
  for (size_t i = 0; i < quoted.size(); ++i) escaped += "\\\"";
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "RateLimit-Policy"), "\"" + escaped + "\";q=1;w=1, \"" + plain + "\";q=2;w=1");
  EXPECT_EQ(Field(h, "RateLimit"), "\"" + escaped + "\";r=0;t=1, \"" + plain + "\";r=1;t=1");
}

TEST(RateLimitHeadersTest, NamesThatSanitiseAlikeAreOnePolicy) {
  const Response r = MakeResponse(true,
                                  {{Applied("caf\xc3\xa9", 1, kSecondUs, Allow(0, 1))},
                                   {Applied("caf\xe2\x82", 1, kSecondUs, Allow(1, 1))}},
                                  0, 0, 0);
  EXPECT_EQ(Field(Render(r), "RateLimit"), "\"caf??\";r=0;t=1");
}

TEST(RateLimitHeadersTest, IntegersAreClampedToFifteenDigitsAndZero) {
  AppliedLimit big = Applied("big", UINT64_MAX, kMaxWindowUs, Allow(int64_t{1} << 60, INT64_MAX));
  const Response r = MakeResponse(true, {{big}}, 0, 0, int64_t{1} << 60);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "X-RateLimit-Limit"), "999999999999999");
  EXPECT_EQ(Field(h, "X-RateLimit-Remaining"), "999999999999999");
  EXPECT_EQ(Field(h, "X-RateLimit-Reset"), "9223372036855");  // INT64_MAX µs, rounded up
  EXPECT_EQ(Field(h, "RateLimit-Policy"), "\"big\";q=999999999999999;w=316224000");
  EXPECT_EQ(Field(h, "RateLimit"), "\"big\";r=999999999999999;t=9223372036855");

  // Values the engine never reports are still never negative on the wire.
  const Response negative =
      MakeResponse(true, {{Applied("n", 5, kSecondUs, Allow(-3, -7))}}, 0, 0, -3);
  const auto hn = Render(negative);
  EXPECT_EQ(Field(hn, "X-RateLimit-Remaining"), "0");
  EXPECT_EQ(Field(hn, "RateLimit"), "\"n\";r=0;t=0");
}

TEST(RateLimitHeadersTest, WindowsThatAreNotWholeSecondsRoundUpAndNameTheExactWindow) {
  const Response r =
      MakeResponse(true,
                   {{Applied("", 10, 250000, Allow(1, 1)), Applied("", 3, 1500000, Allow(2, 1)),
                     Applied("", 1, 1, Allow(3, 1)), Applied("", 5, 90 * kMinuteUs, Allow(4, 1))}},
                   0, 0, 1);
  const auto h = Render(r);
  EXPECT_EQ(Field(h, "RateLimit-Policy"),
            "\"10-per-250ms\";q=10;w=1, \"3-per-1500ms\";q=3;w=2, \"1-per-1us\";q=1;w=1, "
            "\"5-per-90m\";q=5;w=5400");
  EXPECT_EQ(Field(h, "RateLimit"),
            "\"10-per-250ms\";r=1;t=1, \"3-per-1500ms\";r=2;t=1, \"1-per-1us\";r=3;t=1, "
            "\"5-per-90m\";r=4;t=1");
}

// ---------------------------------------------------------------------------------------------
// Through the real engine: request overrides need no rules file.

TEST(RateLimitHeadersTest, EngineResponsesRenderAsDocumented) {
  rules::Config config;
  auto domain = std::make_unique<rules::Domain>();
  domain->name = "edge";
  config.by_name[domain->name] = domain.get();
  config.domains.push_back(std::move(domain));

  constexpr int64_t kT0 = int64_t{1700000000} * kSecondUs;
  ManualClock clock(kT0);
  store::MemoryStore store(store::MemoryStore::Options{.max_entries = 1 << 10, .shards = 1},
                           &clock);
  engine::Engine engine(&store);

  engine::Request request;
  request.domain = "edge";
  engine::Descriptor descriptor;
  descriptor.entries = {{"remote_address", "10.0.0.1"}};
  descriptor.limit =
      engine::LimitOverride{.requests_per_unit = 2, .window_us = kSecondUs, .unit = "SECOND"};
  request.descriptors.push_back(descriptor);

  const int64_t now = kT0 + 300000;  // 0.7 s before the fixed window ends
  EXPECT_THAT(Render(engine.Check(config, request, now)),
              ElementsAre(Header{"X-RateLimit-Limit", "2"}, Header{"X-RateLimit-Remaining", "1"},
                          Header{"X-RateLimit-Reset", "1"},
                          Header{"RateLimit-Policy", "\"2-per-1s\";q=2;w=1"},
                          Header{"RateLimit", "\"2-per-1s\";r=1;t=1"}));
  engine.Check(config, request, now);
  const Response denied = engine.Check(config, request, now);
  ASSERT_FALSE(denied.allowed);
  EXPECT_THAT(Render(denied),
              ElementsAre(Header{"X-RateLimit-Limit", "2"}, Header{"X-RateLimit-Remaining", "0"},
                          Header{"X-RateLimit-Reset", "1"},
                          Header{"RateLimit-Policy", "\"2-per-1s\";q=2;w=1"},
                          Header{"RateLimit", "\"2-per-1s\";r=0;t=1"}, Header{"Retry-After", "1"}));

  request.domain = "nowhere";
  EXPECT_THAT(Render(engine.Check(config, request, now)), IsEmpty());
}

}  // namespace
}  // namespace sluice::render
