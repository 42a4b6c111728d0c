// The /v1/check JSON codec (check_json.h): parsing with every error message, the exact bytes of
// rendered responses and errors, JSON string escaping, Unicode and key-size limits, malformed and
// mutated inputs, and one round trip through the engine on a loaded configuration.

#include "http/check_json.h"

#include <simdjson.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "backend/memory/memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "sluice/clock.h"
#include "sluice/limit.h"

namespace sluice::http {
namespace {

using engine::AppliedLimit;
using engine::DescriptorResult;
using engine::Request;
using engine::Response;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;
using namespace std::string_view_literals;

constexpr size_t kMaxKeyBytes = 4096;
constexpr int64_t kSecondUs = 1000000;
constexpr int64_t kMinuteUs = 60 * kSecondUs;
constexpr int64_t kHourUs = 3600 * kSecondUs;
constexpr int64_t kDayUs = 24 * kHourUs;
// 2023-11-14 22:13:20 UTC: 20 s into a minute, 800 s into an hour.
constexpr int64_t kT0 = int64_t{1700000000} * kSecondUs;

constexpr std::string_view kValidBody =
    R"({"domain":"api","descriptors":[{"entries":[{"key":"user","value":"alice"},)"
    R"({"key":"path","value":"/login"}]},{"entries":[{"key":"ip","value":"10.0.0.1"}],)"
    R"("limit":{"requests_per_unit":10,"unit":"minute"},"hits_addend":2}],"cost":3})";

// The message of a failed parse, or "ok".
std::string ErrorOf(std::string_view body, size_t max_key_bytes = kMaxKeyBytes) {
  const absl::StatusOr<Request> parsed = ParseCheckRequest(body, max_key_bytes);
  if (parsed.ok()) return "ok";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

Request MustParse(std::string_view body, size_t max_key_bytes = kMaxKeyBytes) {
  absl::StatusOr<Request> parsed = ParseCheckRequest(body, max_key_bytes);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *std::move(parsed) : Request{};
}

// A body with one descriptor of one entry (key, value), both inserted raw into the JSON text.
std::string OneEntryBody(std::string_view key, std::string_view value) {
  std::string body = R"({"domain":"d","descriptors":[{"entries":[{"key":")";
  body += key;
  body += R"(","value":")";
  body += value;
  body += R"("}]}]})";
  return body;
}

// A body with one descriptor whose JSON object is `descriptor`.
std::string WithDescriptor(std::string_view descriptor) {
  std::string body = R"({"domain":"d","descriptors":[)";
  body += descriptor;
  body += "]}";
  return body;
}

std::string Repeat(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parsing: accepted shapes.

TEST(ParseCheckRequestTest, FullBodyMapsEveryField) {
  const Request r = MustParse(kValidBody);
  EXPECT_EQ(r.domain, "api");
  ASSERT_THAT(r.descriptors, SizeIs(2));
  EXPECT_THAT(r.descriptors[0].entries,
              ElementsAre(rules::Entry{"user", "alice"}, rules::Entry{"path", "/login"}));
  EXPECT_FALSE(r.descriptors[0].limit.has_value());
  EXPECT_FALSE(r.descriptors[0].hits_addend.has_value());
  EXPECT_THAT(r.descriptors[1].entries, ElementsAre(rules::Entry{"ip", "10.0.0.1"}));
  ASSERT_TRUE(r.descriptors[1].limit.has_value());
  EXPECT_EQ(r.descriptors[1].limit->requests_per_unit, 10u);
  EXPECT_EQ(r.descriptors[1].limit->window_us, kMinuteUs);
  EXPECT_EQ(r.descriptors[1].limit->unit, "minute");
  EXPECT_EQ(r.descriptors[1].hits_addend, 2u);
  EXPECT_EQ(r.hits_addend, 3u);
}

// /v1/reserve's body: /v1/check's with "for", a duration; /v1/check itself does not know it.
TEST(ParseReserveRequestTest, ForIsADurationThatOnlyAReservationKnows) {
  constexpr std::string_view kBody =
      R"({"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}],"cost":40,"for":"90s"})";
  std::optional<int64_t> for_us;
  auto parsed = ParseReserveRequest(kBody, 256, &for_us);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->hits_addend, 40u);
  EXPECT_EQ(for_us, 90'000'000);
  EXPECT_EQ(ParseCheckRequest(kBody, 256).status().message(),
            "for: unknown field (known: domain, descriptors, cost)");
  std::optional<int64_t> none;
  ASSERT_TRUE(
      ParseReserveRequest(R"({"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]})",
                          256, &none)
          .ok());
  EXPECT_FALSE(none.has_value()) << "absent: the caller's default";
  auto bad = ParseReserveRequest(
      R"({"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}],"for":"soon"})", 256,
      &none);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "for: ")) << bad.status();
}

TEST(ParseCheckRequestTest, CostDefaultsToOne) {
  const Request r = MustParse(OneEntryBody("k", "v"));
  EXPECT_EQ(r.hits_addend, 1u);
  EXPECT_FALSE(r.descriptors[0].hits_addend.has_value());
}

TEST(ParseCheckRequestTest, CostZeroPeeksEveryDescriptorWithoutItsOwnHitsAddend) {
  const Request r =
      MustParse(R"({"domain":"d","cost":0,"descriptors":[{"entries":[{"key":"a","value":"1"}]},)"
                R"({"entries":[{"key":"b","value":"2"}],"hits_addend":4}]})");
  EXPECT_EQ(r.descriptors[0].hits_addend, 0u);
  EXPECT_EQ(r.descriptors[1].hits_addend, 4u);
}

TEST(ParseCheckRequestTest, DescriptorHitsAddendZeroIsKept) {
  const Request r =
      MustParse(WithDescriptor(R"({"entries":[{"key":"a","value":"1"}],"hits_addend":0})"));
  EXPECT_EQ(r.descriptors[0].hits_addend, 0u);
  EXPECT_EQ(r.hits_addend, 1u);
}

