// The loader's errors (loader.h): each one line, FILE:LINE:COL: message (issue 4, check-config;
// upstream's wording where it has one), and the "did you mean" of an unknown key (Suggest).

#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/config.h"
#include "rules/loader.h"
#include "rules/loader_testing.h"
#include "tests/support/temp_dir.h"

namespace sluice::rules {
namespace {

using test::Errors;
using test::kPlans;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::TempDir;

TEST(LoaderErrorsTest, YamlSyntaxError) {
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second\n"),
              ElementsAre("t.yaml:5:1: YAML syntax error: did not find expected ',' or '}' "
                          "(while parsing a flow mapping at 4:17)"));
  EXPECT_THAT(Errors("domain: d\n  bad: indent\n"),
              ElementsAre("t.yaml:2:6: YAML syntax error: mapping values are not allowed in this "
                          "context"));
}

// Issue 19 (2): malformed documents are YAML syntax errors at their position, as upstream's
// parser (go-yaml, a port of libyaml) says, never loaded as something else (such as `'''` as "a
// config file must be a map", or `domain: 'abc` as a domain).
TEST(LoaderErrorsTest, MalformedDocumentsAreSyntaxErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"'''",
       "t.yaml:1:4: YAML syntax error: found unexpected end of stream (while scanning a "
       "quoted scalar at 1:1)"},
      {"'''\n",
       "t.yaml:2:1: YAML syntax error: found unexpected end of stream (while scanning "
       "a quoted scalar at 1:1)"},
      {"domain: 'abc\ndescriptors: []\n",
       "t.yaml:3:1: YAML syntax error: found unexpected end of stream (while scanning a quoted "
       "scalar at 1:9)"},
      {"domain: \"abc\n",
       "t.yaml:2:1: YAML syntax error: found unexpected end of stream (while "
       "scanning a quoted scalar at 1:9)"},
      {"domain: d\ndescriptors:\n  - key: a\n     value: b\n",
       "t.yaml:4:11: YAML syntax error: mapping values are not allowed in this context"},
      {"domain: d\ndescriptors:\n\t- key: a\n",
       "t.yaml:3:1: YAML syntax error: found character that cannot start any token (while "
       "scanning for the next token at 3:1)"},
      {"domain: d\ndescriptors: [a, b\n",
       "t.yaml:3:1: YAML syntax error: did not find expected ',' or ']' (while parsing a flow "
       "sequence at 2:14)"},
      // Well-formed YAML with a key twice: a config error, at the second.
      {"domain: d\ndomain: e\ndescriptors: []\n",
       "t.yaml:2:1: duplicate key 'domain' in domain file"},
  };
  for (const auto& [text, error] : cases) {
    EXPECT_THAT(Errors(text), ElementsAre(error)) << text;
  }
}

TEST(LoaderErrorsTest, NearLimitRatioIsANumberFromZeroToOne) {
  EXPECT_THAT(Errors("near_limit_ratio: 1.5\n"),
              ElementsAre("t.yaml:1:19: near_limit_ratio must be a number from 0 to 1"));
  EXPECT_THAT(Errors("near_limit_ratio: lots\n"),
              ElementsAre("t.yaml:1:19: near_limit_ratio must be a number from 0 to 1"));
}

