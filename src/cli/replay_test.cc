// In-process tests of `sluice replay` (RunReplay): the output format, the parsing of trace lines,
// the malformed-line errors and the exit status. The golden end-to-end tests of the binary are in
// tests/replay_golden.sh; the algorithms themselves are tested in src/algo/.

#include "cli/replay.h"

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/limit.h"
#include "tests/support/limits.h"

namespace sluice::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr int64_t kSecondUs = 1000000;

struct ReplayResult {
  int status = -1;
  std::string out;
  std::string err;

  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
};

ReplayResult Replay(const Limit& limit, std::string_view trace) {
  std::istringstream in{std::string(trace)};
  std::ostringstream out, err;
  ReplayResult result;
  result.status = RunReplay(limit, in, out, err);
  result.out = out.str();
  result.err = err.str();
  return result;
}

using testing::FixedWindow;
using testing::LeakyBucket;
using testing::TokenBucket;

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? tab : tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

// --- Output format ---------------------------------------------------------------------------

TEST(ReplayOutputTest, OneLineOfSevenTabSeparatedColumnsPerRequest) {
  const ReplayResult r = Replay(TokenBucket(1, kSecondUs, 5), "0 k\n500 k 2\n");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.err, IsEmpty());
  ASSERT_THAT(r.Lines(), SizeIs(2));
  for (const std::string& line : r.Lines()) {
    EXPECT_THAT(SplitTabs(line), SizeIs(7)) << line;
  }
  // t_ms key allow|deny remaining retry_after_ms reset_ms delay_ms; no header.
  EXPECT_EQ(r.out, "0\tk\tallow\t4\t0\t1000\t0\n500\tk\tallow\t2\t0\t2500\t0\n");
}

TEST(ReplayOutputTest, EmptyInputPrintsNothing) {
  const ReplayResult r = Replay(TokenBucket(1, kSecondUs), "");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_THAT(r.err, IsEmpty());
}

TEST(ReplayOutputTest, OnlyCommentsAndBlankLinesPrintNothing) {
  const ReplayResult r = Replay(TokenBucket(1, kSecondUs), "# a\n\n   \n\t# b\r\n\r\n");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_THAT(r.err, IsEmpty());
}

TEST(ReplayOutputTest, TimeIsEchoedAsWrittenEvenWhenClampedForTheDecision) {
  // The second request is decided at 5000 ms (time never runs backwards), but printed as 3000.
  const ReplayResult r = Replay(TokenBucket(1, kSecondUs, 2), "5000 k\n3000 k\n4000 k\n");
  EXPECT_THAT(r.Lines(), ElementsAre("5000\tk\tallow\t1\t0\t1000\t0",  //
                                     "3000\tk\tallow\t0\t0\t2000\t0",  //
                                     "4000\tk\tdeny\t0\t1000\t2000\t0"));
}

TEST(ReplayOutputTest, RetryAfterIsZeroWhenAllowedAndPositiveWhenDenied) {
  const ReplayResult r = Replay(FixedWindow(1, kSecondUs), "0 k\n999 k\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tallow\t0\t0\t1000\t0",  //
                                     "999\tk\tdeny\t0\t1\t1\t0"));
}

TEST(ReplayOutputTest, RetryAfterIsMinusOneWhenNeverAllowed) {
  const ReplayResult r = Replay(TokenBucket(1, kSecondUs, 5), "0 k 6\n0 k 5\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tdeny\t5\t-1\t0\t0",  //
                                     "0\tk\tallow\t0\t0\t5000\t0"));
}

TEST(ReplayOutputTest, ZeroLimitIsNeverAllowed) {
  const ReplayResult r = Replay(FixedWindow(0, kSecondUs), "0 k\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tdeny\t0\t-1\t1000\t0"));
}

TEST(ReplayOutputTest, MillisecondsAreRoundedUp) {
  // One token per 333.33 ms: reset 333.33 -> 334, 666.67 -> 667; retry 333.33 -> 334.
  const ReplayResult r = Replay(TokenBucket(3, kSecondUs), "0 k\n0 k\n0 k\n0 k\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tallow\t2\t0\t334\t0",   //
                                     "0\tk\tallow\t1\t0\t667\t0",   //
                                     "0\tk\tallow\t0\t0\t1000\t0",  //
                                     "0\tk\tdeny\t0\t334\t1000\t0"));
}

TEST(ReplayOutputTest, SubMillisecondWaitsAreReportedAsOneMillisecond) {
  // A 1 ms window of 1000 requests: the bucket refills one token per microsecond.
  const ReplayResult r = Replay(TokenBucket(1000, 1000, 1), "0 k\n0 k\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tallow\t0\t0\t1\t0",  //
                                     "0\tk\tdeny\t0\t1\t1\t0"));
}