TEST(ParseCheckRequestTest, NullOptionalFieldsAreAbsent) {
  const Request r =
      MustParse(R"({"domain":"d","cost":null,"descriptors":[{"entries":[{"key":"a","value":"1"}],)"
                R"("limit":null,"hits_addend":null}]})");
  EXPECT_EQ(r.hits_addend, 1u);
  EXPECT_FALSE(r.descriptors[0].limit.has_value());
  EXPECT_FALSE(r.descriptors[0].hits_addend.has_value());
}

TEST(ParseCheckRequestTest, EmptyValueIsAccepted) {
  EXPECT_THAT(MustParse(OneEntryBody("k", "")).descriptors[0].entries,
              ElementsAre(rules::Entry{"k", ""}));
}

TEST(ParseCheckRequestTest, FieldOrderAndWhitespaceDoNotMatter) {
  const Request r = MustParse(
      " \n{ \"cost\" : 2 ,\t\"descriptors\" : [ { \"entries\" : [ { \"value\" : \"v\" , "
      "\"key\" : \"k\" } ] } ] , \"domain\" : \"d\" }\r\n");
  EXPECT_EQ(r.domain, "d");
  EXPECT_EQ(r.hits_addend, 2u);
  EXPECT_THAT(r.descriptors[0].entries, ElementsAre(rules::Entry{"k", "v"}));
}

TEST(ParseCheckRequestTest, EveryUnitCaseInsensitiveAndKeptAsReceived) {
  const std::vector<std::pair<std::string, int64_t>> units = {
      {"second", kSecondUs}, {"minute", kMinuteUs},  {"HOUR", kHourUs},     {"Day", kDayUs},
      {"week", 7 * kDayUs},  {"month", 30 * kDayUs}, {"YEAR", 365 * kDayUs}};
  for (const auto& [unit, window_us] : units) {
    const Request r =
        MustParse(WithDescriptor(R"({"entries":[{"key":"k","value":"v"}],"limit":{"unit":")" +
                                 unit + R"(","requests_per_unit":7}})"));
    ASSERT_TRUE(r.descriptors[0].limit.has_value()) << unit;
    EXPECT_EQ(r.descriptors[0].limit->window_us, window_us) << unit;
    EXPECT_EQ(r.descriptors[0].limit->unit, unit);
    EXPECT_EQ(r.descriptors[0].limit->requests_per_unit, 7u);
  }
}

TEST(ParseCheckRequestTest, CountsFromZeroToUint32MaxAreAccepted) {
  const Request zero = MustParse(WithDescriptor(
      R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":0,"unit":"second"}})"));
  EXPECT_EQ(zero.descriptors[0].limit->requests_per_unit, 0u);
  const Request max = MustParse(
      R"({"domain":"d","cost":4294967295,"descriptors":[{"entries":[{"key":"k","value":"v"}],)"
      R"("hits_addend":4294967295,"limit":{"requests_per_unit":4294967295,"unit":"second"}}]})");
  EXPECT_EQ(max.hits_addend, 4294967295u);
  EXPECT_EQ(max.descriptors[0].hits_addend, 4294967295u);
  EXPECT_EQ(max.descriptors[0].limit->requests_per_unit, 4294967295u);
  // -0 is an integer zero.
  EXPECT_EQ(
      MustParse(R"({"domain":"d","cost":-0,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]})")
          .descriptors[0]
          .hits_addend,
      0u);
}

// ---------------------------------------------------------------------------------------------
// Parsing: Unicode and key sizes.

TEST(ParseCheckRequestTest, UnicodeKeysAndValuesPassThroughByteForByte) {
  const Request r = MustParse(OneEntryBody("ключ", "値😀 €"));
  EXPECT_THAT(r.descriptors[0].entries, ElementsAre(rules::Entry{"ключ", "値😀 €"}));
  EXPECT_EQ(MustParse(R"({"domain":"домен","descriptors":[{"entries":[{"key":"k","value":"v"}]}]})")
                .domain,
            "домен");
}

TEST(ParseCheckRequestTest, EscapesAreDecoded) {
  const Request r = MustParse(OneEntryBody(R"(a\"b\\c\/d\n)", R"(\u00e9\ud83d\ude00\u0001)"));
  EXPECT_THAT(r.descriptors[0].entries,
              ElementsAre(rules::Entry{"a\"b\\c/d\n", std::string("é😀\x01", 7)}));
}

TEST(ParseCheckRequestTest, KeysAndValuesOfExactlyTheMaximumAreAccepted) {
  const std::string key(kMaxKeyBytes, 'k');
  const std::string value = Repeat("é", kMaxKeyBytes / 2);  // 2 bytes each: 4096 bytes
  const Request r = MustParse(OneEntryBody(key, value));
  EXPECT_EQ(r.descriptors[0].entries[0].key.size(), kMaxKeyBytes);
  EXPECT_EQ(r.descriptors[0].entries[0].value, value);
  const std::string domain(kMaxKeyBytes, 'd');
  EXPECT_EQ(MustParse(R"({"domain":")" + domain +
                      R"(","descriptors":[{"entries":[{"key":"k","value":"v"}]}]})")
                .domain,
            domain);
}

TEST(ParseCheckRequestTest, TheMaximumCountsDecodedBytesNotJsonText) {
  // 4096 escaped newlines are 8192 bytes of JSON but 4096 bytes of key.
  EXPECT_EQ(ErrorOf(OneEntryBody(Repeat("\\n", kMaxKeyBytes), "v")), "ok");
  EXPECT_EQ(ErrorOf(OneEntryBody(Repeat("\\u00e9", kMaxKeyBytes / 2), "v")), "ok");
}