TEST(LoaderErrorsTest, UnknownKeyWithDidYouMean) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptor:
  - key: a
)yaml"),
              ElementsAre("t.yaml:2:1: unknown key 'descriptor' in domain file "
                          "(did you mean 'descriptors'?)"));
  EXPECT_THAT(
      Errors(R"yaml(domain: d
descriptors:
  - key: a
    ratelimit: {unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unt: 1}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 1}
    totally_unrelated_thing: 1
)yaml"),
      ElementsAre("t.yaml:4:5: unknown key 'ratelimit' in descriptor (did you mean 'rate_limit'?)",
                  "t.yaml:6:32: unknown key 'requests_per_unt' in rate_limit "
                  "(did you mean 'requests_per_unit'?)",
                  "t.yaml:9:5: unknown key 'totally_unrelated_thing' in descriptor"));
  // In a limits entry, a plan, and the settings file.
  EXPECT_THAT(
      Errors(R"yaml(domain: d
plans:
  free: {limit: []}
default_plan: free
descriptors:
  - key: a
    limits: [{requests: 1, windw: 1s}]
)yaml"),
      ElementsAre("t.yaml:3:10: unknown key 'limit' in plan 'free' (did you mean 'limits'?)",
                  "t.yaml:7:28: unknown key 'windw' in limits entry (did you mean 'window'?)"));
  EXPECT_THAT(
      Errors("listen: x\nbakend: memory\n"),
      ElementsAre("t.yaml:2:1: unknown key 'bakend' in settings (did you mean 'backend'?)"));
}

TEST(LoaderErrorsTest, WrongType) {
  EXPECT_THAT(
      Errors(R"yaml(domain: d
count_denied: maybe
descriptors:
  - key: a
    shadow_mode: 3
    value: [x]
    rate_limit: {unit: [second], requests_per_unit: {n: 1}}
  - key: b
    descriptors: {key: c}
  - not a map
)yaml"),
      ElementsAre("t.yaml:2:15: count_denied must be true or false",
                  "t.yaml:5:18: shadow_mode must be true or false",
                  "t.yaml:6:12: value must be a string", "t.yaml:7:24: unit must be a string",
                  "t.yaml:7:53: requests_per_unit must be an integer",
                  "t.yaml:9:18: descriptors must be a list",
                  "t.yaml:10:5: descriptors must be a list of maps"));
}

TEST(LoaderErrorsTest, NegativeFloatAndTooLargeLimits) {
  EXPECT_THAT(
      Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: -1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1.5}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 4294967296}
  - key: d
    rate_limit: {requests: 1, window: 1s, algorithm: token_bucket, burst: -2}
)yaml"),
      ElementsAre("t.yaml:4:51: requests_per_unit must not be negative, got -1",
                  "t.yaml:6:51: requests_per_unit must be an integer, got '1.5'",
                  "t.yaml:8:51: requests_per_unit must be at most 4294967295, got 4294967296",
                  "t.yaml:10:75: burst must not be negative, got -2"));
}

TEST(LoaderErrorsTest, UnknownOrMissingUnitAndBadWindow) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unit: seconds, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: c
    rate_limit: {requests_per_unit: 1}
  - key: d
    rate_limit: {requests: 1, window: 0s}
  - key: e
    rate_limit: {requests: 1, unit: second, window: 1s}
)yaml"),
              ElementsAre("t.yaml:4:24: invalid rate limit unit 'seconds'",
                          "t.yaml:6:24: invalid rate limit unit 'fortnight'",
                          "t.yaml:8:17: rate_limit needs a unit (second, minute, hour, day, week, "
                          "month, year) or a window (e.g. 30s)",
                          "t.yaml:10:39: window: bad duration \"0s\": must be positive (write e.g. "
                          "250ms, 1s, 30s, 5m, 1h, 1d, 1w)",
                          "t.yaml:12:53: rate_limit: give unit or window, not both"));
}

TEST(LoaderErrorsTest, UnknownAlgorithm) {
  EXPECT_THAT(
      Errors("domain: d\ndescriptors:\n  - key: a\n"
             "    rate_limit: {algorithm: token-bucket, requests: 1, window: 1s}\n"),
      ElementsAre("t.yaml:4:29: unknown algorithm \"token-bucket\" (known: token_bucket, gcra, "
                  "leaky_bucket, fixed_window, sliding_log, sliding_window)"));
}

