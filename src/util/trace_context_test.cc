// Tests for util/trace_context.h: traceparent and tracestate as the W3C Trace Context
// recommendation defines them (its example values; each rule a receiver must apply).

#include "util/trace_context.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::util {
namespace {

constexpr char kExample[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceParentTest, TheRecommendationsExampleParsesAndFormatsBackTheSame) {
  const auto parent = ParseTraceParent(kExample);
  ASSERT_TRUE(parent.has_value());
  EXPECT_EQ(parent->trace_id[0], 0x4b);
  EXPECT_EQ(parent->trace_id[15], 0x36);
  EXPECT_EQ(parent->parent_id[0], 0x00);
  EXPECT_EQ(parent->parent_id[7], 0xb7);
  EXPECT_TRUE(parent->sampled());
  EXPECT_EQ(FormatTraceParent(*parent), kExample);
  const auto unsampled =
      ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled());
  // Flags are a bit field: other bits may be set beside "sampled".
  const auto more = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09");
  ASSERT_TRUE(more.has_value());
  EXPECT_TRUE(more->sampled());
  EXPECT_EQ(more->flags, 0x09);
}

TEST(TraceParentTest, WhatIsNotATraceParentIsRefused) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",      // no flags
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",   // uppercase
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // all-zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // all-zero parent id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // 00 is exactly 55
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // separator
           "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",   // misplaced dash
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",   // not hex
           "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version not hex
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // later version, no '-'
       }) {
    EXPECT_FALSE(ParseTraceParent(bad).has_value()) << bad;
  }
}

TEST(TraceParentTest, ALaterVersionIsReadByVersion00sLayout) {
  // A version this code does not know: its first 55 characters as version 00's, and whatever
  // it adds after a '-' ignored. Written back as version 00.
  const auto parent =
      ParseTraceParent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future");
  ASSERT_TRUE(parent.has_value());
  EXPECT_EQ(FormatTraceParent(*parent), kExample);
  EXPECT_TRUE(ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
}

TEST(TraceStateTest, ValidMembersPassOnJoinedWithoutBlanksOrEmptyMembers) {
  EXPECT_EQ(ParseTraceState("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
  EXPECT_EQ(ParseTraceState(" rojo=1 ,\t, congo=2,"), "rojo=1,congo=2");  // (blanks: OWS)
  EXPECT_EQ(ParseTraceState(""), "");
  // Multi-tenant keys, and the characters keys and values may hold.
  EXPECT_EQ(ParseTraceState("fw529a3039@dt=abc,0tenant@sys-1=a b!~"),
            "fw529a3039@dt=abc,0tenant@sys-1=a b!~");
  EXPECT_EQ(ParseTraceState("k_-*/9=v"), "k_-*/9=v");
  // 32 members are allowed.
  std::string many;
  for (int i = 0; i < 32; ++i) many += (i ? ",k" : "k") + std::to_string(i) + "=v";
  EXPECT_EQ(ParseTraceState(many), many);
}

TEST(TraceStateTest, AnInvalidMemberDiscardsTheWholeField) {
  for (const char* bad : {
           "rojo",                   // no '='
           "Rojo=1",                 // uppercase key
           "9rojo=1",                // a simple key starts with a letter
           "rojo=",                  // empty value
           "rojo=a,b",               // ',' would split it: "b" has no '='
           "rojo=a=b",               // '=' in the value
           "rojo=1,rojo=2",          // a key twice
           "t@=1", "@s=1", "t@S=1",  // multi-tenant keys' parts
           "t@abcdefghijklmno=1",    // a system id of 15
       }) {
    EXPECT_FALSE(ParseTraceState(bad).has_value()) << bad;
  }
  std::string many;
  for (int i = 0; i < 33; ++i) many += (i ? ",k" : "k") + std::to_string(i) + "=v";
  EXPECT_FALSE(ParseTraceState(many).has_value());
  EXPECT_FALSE(ParseTraceState("rojo=\x01").has_value());
  EXPECT_FALSE(ParseTraceState(std::string("k=") + std::string(257, 'v')).has_value());
  EXPECT_TRUE(ParseTraceState(std::string("k=") + std::string(256, 'v')).has_value());
}

}  // namespace
}  // namespace sluice::util