TEST(ParseCheckRequestTest, OneByteOverTheMaximumIsRejected) {
  EXPECT_EQ(ErrorOf(OneEntryBody(std::string(kMaxKeyBytes + 1, 'k'), "v")),
            "descriptors[0].entries[0].key: 4097 bytes, longer than the maximum of 4096 "
            "(http.max_key_bytes)");
  // Counted in bytes, not characters: 2048 'é' and one more ASCII byte.
  EXPECT_EQ(ErrorOf(OneEntryBody("k", Repeat("é", kMaxKeyBytes / 2) + "x")),
            "descriptors[0].entries[0].value: 4097 bytes, longer than the maximum of 4096 "
            "(http.max_key_bytes)");
  EXPECT_EQ(ErrorOf(R"({"domain":")" + std::string(kMaxKeyBytes + 1, 'd') +
                    R"(","descriptors":[{"entries":[{"key":"k","value":"v"}]}]})"),
            "domain: 4097 bytes, longer than the maximum of 4096 (http.max_key_bytes)");
}

TEST(ParseCheckRequestTest, LargeBodiesParseToo) {
  // 40 descriptors of 4 KiB values: about 165 KiB, past the thread-local parser's size.
  std::string body = R"({"domain":"d","descriptors":[)";
  for (int i = 0; i < 40; ++i) {
    if (i > 0) body += ',';
    body += R"({"entries":[{"key":"k","value":")" +
            std::string(kMaxKeyBytes, static_cast<char>('a' + i % 26)) + R"("}]})";
  }
  body += "]}";
  ASSERT_GT(body.size(), size_t{128} << 10);
  const Request r = MustParse(body);
  ASSERT_THAT(r.descriptors, SizeIs(40));
  EXPECT_EQ(r.descriptors[39].entries[0].value, std::string(kMaxKeyBytes, 'n'));
  // And a small body after it still parses on the thread's own parser.
  EXPECT_EQ(MustParse(kValidBody).domain, "api");
}

// A request is decided at once on one thread: its descriptors and their entries are bounded
// (a body of 15000 descriptors held the thread for 73 ms), with a message saying which bound.
TEST(ParseCheckRequestTest, DescriptorsAndEntriesAreBounded) {
  const std::string kEntry = R"({"key":"k","value":"v"})";
  const auto descriptors = [&](size_t n) {
    return R"({"domain":"d","descriptors":[)" + Repeat(R"({"entries":[)" + kEntry + "]},", n - 1) +
           R"({"entries":[)" + kEntry + "]}]}";
  };
  const auto entries = [&](size_t n) {
    return WithDescriptor(R"({"entries":[)" + Repeat(kEntry + ",", n - 1) + kEntry + "]}");
  };
  EXPECT_THAT(MustParse(descriptors(64)).descriptors, SizeIs(64));
  EXPECT_EQ(ErrorOf(descriptors(65)), "descriptors: 65 descriptors, more than the maximum of 64");
  EXPECT_EQ(ErrorOf(descriptors(15000)),
            "descriptors: 15000 descriptors, more than the maximum of 64");
  EXPECT_THAT(MustParse(entries(32)).descriptors[0].entries, SizeIs(32));
  EXPECT_EQ(ErrorOf(entries(33)),
            "descriptors[0].entries: 33 entries, more than the maximum of 32");
}

TEST(ParseCheckRequestTest, TheMaximumIsTheConfiguredOne) {
  EXPECT_EQ(ErrorOf(OneEntryBody("abcd", "v"), 4), "ok");
  EXPECT_EQ(ErrorOf(OneEntryBody("abcde", "v"), 4),
            "descriptors[0].entries[0].key: 5 bytes, longer than the maximum of 4 "
            "(http.max_key_bytes)");
}

// ---------------------------------------------------------------------------------------------
// Parsing: every error message.

struct ErrorCase {
  std::string body;
  std::string message;
};