TEST(ReplayOutputTest, DelayColumnIsTheLeakyBucketDelay) {
  // N = 10/s, B = 5: delays 0, 100, ..., 500 ms, then denied (delay 0 on a deny).
  const ReplayResult r =
      Replay(LeakyBucket(10, kSecondUs, 5), "0 k\n0 k\n0 k\n0 k\n0 k\n0 k\n0 k\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tallow\t5\t0\t100\t0",    //
                                     "0\tk\tallow\t4\t0\t200\t100",  //
                                     "0\tk\tallow\t3\t0\t300\t200",  //
                                     "0\tk\tallow\t2\t0\t400\t300",  //
                                     "0\tk\tallow\t1\t0\t500\t400",  //
                                     "0\tk\tallow\t0\t0\t600\t500",  //
                                     "0\tk\tdeny\t0\t100\t600\t0"));
}

TEST(ReplayOutputTest, DelayIsRoundedUp) {
  // T = 333.33 ms: the second request waits 333.33 -> 334 ms.
  const ReplayResult r = Replay(LeakyBucket(3, kSecondUs, 2), "0 k\n0 k\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tallow\t2\t0\t334\t0",  //
                                     "0\tk\tallow\t1\t0\t667\t334"));
}

TEST(ReplayOutputTest, CostDefaultsToOne) {
  const ReplayResult r = Replay(FixedWindow(5, kSecondUs), "0 k\n0 k 1\n0 k 3\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tallow\t4\t0\t1000\t0",  //
                                     "0\tk\tallow\t3\t0\t1000\t0",  //
                                     "0\tk\tallow\t0\t0\t1000\t0"));
}

TEST(ReplayOutputTest, KeysAreIndependent) {
  const ReplayResult r = Replay(FixedWindow(1, kSecondUs), "0 a\n0 b\n0 a\n0 user:1/x?y=z\n");
  EXPECT_THAT(r.Lines(), ElementsAre("0\ta\tallow\t0\t0\t1000\t0",    //
                                     "0\tb\tallow\t0\t0\t1000\t0",    //
                                     "0\ta\tdeny\t0\t1000\t1000\t0",  //
                                     "0\tuser:1/x?y=z\tallow\t0\t0\t1000\t0"));
}

TEST(ReplayOutputTest, EachRunStartsWithFreshState) {
  const Limit limit = FixedWindow(1, kSecondUs);
  EXPECT_EQ(Replay(limit, "0 k\n").out, "0\tk\tallow\t0\t0\t1000\t0\n");
  EXPECT_EQ(Replay(limit, "0 k\n").out, "0\tk\tallow\t0\t0\t1000\t0\n");
}

TEST(ReplayOutputTest, WhiteSpaceAroundAndBetweenFieldsIsIgnored) {
  const ReplayResult r =
      Replay(FixedWindow(5, kSecondUs), "  0   k  \n\t0\tk\t2\t\n0 k 1\r\n   # indented comment\n");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.Lines(), ElementsAre("0\tk\tallow\t4\t0\t1000\t0",  //
                                     "0\tk\tallow\t2\t0\t1000\t0",  //
                                     "0\tk\tallow\t1\t0\t1000\t0"));
}

TEST(ReplayOutputTest, CrlfLineEndingsAndAMissingFinalNewline) {
  const ReplayResult r = Replay(FixedWindow(5, kSecondUs), "# c\r\n\r\n0 k\r\n0 k 2");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "0\tk\tallow\t4\t0\t1000\t0\n0\tk\tallow\t2\t0\t1000\t0\n");
}

TEST(ReplayOutputTest, RealisticUnixMillisecondsAndTheLatestUsableTime) {
  const int64_t max_ms = kMaxTimeUs / 1000;
  const std::string trace = "1700000000000 k\n" + std::to_string(max_ms) + " k\n";
  const ReplayResult r = Replay(TokenBucket(1, kSecondUs), trace);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.Lines(), ElementsAre("1700000000000\tk\tallow\t0\t0\t1000\t0",
                                     std::to_string(max_ms) + "\tk\tallow\t0\t0\t1000\t0"));
}

TEST(ReplayOutputTest, LongTraceIsPrintedCompletely) {
  // More output than the writer buffers at once (64 KiB).
  std::string trace;
  constexpr int kLines = 20000;
  for (int i = 0; i < kLines; ++i) trace += std::to_string(i * 1000) + " k\n";
  const ReplayResult r = Replay(FixedWindow(1, kSecondUs), trace);
  EXPECT_EQ(r.status, 0);
  const std::vector<std::string> lines = r.Lines();
  ASSERT_THAT(lines, SizeIs(kLines));
  EXPECT_EQ(lines.front(), "0\tk\tallow\t0\t0\t1000\t0");
  EXPECT_EQ(lines.back(), std::to_string((kLines - 1) * 1000) + "\tk\tallow\t0\t0\t1000\t0");
}

// --- Malformed lines --------------------------------------------------------------------------