// One mistake, one error: an unknown algorithm does not also make its burst look misplaced.
TEST(LoaderErrorsTest, UnknownAlgorithmWithBurstIsOneError) {
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n"
                     "    rate_limit: {algorithm: bogus, requests: 1, window: 1s, burst: 5}\n"),
              ElementsAre("t.yaml:4:29: unknown algorithm \"bogus\" (known: token_bucket, gcra, "
                          "leaky_bucket, fixed_window, sliding_log, sliding_window)"));
  // A burst on a known algorithm without one is still an error of its own.
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n"
                     "    rate_limit: {algorithm: fixed_window, requests: 1, window: 1s, "
                     "burst: 5}\n"),
              SizeIs(1));
}

// A file with no document at all is an error, not "no rules" (see ConfigManagerTest's
// EmptyFileOverADomainKeepsTheDomain for why).
TEST(LoaderErrorsTest, EmptyFileIsAnError) {
  for (const char* text : {"", "# only a comment\n", "\n   \n", "---\n", "~\n"}) {
    EXPECT_THAT(Errors(text),
                ElementsAre("t.yaml:1:1: the file holds no YAML document (a rules file needs "
                            "`domain:`, a settings file a map of settings)"))
        << "text: '" << text << "'";
  }
}

// Rules whose `domain:` is missing are reported as such, not as an unknown settings key.
TEST(LoaderErrorsTest, RulesWithoutDomainSayTheDomainIsMissing) {
  EXPECT_THAT(Errors("descriptors:\n  - key: a\n    rate_limit: {unit: second, "
                     "requests_per_unit: 1}\n"),
              ElementsAre("t.yaml:1:1: a rules file needs a `domain:` (this one has "
                          "`descriptors:` but no domain)"));
}

TEST(LoaderErrorsTest, BurstRules) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {algorithm: token_bucket, requests: 1, window: 1s, burst: 0}
  - key: b
    rate_limit: {requests: 1, window: 1s, burst: 5}
  - key: c
    rate_limit: {algorithm: sliding_log, requests: 1, window: 1s, burst: 5}
  - key: d
    rate_limit: {algorithm: leaky_bucket, requests: 1, window: 1s, burst: 0}
)yaml"),
              ElementsAre("t.yaml:4:75: burst of a token_bucket must be at least 1",
                          "t.yaml:6:50: burst applies to token_bucket and leaky_bucket, not "
                          "fixed_window",
                          "t.yaml:8:74: burst applies to token_bucket and leaky_bucket, not "
                          "sliding_log"));
}

TEST(LoaderErrorsTest, DuplicateDescriptor) {
  EXPECT_THAT(
      Errors(R"yaml(domain: test-domain
descriptors:
  - key: key1
    value: value1
  - key: key1
    value: value1
  - key: key2
  - key: key2
  - key: key3
    value: v*
  - key: key3
    value: v*
  - key: key4
    descriptors:
      - key: inner
        value: x
      - key: inner
        value: x
)yaml"),
      ElementsAre("t.yaml:5:5: duplicate descriptor composite key 'test-domain.key1_value1'",
                  "t.yaml:8:5: duplicate descriptor composite key 'test-domain.key2'",
                  "t.yaml:11:5: duplicate descriptor composite key 'test-domain.key3_v*'",
                  "t.yaml:17:9: duplicate descriptor composite key "
                  "'test-domain.key4.inner_x'"));
}

TEST(LoaderErrorsTest, SameKeyWithDifferentValuesIsNoDuplicate) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - {key: k}
  - {key: k, value: a}
  - {key: k, value: a*}
  - {key: k, value: b}
)yaml"),
              IsEmpty());
}

TEST(LoaderErrorsTest, UnknownPlan) {
  EXPECT_THAT(Errors(R"yaml(domain: d
plans:
  free: {limits: [{requests: 1, window: 1s}]}
  pro: {limits: [{requests: 2, window: 1s}]}
default_plan: gold
)yaml"),
              ElementsAre("t.yaml:5:15: unknown plan 'gold' (plans: free, pro)"));
  EXPECT_THAT(Errors("domain: d\ndefault_plan: free\n"),
              ElementsAre("t.yaml:2:15: unknown plan 'free' (no plans are defined)"));
  EXPECT_THAT(Errors("domain: d\nplans:\n  free: {limits: [{requests: 1, window: 1s}]}\n"),
              ElementsAre("t.yaml:3:3: plans need a default_plan (used when a request names no "
                          "known plan)"));
}