TEST(ParseCheckRequestTest, EveryErrorNamesWhereAndWhat) {
  const std::string kEntry = R"({"entries":[{"key":"k","value":"v"}]})";
  const std::vector<ErrorCase> cases = {
      // The document.
      {"", "body: empty (expected a JSON object)"},
      {" \r\n\t", "body: empty (expected a JSON object)"},
      {"[]", "body: expected an object, got an array"},
      {"null", "body: expected an object, got null"},
      {R"("text")", "body: expected an object, got a string"},
      {"42", "body: expected an object, got a number"},
      // Fields of the request.
      {R"({"descriptors":[)" + kEntry + "]}", "domain: missing"},
      {R"({"domain":1,"descriptors":[)" + kEntry + "]}", "domain: expected a string, got a number"},
      {R"({"domain":null,"descriptors":[)" + kEntry + "]}", "domain: expected a string, got null"},
      {R"({"domain":"","descriptors":[)" + kEntry + "]}", "domain: empty"},
      {R"({"domain":"d"})", "descriptors: missing"},
      {R"({"domain":"d","descriptors":{}})", "descriptors: expected an array, got an object"},
      {R"({"domain":"d","descriptors":[]})", "descriptors: empty (at least one is needed)"},
      {R"({"domain":"d","domain":"e","descriptors":[)" + kEntry + "]}", "domain: given twice"},
      {R"({"domain":"d","hits_addend":1,"descriptors":[)" + kEntry + "]}",
       "hits_addend: unknown field (known: domain, descriptors, cost)"},
      {R"({"domain":"d","Domain":"e","descriptors":[)" + kEntry + "]}",
       "Domain: unknown field (known: domain, descriptors, cost)"},
      // Descriptors.
      {WithDescriptor("1"), "descriptors[0]: expected an object, got a number"},
      {WithDescriptor(kEntry + ",[]"), "descriptors[1]: expected an object, got an array"},
      {WithDescriptor("{}"), "descriptors[0].entries: missing"},
      {WithDescriptor(R"({"entries":"k=v"})"),
       "descriptors[0].entries: expected an array, got a string"},
      {WithDescriptor(R"({"entries":[]})"),
       "descriptors[0].entries: empty (a descriptor needs an entry)"},
      {WithDescriptor(R"({"entries":[{"key":"k","value":"v"}],"entry":1})"),
       "descriptors[0].entry: unknown field (known: entries, limit, hits_addend)"},
      {WithDescriptor(R"({"entries":[{"key":"k","value":"v"}],"entries":[]})"),
       "descriptors[0].entries: given twice"},
      // Entries.
      {WithDescriptor(R"({"entries":[null]})"),
       "descriptors[0].entries[0]: expected an object, got null"},
      {WithDescriptor(kEntry + R"(,{"entries":[{"key":"a","value":"b"},{"value":"c"}]})"),
       "descriptors[1].entries[1].key: missing"},
      {WithDescriptor(R"({"entries":[{"key":"","value":"v"}]})"),
       "descriptors[0].entries[0].key: empty"},
      {WithDescriptor(R"({"entries":[{"key":5,"value":"v"}]})"),
       "descriptors[0].entries[0].key: expected a string, got a number"},
      {WithDescriptor(R"({"entries":[{"key":"k"}]})"), "descriptors[0].entries[0].value: missing"},
      {WithDescriptor(R"({"entries":[{"key":"k","value":true}]})"),
       "descriptors[0].entries[0].value: expected a string, got a boolean"},
      {WithDescriptor(R"({"entries":[{"key":"k","value":"v","extra":{}}]})"),
       "descriptors[0].entries[0].extra: unknown field (known: key, value)"},
      {WithDescriptor(R"({"entries":[{"key":"k","key":"j","value":"v"}]})"),
       "descriptors[0].entries[0].key: given twice"},
      // Limit overrides.
      {WithDescriptor(R"({"entries":[{"key":"k","value":"v"}],"limit":"10/s"})"),
       "descriptors[0].limit: expected an object, got a string"},
      {WithDescriptor(R"({"entries":[{"key":"k","value":"v"}],"limit":{}})"),
       "descriptors[0].limit.requests_per_unit: missing"},
      {WithDescriptor(R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1}})"),
       "descriptors[0].limit.unit: missing"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":60}})"),
       "descriptors[0].limit.unit: expected a string, got a number"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":"minutes"}})"),
       "descriptors[0].limit.unit: unknown unit 'minutes' (known: second, minute, hour, day, week, "
       "month (30 days), year (365 days)); did you mean 'minute'?"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":"fortnight"}})"),
       "descriptors[0].limit.unit: unknown unit 'fortnight' (known: second, minute, hour, day, "
       "week, month (30 days), year (365 days))"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":""}})"),
       "descriptors[0].limit.unit: unknown unit '' (known: second, minute, hour, day, week, month "
       "(30 days), year (365 days))"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":-1,"unit":"second"}})"),
       "descriptors[0].limit.requests_per_unit: must not be negative, got -1"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":4294967296,"unit":"second"}})"),
       "descriptors[0].limit.requests_per_unit: 4294967296 is above the maximum of 4294967295"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1.5,"unit":"second"}})"),
       "descriptors[0].limit.requests_per_unit: expected an integer, got a number with a fraction "
       "or an exponent"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":"10","unit":"second"}})"),
       "descriptors[0].limit.requests_per_unit: expected an integer, got a string"},
      {WithDescriptor(
           R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests":10,"unit":"second"}})"),
       "descriptors[0].limit.requests: unknown field (known: requests_per_unit, unit)"},
      // hits_addend and cost.
      {WithDescriptor(R"({"entries":[{"key":"k","value":"v"}],"hits_addend":-2})"),
       "descriptors[0].hits_addend: must not be negative, got -2"},
      {WithDescriptor(R"({"entries":[{"key":"k","value":"v"}],"hits_addend":[1]})"),
       "descriptors[0].hits_addend: expected an integer, got an array"},
      {R"({"domain":"d","cost":1e3,"descriptors":[)" + kEntry + "]}",
       "cost: expected an integer, got a number with a fraction or an exponent"},
      {R"({"domain":"d","cost":1.0,"descriptors":[)" + kEntry + "]}",
       "cost: expected an integer, got a number with a fraction or an exponent"},
      {R"({"domain":"d","cost":18446744073709551615,"descriptors":[)" + kEntry + "]}",
       "cost: 18446744073709551615 is above the maximum of 4294967295"},
      {R"({"domain":"d","cost":9223372036854775807,"descriptors":[)" + kEntry + "]}",
       "cost: 9223372036854775807 is above the maximum of 4294967295"},
      {R"({"domain":"d","cost":"1","descriptors":[)" + kEntry + "]}",
       "cost: expected an integer, got a string"},
      {R"({"domain":"d","cost":true,"descriptors":[)" + kEntry + "]}",
       "cost: expected an integer, got a boolean"},
  };
  for (const ErrorCase& c : cases) {
    EXPECT_EQ(ErrorOf(c.body), c.message) << c.body;
  }
}

TEST(ParseCheckRequestTest, TheFirstProblemInDocumentOrderIsReported) {
  EXPECT_EQ(ErrorOf(WithDescriptor(R"({"entries":[{"key":""}]},{"entries":[]})")),
            "descriptors[0].entries[0].key: empty");
}

TEST(ParseCheckRequestTest, LongClientTextIsCutInMessages) {
  const std::string field(100, 'x');
  EXPECT_EQ(ErrorOf(R"({")" + field + R"(":1})"),
            std::string(64, 'x') + "...: unknown field (known: domain, descriptors, cost)");
  // Cut on a character boundary: 63 ASCII bytes, then a 2-byte character across byte 64.
  const std::string unit = std::string(63, 'u') + "é" + std::string(40, 'u');
  EXPECT_EQ(ErrorOf(WithDescriptor(
                R"({"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":")" +
                unit + R"("}})")),
            "descriptors[0].limit.unit: unknown unit '" + std::string(63, 'u') +
                "...' (known: second, minute, hour, day, week, month (30 days), year (365 days))");
}