struct MalformedCase {
  std::string name;
  std::string line;
  std::string reason;
};

class ReplayMalformedLineTest : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(ReplayMalformedLineTest, StopsWithLineNumberAndReasonAndExitStatus2) {
  const MalformedCase& c = GetParam();
  // The bad line is physical line 6: comments and blank lines count.
  const std::string trace = "# header\n0 a\n\n# comment\n1 b 2\n" + c.line + "\n2 c\n3 d x\n";
  const ReplayResult r = Replay(FixedWindow(5, kSecondUs), trace);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "line 6: " + c.reason + "\n");
  // Decisions before the bad line are printed; nothing after it.
  EXPECT_THAT(r.Lines(), ElementsAre("0\ta\tallow\t4\t0\t1000\t0",  //
                                     "1\tb\tallow\t3\t0\t999\t0"));
}

INSTANTIATE_TEST_SUITE_P(
    Reasons, ReplayMalformedLineTest,
    ::testing::Values(
        MalformedCase{"TimeNotInteger", "1.5 a", "time is not an integer"},
        MalformedCase{"TimeWord", "now a", "time is not an integer"},
        MalformedCase{"TimeWithSuffix", "10ms a", "time is not an integer"},
        MalformedCase{"TimeNegative", "-5 a", "negative time"},
        MalformedCase{"TimeTooLarge", "99999999999999999999 a", "time out of range"},
        MalformedCase{"TimePastLatestUsable", std::to_string(kMaxTimeUs / 1000 + 1) + " a",
                      "time out of range"},
        MalformedCase{"MissingKey", "100", "missing key (expected: T_MS KEY [COST])"},
        MalformedCase{"MissingKeyWithTrailingSpace", "100 \t",
                      "missing key (expected: T_MS KEY [COST])"},
        MalformedCase{"CostZero", "100 a 0", "cost must be positive"},
        MalformedCase{"CostNegative", "100 a -1", "negative cost (cost is a positive integer)"},
        MalformedCase{"CostNotInteger", "100 a 1.5", "cost is not an integer"},
        MalformedCase{"CostWord", "100 a two", "cost is not an integer"},
        MalformedCase{"CostTooLarge", "100 a 99999999999999999999", "cost too large"},
        MalformedCase{"TooManyFields", "100 a 1 x", "too many fields (expected: T_MS KEY [COST])"}),
    [](const ::testing::TestParamInfo<MalformedCase>& info) { return info.param.name; });

TEST(ReplayMalformedTest, ErrorOnTheFirstLinePrintsNothing) {
  const ReplayResult r = Replay(FixedWindow(5, kSecondUs), "x a\n0 a\n");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "line 1: time is not an integer\n");
  EXPECT_THAT(r.out, IsEmpty());
}

TEST(ReplayMalformedTest, LineNumbersCountCrlfLinesAndBlankLines) {
  const ReplayResult r = Replay(FixedWindow(5, kSecondUs), "# c\r\n\r\n  \r\n0 a\r\n0 a 0\r\n");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "line 5: cost must be positive\n");
  EXPECT_EQ(r.out, "0\ta\tallow\t4\t0\t1000\t0\n");
}

TEST(ReplayMalformedTest, LastLineWithoutNewlineHasItsNumber) {
  const ReplayResult r = Replay(FixedWindow(5, kSecondUs), "0 a\n0 a -2");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "line 2: negative cost (cost is a positive integer)\n");
  EXPECT_EQ(r.out, "0\ta\tallow\t4\t0\t1000\t0\n");
}

TEST(ReplayMalformedTest, OutputBeforeTheBadLineIsCompleteAfterALongTrace) {
  // More than the 64 KiB the writer buffers: every earlier decision exactly once, none after.
  std::string trace;
  constexpr int kLines = 20000;
  for (int i = 0; i < kLines; ++i) trace += std::to_string(i) + " k\n";
  trace += "oops k\n0 k\n";
  // One window (an hour) for the whole trace: the request at i ms leaves 10^6 - (i + 1).
  const ReplayResult r = Replay(FixedWindow(1000000, 3600 * kSecondUs), trace);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "line " + std::to_string(kLines + 1) + ": time is not an integer\n");
  const std::vector<std::string> lines = r.Lines();
  ASSERT_THAT(lines, SizeIs(kLines));
  EXPECT_EQ(lines.front(), "0\tk\tallow\t999999\t0\t3600000\t0");
  EXPECT_EQ(lines.back(), "19999\tk\tallow\t980000\t0\t3580001\t0");
}

TEST(ReplayMalformedTest, CommentMarkerOnlyAtTheStartOfALine) {
  // `#` starts a comment only as the first non-blank character; a trailing one is a 4th field.
  const ReplayResult r = Replay(FixedWindow(5, kSecondUs), "0 a # note\n");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "line 1: too many fields (expected: T_MS KEY [COST])\n");
}

}  // namespace
}  // namespace sluice::cli