TEST(LoaderErrorsTest, UnknownPlanInClientsCsv) {
  TempDir dir;
  const std::string csv = dir.Write("clients.csv", "key,plan\nk1,free\nk2,gold\nk3\n,free\nk4,\n");
  dir.Write("d.yaml", std::string(kPlans) + "clients: clients.csv\n");
  const LoadResult result = LoadConfig({dir.Path("d.yaml")});
  std::vector<std::string> lines;
  for (const ConfigError& e : result.errors) lines.push_back(e.ToString());
  EXPECT_THAT(lines,
              ElementsAre(csv + ":3:4: unknown plan 'gold'", csv + ":4:1: expected `key,plan`",
                          csv + ":5:1: expected `key,plan`", csv + ":6:1: expected `key,plan`"));
  EXPECT_EQ(result.config, nullptr);
}

TEST(LoaderErrorsTest, MissingClientsFile) {
  TempDir dir;
  dir.Write("d.yaml", std::string(kPlans) + "clients: nowhere.csv\n");
  const LoadResult result = LoadConfig({dir.Path("d.yaml")});
  ASSERT_THAT(result.errors, SizeIs(1));
  // At the `clients:` line (after kPlans' 16), naming the file as resolved.
  EXPECT_EQ(result.errors[0].ToString(),
            dir.Path("d.yaml") + ":17:10: cannot read clients file " + dir.Path("nowhere.csv"));
}

TEST(LoaderErrorsTest, PlanFromWithoutPlans) {
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: api_key\n    plan_from: plan\n"),
              ElementsAre("t.yaml:4:16: plan_from needs top-level plans"));
  EXPECT_THAT(Errors(std::string(kPlans) +
                     "  - key: other\n    plan_from: plan\n    rate_limit: {unit: second, "
                     "requests_per_unit: 1}\n"),
              ElementsAre("t.yaml:18:16: a descriptor with plan_from takes its limits from the "
                          "plan; remove rate_limit/limits"));
}

TEST(LoaderErrorsTest, UnlimitedWithUnit) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unlimited: true, unit: second}
  - key: b
    rate_limit: {unlimited: true, window: 1s}
  - key: c
    rate_limit: {unlimited: true, requests_per_unit: 5}
)yaml"),
              ElementsAre("t.yaml:4:41: should not specify rate limit unit when unlimited",
                          "t.yaml:6:43: should not specify rate limit unit when unlimited"));
}

TEST(LoaderErrorsTest, EmptyOrSelfReplaces) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit:
      name: mine
      unit: second
      requests_per_unit: 1
      replaces:
        - name: ""
        - name: mine
        - {}
)yaml"),
              ElementsAre("t.yaml:9:11: should not have an empty replaces entry",
                          "t.yaml:10:11: replaces should not contain name of same descriptor",
                          "t.yaml:11:11: should not have an empty replaces entry"));
}

TEST(LoaderErrorsTest, ShareThresholdWithoutWildcard) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: bucket
    value: reports
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: other
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
)yaml"),
              ElementsAre("t.yaml:5:22: share_threshold can only be used with wildcard values "
                          "(containing '*'), but found key 'bucket'",
                          "t.yaml:8:22: share_threshold can only be used with wildcard values "
                          "(containing '*'), but found key 'other'"));
}

TEST(LoaderErrorsTest, EmptyDomain) {
  EXPECT_THAT(Errors("domain: \"\"\n"),
              ElementsAre("t.yaml:1:9: config file cannot have empty domain"));
  EXPECT_THAT(Errors("descriptors: []\ndomain: ''\n"),
              ElementsAre("t.yaml:2:9: config file cannot have empty domain"));
}