// ---------------------------------------------------------------------------------------------
// Parsing: malformed input never crashes and is a 400 with a message.

TEST(ParseCheckRequestTest, InvalidJsonIsReportedWithSimdjsonsReason) {
  const std::vector<std::string> bodies = {
      "{",
      R"({"domain":"d",})",
      R"({"domain":"d" "descriptors":[]})",
      R"({'domain':'d'})",
      R"({"domain":"d"} {"domain":"e"})",
      R"({"domain":"d"} x)",
      std::string(R"({"domain":"d)") + '\0' + R"("})",
      R"({"domain":"\x41"})",
      R"({"domain":"d","cost":99999999999999999999999})",
      R"({"domain":"d","cost":1e400})",
      R"({"domain":"d","cost":-9223372036854775809})",
      R"({"domain":"d","cost":01})",
      R"({"domain":"d","cost":NaN})",
      "\xEF\xBB\xBF{}",  // a byte order mark
  };
  for (const std::string& body : bodies) {
    EXPECT_THAT(ErrorOf(body), StartsWith("body: not valid JSON: ")) << body;
  }
  EXPECT_EQ(ErrorOf(R"({"domain":"d","cost":99999999999999999999999})"),
            "body: not valid JSON: Problem while parsing a number");
}

TEST(ParseCheckRequestTest, InvalidUtf8IsRejected) {
  for (const std::string bad :
       {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80"}) {
    EXPECT_EQ(ErrorOf(OneEntryBody("k", bad)), "body: not valid JSON: The input is not valid UTF-8")
        << bad;
  }
}

TEST(ParseCheckRequestTest, LoneSurrogateEscapesAreRejected) {
  EXPECT_THAT(ErrorOf(OneEntryBody("k", R"(\ud800)")), StartsWith("body: not valid JSON: "));
  EXPECT_THAT(ErrorOf(OneEntryBody("k", R"(\udc00x)")), StartsWith("body: not valid JSON: "));
}

TEST(ParseCheckRequestTest, EveryTruncationOfAValidBodyIsAnError) {
  for (size_t n = 0; n < kValidBody.size(); ++n) {
    EXPECT_NE(ErrorOf(kValidBody.substr(0, n)), "ok") << n;
  }
  EXPECT_EQ(ErrorOf(kValidBody), "ok");
}

TEST(ParseCheckRequestTest, DeepNestingIsAnErrorNotACrash) {
  const std::string deep_array = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(ErrorOf(deep_array), StartsWith("body: not valid JSON: "));
  const std::string open_only(100000, '{');
  EXPECT_THAT(ErrorOf(open_only), StartsWith("body: not valid JSON: "));
  // Deep but within simdjson's depth: a wrong type at the first level.
  EXPECT_EQ(ErrorOf(R"({"domain":"d","descriptors":)" + std::string(500, '[') +
                    std::string(500, ']') + "}"),
            "descriptors[0]: expected an object, got an array");
}

// Deterministic random mutations of a valid body: every result is a Request that keeps the
// codec's guarantees, or an InvalidArgument with a message; never a crash (run under ASan too).
TEST(ParseCheckRequestTest, RandomMutationsNeverCrash) {
  std::mt19937 rng(20240601);
  const std::string_view specials = "{}[]\":,\\ 0-1e.nulltrue\x00\x1f\x7f\x80\xc3\xa9\xff"sv;
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string body(kValidBody);
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations && !body.empty(); ++m) {
      const size_t at = rng() % body.size();
      switch (rng() % 6) {
        case 0:  // flip a bit
          body[at] = static_cast<char>(body[at] ^ (1 << (rng() % 8)));
          break;
        case 1:  // replace with a JSON-significant or odd byte
          body[at] = specials[rng() % specials.size()];
          break;
        case 2:  // insert one
          body.insert(at, 1, specials[rng() % specials.size()]);
          break;
        case 3:  // delete a run
          body.erase(at, 1 + rng() % 8);
          break;
        case 4:  // duplicate a run
          body.insert(at, body.substr(rng() % body.size(), 1 + rng() % 32));
          break;
        default:  // truncate
          body.resize(at);
      }
    }
    const absl::StatusOr<Request> parsed = ParseCheckRequest(body, 8);
    if (!parsed.ok()) {
      ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << body;
      ASSERT_FALSE(parsed.status().message().empty()) << body;
      // The error body is valid JSON whatever the message holds.
      simdjson::dom::parser parser;
      simdjson::dom::element root;
      ASSERT_EQ(parser.parse(RenderError(std::string(parsed.status().message()))).get(root),
                simdjson::SUCCESS);
      continue;
    }
    ++accepted;
    const Request& r = *parsed;
    ASSERT_FALSE(r.domain.empty());
    ASSERT_LE(r.domain.size(), 8u);
    ASSERT_FALSE(r.descriptors.empty());
    for (const engine::Descriptor& d : r.descriptors) {
      ASSERT_FALSE(d.entries.empty());
      for (const rules::Entry& e : d.entries) {
        ASSERT_FALSE(e.key.empty());
        ASSERT_LE(e.key.size(), 8u);
        ASSERT_LE(e.value.size(), 8u);
      }
      if (d.limit.has_value()) {
        ASSERT_GT(d.limit->window_us, 0);
        ASSERT_LE(d.limit->requests_per_unit, kMaxRequests);
      }
      ASSERT_LE(d.hits_addend.value_or(0), kMaxRequests);
    }
    ASSERT_GE(r.hits_addend, 1u);
    ASSERT_LE(r.hits_addend, kMaxRequests);
  }
  // The mutations are not all fatal: some bodies still parse.
  EXPECT_GT(accepted, 0);
}

// ---------------------------------------------------------------------------------------------
// Rendering.

AppliedLimit Applied(uint64_t requests, std::string name, Decision decision, bool shadow = false,
                     int64_t window_us = kMinuteUs) {
  AppliedLimit applied;
  applied.limit = Limit{.algorithm = Algorithm::kFixedWindow,
                        .requests = requests,
                        .window_us = window_us,
                        .burst = std::nullopt};
  applied.name = std::move(name);
  applied.shadow = shadow;
  applied.decision = decision;
  return applied;
}

Decision Allow(int64_t remaining, int64_t reset_after_us) {
  return Decision{.allowed = true,
                  .remaining = remaining,
                  .retry_after_us = 0,
                  .reset_after_us = reset_after_us,
                  .delay_us = 0};
}

Decision Deny(int64_t retry_after_us, int64_t reset_after_us) {
  return Decision{.allowed = false,
                  .remaining = 0,
                  .retry_after_us = retry_after_us,
                  .reset_after_us = reset_after_us,
                  .delay_us = 0};
}

DescriptorResult Result(engine::AppliedLimits limits, int headline) {
  DescriptorResult result;
  result.limits = std::move(limits);
  result.headline = headline;
  for (const AppliedLimit& l : result.limits) {
    if (!l.decision.allowed && !l.shadow) result.code = DescriptorResult::Code::kOverLimit;
  }
  return result;
}

Response Resp(bool allowed, engine::DescriptorResults descriptors) {
  Response response;
  response.domain_found = true;
  response.allowed = allowed;
  response.descriptors = std::move(descriptors);
  return response;
}

TEST(RenderCheckResponseTest, AllowedSingleDescriptor) {
  const Response r = Resp(true, {Result({Applied(10, "per-user", Allow(9, 40 * kSecondUs))}, 0)});
  EXPECT_EQ(RenderCheckResponse(r),
            R"({"allowed":true,"statuses":[{"name":"per-user","limit":10,"remaining":9,)"
            R"("reset_after_ms":40000,"retry_after_ms":0}]})");
}

TEST(RenderCheckResponseTest, DeniedReportsTimesInMillisecondsRoundedUp) {
  const Response r = Resp(false, {Result({Applied(10, "per-user", Deny(1500, 999001))}, 0)});
  EXPECT_EQ(RenderCheckResponse(r),
            R"({"allowed":false,"statuses":[{"name":"per-user","limit":10,"remaining":0,)"
            R"("reset_after_ms":1000,"retry_after_ms":2}]})");
  // One microsecond is one millisecond, never zero.
  EXPECT_THAT(RenderCheckResponse(Resp(false, {Result({Applied(1, "n", Deny(1, 1))}, 0)})),
              HasSubstr(R"("reset_after_ms":1,"retry_after_ms":1})"));
  // Exact milliseconds stay as they are.
  EXPECT_THAT(
      RenderCheckResponse(Resp(false, {Result({Applied(1, "n", Deny(3000, 60000000))}, 0)})),
      HasSubstr(R"("reset_after_ms":60000,"retry_after_ms":3})"));
}

TEST(RenderCheckResponseTest, NeverIsMinusOne) {
  const Response r = Resp(false, {Result({Applied(0, "blocked", Deny(Decision::kNever, 0))}, 0)});
  EXPECT_EQ(RenderCheckResponse(r),
            R"({"allowed":false,"statuses":[{"name":"blocked","limit":0,"remaining":0,)"
            R"("reset_after_ms":0,"retry_after_ms":-1}]})");
}

TEST(RenderCheckResponseTest, OneStatusPerDescriptorInOrderFromItsHeadlineLimit) {
  const Response r = Resp(
      false,
      {
          // Headline is the second limit: the one the engine found most restrictive.
          Result({Applied(100, "per-hour", Allow(50, kHourUs)), Applied(10, "", Allow(2, 5500))},
                 1),
          Result({Applied(5, "per-ip", Deny(250, 7 * kSecondUs))}, 0),
      });
  EXPECT_EQ(
      RenderCheckResponse(r),
      R"({"allowed":false,"statuses":[)"
      R"({"name":"10-per-1m","limit":10,"remaining":2,"reset_after_ms":6,"retry_after_ms":0},)"
      R"({"name":"per-ip","limit":5,"remaining":0,"reset_after_ms":7000,"retry_after_ms":1}]})");
}

// Names that need escaping, and a name longer than the writer's stack buffer, come out whole
// and in order among the other pieces.
TEST(RenderCheckResponseTest, EscapedAndLongNamesComeOutWhole) {
  const std::string long_name(300, 'n');
  const Response r = Resp(false, {Result({Applied(7, "say \"hi\" \xC3\xA9", Allow(6, 1000))}, 0),
                                  Result({Applied(9, long_name, Deny(2000, 2000))}, 0)});
  EXPECT_EQ(
      RenderCheckResponse(r),
      R"({"allowed":false,"statuses":[)"
      "{\"name\":\"say \\\"hi\\\" \xC3\xA9\",\"limit\":7,\"remaining\":6,\"reset_after_ms\":1,"
      R"("retry_after_ms":0},{"name":")" +
          long_name + R"(","limit":9,"remaining":0,"reset_after_ms":2,"retry_after_ms":2}]})");
}

TEST(RenderCheckResponseTest, DescriptorWithoutLimitHasNullLimitAndRemainingMinusOne) {
  rules::RuleNode unlimited;  // an `unlimited: true` rule matched
  unlimited.path = "api.internal";
  unlimited.unlimited = true;
  DescriptorResult unlimited_result = Result({}, -1);
  unlimited_result.rule = &unlimited;
  unlimited_result.unlimited = true;
  const Response r = Resp(true, {std::move(unlimited_result), Result({}, -1)});
  EXPECT_EQ(RenderCheckResponse(r),
            R"({"allowed":true,"statuses":[)"
            R"({"name":"","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0},)"
            R"({"name":"","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0}]})");
}