// A key written without a value (`domain:`, `key:`) is null; the error belongs on that key's line,
// not at the next token (where a parser may mark an empty value).
TEST(LoaderErrorsTest, NullDomainOrKeyIsReportedOnItsOwnLine) {
  LoadResult result = LoadConfigText("t.yaml", "domain:\ndescriptors: []\n");
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].message, "config file cannot have empty domain");
  EXPECT_EQ(result.errors[0].position.line, 1) << result.errors[0].ToString();
  result = LoadConfigText("t.yaml",
                          "domain: d\ndescriptors:\n  - key:\n    rate_limit: {unit: second, "
                          "requests_per_unit: 1}\n");
  ASSERT_THAT(result.errors, SizeIs(1));
  EXPECT_EQ(result.errors[0].message, "descriptor has empty key");
  EXPECT_EQ(result.errors[0].position.line, 3) << result.errors[0].ToString();
}

TEST(LoaderErrorsTest, DuplicateYamlKeys) {
  EXPECT_THAT(Errors("domain: d\ndomain: e\n"),
              ElementsAre("t.yaml:2:1: duplicate key 'domain' in domain file"));
  EXPECT_THAT(Errors("domain: d\ndescriptors:\n  - key: a\n    key: b\n"),
              ElementsAre("t.yaml:4:5: duplicate key 'key' in descriptor"));
}

TEST(LoaderErrorsTest, EmptyKey) {
  EXPECT_THAT(
      Errors(R"yaml(domain: d
descriptors:
  - key: ""
  - value: x
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: ''
)yaml"),
      ElementsAre("t.yaml:3:10: descriptor has empty key", "t.yaml:4:5: descriptor has empty key",
                  "t.yaml:8:14: descriptor has empty key"));
}

TEST(LoaderErrorsTest, RateLimitAndLimitsBothGiven) {
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    limits:
      - {requests: 1, window: 1s}
)yaml"),
              ElementsAre("t.yaml:6:7: use either rate_limit or limits on a descriptor, not both"));
}

TEST(LoaderErrorsTest, RequestsAndRequestsPerUnitBothGiven) {
  EXPECT_THAT(
      Errors("domain: d\ndescriptors:\n  - key: a\n"
             "    limits: [{requests: 1, requests_per_unit: 1, window: 1s}]\n"),
      ElementsAre("t.yaml:4:25: limits entry: give requests or requests_per_unit, not both"));
}

TEST(LoaderErrorsTest, BadUpstreamUrls) {
  for (const char* url :
       {"http://", "http://h:", "http://h:0", "http://h:65536", "http://h:8x", "http://h/path",
        "http://u@h:1", "http://[::1", "http://[::1]x", "http://h:1?q", "http://:80"}) {
    EXPECT_THAT(Errors(fmt::format("domain: d\nhttp:\n  upstream: \"{}\"\n", url)),
                ElementsAre(fmt::format("t.yaml:3:13: bad upstream '{}': give http://HOST[:PORT] "
                                        "(no path, no user info)",
                                        url)));
  }
}