TEST(RenderCheckResponseTest, ShadowDenyHasNothingToWaitFor) {
  Decision shadow_deny = Deny(30 * kSecondUs, 30 * kSecondUs);
  const Response r = Resp(true, {Result({Applied(3, "trial", shadow_deny, /*shadow=*/true)}, 0)});
  EXPECT_EQ(RenderCheckResponse(r),
            R"({"allowed":true,"statuses":[{"name":"trial","limit":3,"remaining":0,)"
            R"("reset_after_ms":30000,"retry_after_ms":0}]})");
}

TEST(RenderCheckResponseTest, UnnamedLimitIsNamedFromItsDefinition) {
  const Response r =
      Resp(true, {Result({Applied(5, "", Allow(4, kHourUs), false, kHourUs)}, 0),
                  Result({Applied(10, "", Allow(9, 250000), false, 250000)}, 0),
                  Result({Applied(7, "", Allow(6, kSecondUs), false, 90 * kSecondUs)}, 0)});
  EXPECT_EQ(
      RenderCheckResponse(r),
      R"({"allowed":true,"statuses":[)"
      R"({"name":"5-per-1h","limit":5,"remaining":4,"reset_after_ms":3600000,"retry_after_ms":0},)"
      R"({"name":"10-per-250ms","limit":10,"remaining":9,"reset_after_ms":250,"retry_after_ms":0},)"
      R"({"name":"7-per-90s","limit":7,"remaining":6,"reset_after_ms":1000,"retry_after_ms":0}]})");
}

TEST(RenderCheckResponseTest, NoDescriptorsIsAnEmptyStatusList) {
  Response unknown_domain;
  EXPECT_EQ(RenderCheckResponse(unknown_domain), R"({"allowed":true,"statuses":[]})");
}

TEST(RenderCheckResponseTest, LargeNumbersAreWrittenInFull) {
  const Response r = Resp(
      true, {Result({Applied(kMaxRequests, "big", Allow(int64_t{1} << 40, kMaxWindowUs))}, 0)});
  EXPECT_EQ(RenderCheckResponse(r),
            R"({"allowed":true,"statuses":[{"name":"big","limit":4294967295,)"
            R"("remaining":1099511627776,"reset_after_ms":316224000000,"retry_after_ms":0}]})");
}

TEST(RenderCheckResponseTest, NamesAreEscaped) {
  const Response r = Resp(true, {Result({Applied(1, "k_\"quoted\\\"", Allow(0, 1000))}, 0),
                                 Result({Applied(1, "tab\there\nü", Allow(0, 1000))}, 0)});
  EXPECT_EQ(
      RenderCheckResponse(r),
      R"({"allowed":true,"statuses":[)"
      R"({"name":"k_\"quoted\\\"","limit":1,"remaining":0,"reset_after_ms":1,"retry_after_ms":0},)"
      R"({"name":"tab\there\nü","limit":1,"remaining":0,"reset_after_ms":1,"retry_after_ms":0}]})");
}

TEST(RenderErrorTest, ExactBytes) {
  EXPECT_EQ(RenderError("domain: missing"), R"({"error":"domain: missing"})");
  EXPECT_EQ(RenderError(R"(x."a\b": unknown field)"), R"({"error":"x.\"a\\b\": unknown field"})");
  EXPECT_EQ(RenderError(""), R"({"error":""})");
}

TEST(RenderErrorTest, EveryParseErrorRendersAsJsonThatReadsBackToTheMessage) {
  const std::string message = ErrorOf(R"({"dom\"ain\u0001\u00e9":1})");
  ASSERT_EQ(message, "dom\"ain\x01\xc3\xa9: unknown field (known: domain, descriptors, cost)");
  simdjson::dom::parser parser;
  std::string_view back;
  ASSERT_EQ(parser.parse(RenderError(message))["error"].get(back), simdjson::SUCCESS);
  EXPECT_EQ(back, message);
}

// ---------------------------------------------------------------------------------------------
// JSON strings.

std::string Quoted(std::string_view text) {
  std::string out;
  AppendJsonString(&out, text);
  return out;
}