TEST(LoaderErrorsTest, FailureModeAndHttpErrors) {
  EXPECT_THAT(
      Errors(R"yaml(domain: d
failure_mode: sometimes
http:
  deny_status: 100
  trusted_proxies: [10.0.0.0/33, not-an-ip]
  upstream: https://x
  refund_on: [4xx]
  routes:
    - match: {prefix: /a, path: /b}
      rate_limits:
        - actions:
            - request_headers: {header_name: X-A}
            - generic_key: {descriptor_key: k}
            - query: {name: q}
            - {path: {}, method: {}}
)yaml"),
      ElementsAre("t.yaml:2:15: unknown failure_mode 'sometimes' (open, closed or local)",
                  "t.yaml:4:16: deny_status must be an HTTP status between 200 and 599",
                  "t.yaml:5:21: bad address or CIDR '10.0.0.0/33' in trusted_proxies",
                  "t.yaml:5:34: bad address or CIDR 'not-an-ip' in trusted_proxies",
                  "t.yaml:6:13: upstream must be an http:// URL",
                  "t.yaml:7:15: unknown refund_on '4xx' (5xx, connect_error, timeout)",
                  "t.yaml:9:14: match takes prefix or path, not both",
                  "t.yaml:12:32: request_headers needs header_name and descriptor_key",
                  "t.yaml:13:15: generic_key needs a descriptor_value",
                  "t.yaml:14:15: unknown key 'query' in action",
                  "t.yaml:15:15: an action has exactly one of request_headers, remote_address, "
                  "generic_key, path, method"));
}