TEST(AppendJsonStringTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(Quoted(R"(a"b\c/d)"), R"("a\"b\\c/d")");
  EXPECT_EQ(Quoted("\b\f\n\r\t"), R"("\b\f\n\r\t")");
  EXPECT_EQ(Quoted(std::string("\x00\x01\x1f\x7f", 4)), "\"\\u0000\\u0001\\u001f\x7f\"");
  EXPECT_EQ(Quoted(""), R"("")");
}

TEST(AppendJsonStringTest, ValidUtf8PassesThrough) {
  EXPECT_EQ(Quoted("é€😀ключ\u2028"), "\"é€😀ключ\u2028\"");
  // The extremes of each length: U+0080, U+07FF, U+0800, U+FFFF, U+10000, U+10FFFF.
  const std::string extremes =
      "\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf";
  EXPECT_EQ(Quoted(extremes), "\"" + extremes + "\"");
}

TEST(AppendJsonStringTest, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(Quoted("a\xff"
                   "b"),
            R"("a\ufffdb")");
  EXPECT_EQ(Quoted("\xc3"), R"("\ufffd")");                                // truncated
  EXPECT_EQ(Quoted("\xc0\xaf"), R"("\ufffd\ufffd")");                      // overlong
  EXPECT_EQ(Quoted("\xe0\x80\xaf"), R"("\ufffd\ufffd\ufffd")");            // overlong
  EXPECT_EQ(Quoted("\xed\xa0\x80"), R"("\ufffd\ufffd\ufffd")");            // surrogate
  EXPECT_EQ(Quoted("\xf4\x90\x80\x80"), R"("\ufffd\ufffd\ufffd\ufffd")");  // above U+10FFFF
  EXPECT_EQ(Quoted("\x80"
                   "é"),
            "\"\\ufffdé\"");  // stray continuation
}

TEST(AppendJsonStringTest, RandomBytesAlwaysGiveValidJsonThatKeepsValidUtf8) {
  std::mt19937 rng(7);
  simdjson::dom::parser parser;
  for (int round = 0; round < 5000; ++round) {
    std::string text(rng() % 24, '\0');
    for (char& c : text) {
      // Bias towards the interesting ranges: controls, ASCII, UTF-8 lead and continuation bytes.
      const uint32_t r = rng();
      c = static_cast<char>(r % 3 == 0 ? (0x80 | (r >> 8) % 0x80) : (r >> 8) % 0x100);
    }
    const std::string json = Quoted(text);
    std::string_view back;
    ASSERT_EQ(parser.parse(json).get(back), simdjson::SUCCESS) << json;
    if (simdjson::validate_utf8(text.data(), text.size())) {
      EXPECT_EQ(back, text);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Round trip through the engine: parse -> Check -> render.

class CheckJsonEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rules::LoadResult loaded = rules::LoadConfigText("test.yaml", R"yaml(domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-user}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
)yaml");
    ASSERT_THAT(loaded.errors, IsEmpty());
    config_ = loaded.config;
  }

  std::string Check(std::string_view body) {
    const absl::StatusOr<Request> request =
        ParseCheckRequest(body, config_->settings.max_key_bytes);
    if (!request.ok()) return RenderError(std::string(request.status().message()));
    return RenderCheckResponse(engine_.Check(*config_, *request, clock_.NowMicros()));
  }

  ManualClock clock_{kT0};
  store::MemoryStore store_{store::MemoryStore::Options{.max_entries = 1 << 10, .shards = 4},
                            &clock_};
  engine::Engine engine_{&store_};
  std::shared_ptr<const rules::Config> config_;
};

TEST_F(CheckJsonEngineTest, AllowThenDenyThenPeek) {
  constexpr std::string_view kBody =
      R"({"domain":"api","descriptors":[{"entries":[{"key":"user","value":"alice"}]},)"
      R"({"entries":[{"key":"ip","value":"10.0.0.1"}]},{"entries":[{"key":"internal","value":"x"}]},)"
      R"({"entries":[{"key":"unmatched","value":"y"}]}]})";
  EXPECT_EQ(
      Check(kBody),
      R"({"allowed":true,"statuses":[)"
      R"({"name":"per-user","limit":2,"remaining":1,"reset_after_ms":40000,"retry_after_ms":0},)"
      R"({"name":"1-per-1s","limit":1,"remaining":0,"reset_after_ms":1000,"retry_after_ms":0},)"
      R"({"name":"","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0},)"
      R"({"name":"","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0}]})");
  // The per-ip limit is spent for this second: the whole request is denied, nothing consumed.
  clock_.Advance(250000);
  EXPECT_EQ(
      Check(kBody),
      R"({"allowed":false,"statuses":[)"
      R"({"name":"per-user","limit":2,"remaining":1,"reset_after_ms":39750,"retry_after_ms":0},)"
      R"({"name":"1-per-1s","limit":1,"remaining":0,"reset_after_ms":750,"retry_after_ms":750},)"
      R"({"name":"","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0},)"
      R"({"name":"","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0}]})");
  // cost 0 looks without consuming.
  constexpr std::string_view kPeek =
      R"({"domain":"api","cost":0,"descriptors":[{"entries":[{"key":"user","value":"alice"}]}]})";
  const std::string peek =
      R"({"allowed":true,"statuses":[{"name":"per-user","limit":2,"remaining":1,)"
      R"("reset_after_ms":39750,"retry_after_ms":0}]})";
  EXPECT_EQ(Check(kPeek), peek);
  EXPECT_EQ(Check(kPeek), peek);
}

TEST_F(CheckJsonEngineTest, OverrideAndCostAboveTheLimit) {
  EXPECT_EQ(Check(R"({"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],)"
                  R"("limit":{"requests_per_unit":5,"unit":"HOUR"}}]})"),
            R"({"allowed":true,"statuses":[{"name":"5-per-1h","limit":5,"remaining":4,)"
            R"("reset_after_ms":2800000,"retry_after_ms":0}]})");
  EXPECT_EQ(
      Check(
          R"({"domain":"api","cost":3,"descriptors":[{"entries":[{"key":"user","value":"bob"}]}]})"),
      R"({"allowed":false,"statuses":[{"name":"per-user","limit":2,"remaining":2,)"
      R"("reset_after_ms":40000,"retry_after_ms":-1}]})");
}

TEST_F(CheckJsonEngineTest, UnknownDomainIsAllowedWithoutLimits) {
  EXPECT_EQ(Check(R"({"domain":"other","descriptors":[{"entries":[{"key":"user","value":"a"}]},)"
                  R"({"entries":[{"key":"ip","value":"b"}]}]})"),
            R"({"allowed":true,"statuses":[)"
            R"({"name":"","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0},)"
            R"({"name":"","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0}]})");
}

TEST_F(CheckJsonEngineTest, BadBodyGivesAnErrorBody) {
  EXPECT_EQ(Check(R"({"descriptors":[]})"), R"({"error":"domain: missing"})");
  EXPECT_EQ(Check(OneEntryBody(std::string(4097, 'k'), "v")),
            R"j({"error":"descriptors[0].entries[0].key: 4097 bytes, longer than the maximum of )j"
            R"j(4096 (http.max_key_bytes)"})j");
}

}  // namespace
}  // namespace sluice::http