TEST(LoaderErrorsTest, SettingsErrors) {
  EXPECT_THAT(
      Errors(R"yaml(backend: cassandra
threads: many
unknown_domain: maybe
headers: [x_ratelimit, draft]
redis: {url: http://x, instances: 0}
rls: {unknown_domain: deny}
grpc: {threads: -2}
)yaml"),
      ElementsAre("t.yaml:1:10: unknown backend 'cassandra' (memory or redis)",
                  "t.yaml:2:10: threads must be an integer, got 'many'",
                  "t.yaml:3:17: unknown_domain must be allow or deny",
                  "t.yaml:4:24: unknown header style 'draft' (x_ratelimit, ietf, none)",
                  "t.yaml:5:14: bad Redis URL 'http://x' (redis[s]://[user:pass@]host:port[/db])",
                  "t.yaml:5:35: instances must be at least 1",
                  "t.yaml:6:23: rls.unknown_domain must be ok or error",
                  "t.yaml:7:17: threads must not be negative, got -2"));
  EXPECT_THAT(Errors("grpc: {threads: 257}\n"),
              ElementsAre("t.yaml:1:17: threads must be at most 256, got 257"));
  EXPECT_THAT(Errors("grpc: {threads: two}\n"),
              ElementsAre("t.yaml:1:17: threads must be an integer, got 'two'"));
  EXPECT_THAT(Errors("redis: {url: redis://h:1, sync_interval: 100us}\n"),
              ElementsAre("t.yaml:1:42: sync_interval must be at least 1ms"));
  EXPECT_THAT(Errors("redis: {url: redis://h:1, buckets: 16777217}\n"),
              ElementsAre("t.yaml:1:36: buckets must be at most 16777216, got 16777217"));
  EXPECT_THAT(
      Errors("backend: redis\n"),
      ElementsAre("t.yaml:1:10: backend redis needs redis.url, redis.nodes or redis.sentinel"));
  EXPECT_THAT(Errors("store: {on_full: evict}\n"),
              ElementsAre("t.yaml:1:18: unknown store.on_full 'evict' (shared, deny or "
                          "allow_untracked)"));
}

TEST(LoaderErrorsTest, ADocumentThatIsNotAMap) {
  EXPECT_THAT(Errors("- domain: d\n"),
              ElementsAre("t.yaml:1:1: a config file must be a map (a domain file has `domain:`)"));
}

TEST(LoaderErrorsTest, EveryErrorOfAFileIsReportedInOrder) {
  // Parsing goes on after an error: one run reports everything, sorted by position.
  EXPECT_THAT(Errors(R"yaml(domain: d
descriptors:
  - key: a
    rate_limit: {unit: sec, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: -5}
)yaml"),
              SizeIs(2));
}

// Decisions on Redis (docs/algorithms.md, "Exact range"): a limit Redis's doubles cannot decide
// exactly is an error where it is written, in the rules and in plans, with `backend: redis` or
// serve's --redis (LoadOptions::redis); the memory store takes it.
TEST(LoaderErrorsTest, LimitsTooLargeForRedisWhenDecisionsGoThere) {
  TempDir dir;
  dir.Write("rules/d.yaml", R"yaml(domain: d
descriptors:
  - key: fits
    rate_limit: {algorithm: token_bucket, requests: 100000, window: 1d}
  - key: big
    rate_limit: {algorithm: token_bucket, requests: 1000000, window: 1d}
  - key: counter
    rate_limit: {algorithm: fixed_window, requests: 1000000, window: 365d}
default_plan: huge
plans:
  huge:
    limits:
      - {algorithm: sliding_window, requests: 1000, window: 365d}
)yaml");
  EXPECT_THAT(LoadConfig({dir.Path("rules")}).errors, IsEmpty()) << "memory: any size";
  const auto errors = [&](const LoadOptions& options) {
    std::vector<std::string> lines;
    for (const ConfigError& e : LoadConfig({dir.Path("rules")}, options).errors)
      lines.push_back(e.ToString().substr(dir.Path("rules/").size()));
    return lines;
  };
  const std::vector<std::string> expected = {
      "d.yaml:6:17: limit 1000000/1d token_bucket is too large to decide exactly on Redis "
      "(capacity x window is 8.64e+16 requests x µs, over 2^53); use fewer requests or a shorter "
      "window, or fixed_window / sliding_log",
      "d.yaml:13:9: limit 1000/365d sliding_window is too large to decide exactly on Redis (2 x "
      "requests x window is 6.31e+16 requests x µs, over 2^53); use fewer requests or a shorter "
      "window, or fixed_window / sliding_log"};
  LoadOptions redis;
  redis.redis = true;
  EXPECT_EQ(errors(redis), expected);
  dir.Write("rules/sluice.yaml", "backend: redis\nredis: {url: redis://127.0.0.1:6379}\n");
  EXPECT_EQ(errors({}), expected);
}

// A rate_limits entry's `cost:` (reverse proxy and forward-auth): each fault named where it is.
TEST(LoaderErrorsTest, RouteCostErrors) {
  const auto errors = [](std::string_view cost) {
    return Errors(fmt::format(
        "domain: d\nhttp:\n  routes:\n    - rate_limits:\n        - actions: [{{generic_key: "
        "{{descriptor_value: v}}}}]\n          cost: {}\n",
        cost));
  };
  EXPECT_THAT(errors("{settle: {fixed: 3}}"),
              ElementsAre("t.yaml:6:26: settle reads the answer: a header or a json field, not a "
                          "fixed number"));
  EXPECT_THAT(errors("{reserve: {fixed: 1, header: X}}"),
              ElementsAre("t.yaml:6:27: reserve takes one of fixed, header, json"));
  EXPECT_THAT(errors("{reserve: {json: usage..total}}"),
              ElementsAre("t.yaml:6:34: json takes a dotted path of field names "
                          "(usage.total_tokens)"));
  EXPECT_THAT(errors("{settle: {json: n, default: 4}}"), SizeIs(1));  // no default to settle
  EXPECT_THAT(errors("{reserve: {json: n}, refund: 1}"), SizeIs(1));
  EXPECT_THAT(errors("{reserve: {json: max_tokens, default: 100}, settle: {json: usage.total}}"),
              IsEmpty());
}

TEST(SuggestTest, ClosestCandidateWithinASmallDistance) {
  const std::vector<std::string_view> keys = {"rate_limit", "requests_per_unit", "descriptors",
                                              "value"};
  EXPECT_EQ(Suggest("ratelimit", keys), "rate_limit");
  EXPECT_EQ(Suggest("rate_limits", keys), "rate_limit");
  EXPECT_EQ(Suggest("requests_per_units", keys), "requests_per_unit");
  EXPECT_EQ(Suggest("vaule", keys), "value");
  EXPECT_EQ(Suggest("frobnicate", keys), "");
  EXPECT_EQ(Suggest("x", keys), "");
}

}  // namespace
}  // namespace sluice::rules
