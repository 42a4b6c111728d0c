// Tests for trace/tracer.h: parent-based ratio sampling (OpenTelemetry's TraceIdRatioBased rule
// on the trace id's last 8 bytes), request and child spans from a caller's traceparent, their
// times from the injected clock, the bounded queue and its drops, the current span's scopes.

#include "trace/tracer.h"

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/units.h"
#include "util/trace_context.h"

namespace sluice::trace {
namespace {

using testing::kMs;
using testing::kT0;

// The W3C recommendation's example traceparent, sampled and not.
constexpr char kSampledParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr char kUnsampledParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

// A span's attributes, read back from their wire form (every one well formed).
std::vector<wire::Attribute> Decode(std::string_view bytes) {
  std::optional<std::vector<wire::Attribute>> attributes = wire::ReadAttributes(bytes);
  EXPECT_TRUE(attributes.has_value());
  return attributes.value_or(std::vector<wire::Attribute>{});
}

// A trace id whose last 8 bytes are `low` (big endian).
TraceId IdWithLow(uint64_t low) {
  TraceId id{};
  id[0] = 1;
  for (int i = 15; i >= 8; --i, low >>= 8) id[static_cast<size_t>(i)] = static_cast<uint8_t>(low);
  return id;
}

TEST(SamplingTest, TheCallersFlagDecidesWhateverTheRate) {
  const auto sampled = util::ParseTraceParent(kSampledParent);
  const auto unsampled = util::ParseTraceParent(kUnsampledParent);
  ASSERT_TRUE(sampled && unsampled);
  EXPECT_TRUE(Sampled(sampled, sampled->trace_id, 0.0));
  EXPECT_FALSE(Sampled(unsampled, unsampled->trace_id, 1.0));
}

TEST(SamplingTest, ANewTraceIsSampledByItsIdBelowRateTimesTwoToThe63) {
  // Rate 0.5: the bound is 2^62; the id's low 64 bits shifted right by one are compared to it.
  const uint64_t bound = uint64_t{1} << 62;
  EXPECT_TRUE(Sampled(std::nullopt, IdWithLow(((bound - 1) << 1) | 1), 0.5));
  EXPECT_FALSE(Sampled(std::nullopt, IdWithLow(bound << 1), 0.5));
  EXPECT_TRUE(Sampled(std::nullopt, IdWithLow(~uint64_t{0}), 1.0));
  EXPECT_FALSE(Sampled(std::nullopt, IdWithLow(0), 0.0));
  // Over random ids the share sampled is the rate.
  int sampled = 0;
  for (int i = 0; i < 20000; ++i) sampled += Sampled(std::nullopt, Tracer::NewTraceId(), 0.1);
  EXPECT_NEAR(sampled / 20000.0, 0.1, 0.015);
}

TEST(TracerTest, ARequestWithAValidParentContinuesItsTrace) {
  ManualClock clock(kT0);
  Tracer tracer({.sampling_rate = 0.0}, &clock);
  std::shared_ptr<Span> span =
      tracer.StartRequest("POST /v1/check", SpanKind::kServer, kSampledParent, "congo=t61rcWkgMzE");
  ASSERT_NE(span, nullptr);  // the caller sampled it, though this tracer samples none itself
  const auto parent = util::ParseTraceParent(kSampledParent);
  EXPECT_EQ(span->trace_id(), parent->trace_id);
  EXPECT_EQ(span->parent_span_id(), parent->parent_id);
  EXPECT_NE(span->span_id(), parent->parent_id);
  EXPECT_EQ(span->trace_state(), "congo=t61rcWkgMzE");
  // Its callee's parent is this span, in the same trace.
  const auto callee = util::ParseTraceParent(span->TraceParent());
  ASSERT_TRUE(callee.has_value());
  EXPECT_EQ(callee->trace_id, parent->trace_id);
  EXPECT_EQ(callee->parent_id, span->span_id());
  EXPECT_TRUE(callee->sampled());

  EXPECT_EQ(tracer.StartRequest("x", SpanKind::kServer, kUnsampledParent, ""), nullptr);
  // An invalid traceparent is no parent: a new trace, at this tracer's rate (none here).
  EXPECT_EQ(tracer.StartRequest("x", SpanKind::kServer, "00-zz-01", ""), nullptr);
}

TEST(TracerTest, AnInvalidParentStartsANewTraceAndAnInvalidStateIsDropped) {
  ManualClock clock(kT0);
  Tracer tracer({.sampling_rate = 1.0}, &clock);
  std::shared_ptr<Span> span = tracer.StartRequest(
      "r", SpanKind::kServer, "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "a=1");
  ASSERT_NE(span, nullptr);
  EXPECT_EQ(span->parent_span_id(), SpanId{});
  EXPECT_EQ(span->trace_state(), "");  // a state belongs to a parent
  std::shared_ptr<Span> with_bad_state =
      tracer.StartRequest("r", SpanKind::kServer, kSampledParent, "a=1,BAD KEY=2");
  ASSERT_NE(with_bad_state, nullptr);
  EXPECT_EQ(with_bad_state->trace_state(), "");
}

TEST(TracerTest, SpansTakeTheirTimesFromTheClockAndEndOnce) {
  ManualClock clock(kT0);
  Tracer tracer({}, &clock);
  {
    std::shared_ptr<Span> request = tracer.StartRequest("request", SpanKind::kServer, "", "");
    ASSERT_NE(request, nullptr);
    clock.Advance(2 * kMs);
    std::shared_ptr<Span> child = request->StartChild("decide", SpanKind::kInternal);
    child->Set("sluice.domain", std::string("api"));
    clock.Advance(3 * kMs);
    child->End();
    child->End();  // nothing more
    child.reset();
    clock.Advance(1 * kMs);
    request->SetError("backend unavailable");
  }  // the request's last owner lets go: it ends
  std::vector<SpanData> spans;
  EXPECT_EQ(tracer.Take(spans, 0, 10, absl::ZeroDuration()), 2u);
  ASSERT_EQ(spans.size(), 2u);
  const SpanData& child = spans[0];
  const SpanData& request = spans[1];
  EXPECT_EQ(child.name, "decide");
  EXPECT_EQ(child.start_unix_ns, (kT0 + 2 * kMs) * 1000);
  EXPECT_EQ(child.end_unix_ns, (kT0 + 5 * kMs) * 1000);
  EXPECT_EQ(child.trace_id, request.trace_id);
  EXPECT_EQ(child.parent_span_id, request.span_id);
  const std::vector<wire::Attribute> attributes = Decode(child.attributes);
  ASSERT_EQ(attributes.size(), 1u);
  EXPECT_EQ(attributes[0].key, "sluice.domain");
  EXPECT_EQ(std::get<std::string>(attributes[0].value), "api");
  EXPECT_EQ(request.start_unix_ns, kT0 * 1000);
  EXPECT_EQ(request.end_unix_ns, (kT0 + 6 * kMs) * 1000);
  EXPECT_EQ(request.parent_span_id, SpanId{});
  EXPECT_TRUE(request.error);
  EXPECT_EQ(request.status_message, "backend unavailable");
  EXPECT_EQ(tracer.ended(), 2u);
}

TEST(TracerTest, AFullQueueDropsAndCountsInsteadOfWaiting) {
  ManualClock clock(kT0);
  Tracer tracer({.queue_size = 3}, &clock);
  for (int i = 0; i < 5; ++i) tracer.StartRequest("r", SpanKind::kServer, "", "")->End();
  EXPECT_EQ(tracer.ended(), 5u);
  EXPECT_EQ(tracer.dropped(), 2u);
  EXPECT_EQ(tracer.queued(), 3u);
  std::vector<SpanData> spans;
  EXPECT_EQ(tracer.Take(spans, 1, 2, absl::ZeroDuration()), 2u);  // at most `max`
  EXPECT_EQ(tracer.queued(), 1u);
  tracer.StartRequest("r", SpanKind::kServer, "", "")->End();  // room again
  EXPECT_EQ(tracer.dropped(), 2u);
}

TEST(TracerTest, TakeWaitsForEnoughSpansOrTheTimeoutOrShutdown) {
  ManualClock clock(kT0);
  Tracer tracer({}, &clock);
  std::vector<SpanData> spans;
  // Nothing queued: it waits out its timeout and takes nothing.
  EXPECT_EQ(tracer.Take(spans, 1, 10, absl::Milliseconds(20)), 0u);
  std::thread producer([&tracer] {
    for (int i = 0; i < 3; ++i) tracer.StartRequest("r", SpanKind::kServer, "", "")->End();
  });
  // Woken by the third span, long before its timeout (a lost wake-up would wait it out).
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(tracer.Take(spans, 3, 10, absl::Seconds(30)), 3u);
  producer.join();
  std::thread stopper([&tracer] { tracer.Shutdown(); });
  EXPECT_EQ(tracer.Take(spans, 5, 10, absl::Seconds(30)), 0u);  // woken by the shutdown
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(tracer.shut_down());
  tracer.StartRequest("r", SpanKind::kServer, "", "")->End();  // after shutdown: dropped
  EXPECT_EQ(tracer.dropped(), 1u);
}

// The exporter hands sent spans back (Recycle): their attribute buffers are reused by new spans,
// which start with none of the old attributes, however many buffers were recycled.
TEST(TracerTest, RecycledAttributeBuffersComeBackEmpty) {
  ManualClock clock(kT0);
  Tracer tracer({}, &clock);
  std::vector<SpanData> spans;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 50; ++i) {
      std::shared_ptr<Span> span = tracer.StartRequest("r", SpanKind::kServer, "", "");
      span->Set("round", int64_t{round});
      span->Set("i", int64_t{i});
      if (i % 2 == 0) span->Set("even", true);
      span->End();
    }
    ASSERT_EQ(tracer.Take(spans, 50, 100, absl::ZeroDuration()), 50u);
    for (int i = 0; i < 50; ++i) {
      const std::vector<wire::Attribute> attributes =
          Decode(spans[static_cast<size_t>(i)].attributes);
      ASSERT_EQ(attributes.size(), i % 2 == 0 ? 3u : 2u) << "round " << round << ", span " << i;
      EXPECT_EQ(attributes[0].key, "round");
      EXPECT_EQ(std::get<int64_t>(attributes[0].value), round);
      EXPECT_EQ(std::get<int64_t>(attributes[1].value), i);
    }
    tracer.Recycle(spans);
    EXPECT_TRUE(spans.empty());
  }
}

TEST(WireBufferTest, GrowsKeepingWhatWasWrittenAndClearsKeepingItsRoom) {
  wire::Buffer buffer;
  std::string expected;
  for (int i = 0; i < 300; ++i) {  // through several growths
    const std::string piece = std::to_string(i) + ",";
    wire::CopyBytes(buffer.Extend(piece.size()), piece.data(), piece.size());
    expected += piece;
  }
  EXPECT_EQ(buffer.view(), expected);
  wire::Buffer copy = buffer;  // a copy of its own
  const size_t room = buffer.capacity();
  buffer.clear();
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.capacity(), room);
  EXPECT_EQ(copy.view(), expected);
  wire::Buffer moved = std::move(copy);
  EXPECT_EQ(moved.view(), expected);
  EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): what a move leaves is defined
}

// Every kind of value, read back as it was set; bytes that are not attributes are refused.
TEST(WireTest, AttributesReadBackAsTheyWereWrittenAndGarbageIsRefused) {
  wire::Buffer buffer;
  const std::vector<std::string> list = {"a", std::string(200, 'b'), ""};
  wire::AppendAttribute(buffer, wire::kSpanAttributes, "s", std::string_view("text"));
  wire::AppendAttribute(buffer, wire::kSpanAttributes, "i", int64_t{-7});
  wire::AppendAttribute(buffer, wire::kSpanAttributes, "b", true);
  wire::AppendAttribute(buffer, wire::kSpanAttributes, "d", -0.25);
  wire::AppendAttribute(buffer, wire::kSpanAttributes, "l", std::span<const std::string>(list));
  const std::vector<wire::Attribute> read = Decode(buffer);
  ASSERT_EQ(read.size(), 5u);
  EXPECT_EQ(std::get<std::string>(read[0].value), "text");
  EXPECT_EQ(std::get<int64_t>(read[1].value), -7);
  EXPECT_TRUE(std::get<bool>(read[2].value));
  EXPECT_EQ(std::get<double>(read[3].value), -0.25);
  EXPECT_EQ(std::get<std::vector<std::string>>(read[4].value), list);
  EXPECT_EQ(read[4].key, "l");
  const std::string_view whole = buffer.view();
  EXPECT_FALSE(wire::ReadAttributes(whole.substr(0, whole.size() - 1)).has_value());  // cut short
  EXPECT_FALSE(wire::ReadAttributes("\x4a\x01").has_value());  // a field that runs past the end
}

TEST(CurrentSpanTest, ScopesNestAndRestoreTheOuterSpan) {
  ManualClock clock(kT0);
  Tracer tracer({}, &clock);
  EXPECT_EQ(CurrentSpan::Get(), nullptr);
  std::shared_ptr<Span> outer = tracer.StartRequest("outer", SpanKind::kServer, "", "");
  std::shared_ptr<Span> inner = outer->StartChild("inner", SpanKind::kInternal);
  {
    CurrentSpan a(outer.get());
    EXPECT_EQ(CurrentSpan::Get(), outer.get());
    {
      CurrentSpan b(inner.get());
      EXPECT_EQ(CurrentSpan::Get(), inner.get());
      std::thread other([] { EXPECT_EQ(CurrentSpan::Get(), nullptr); });  // per thread
      other.join();
    }
    EXPECT_EQ(CurrentSpan::Get(), outer.get());
  }
  EXPECT_EQ(CurrentSpan::Get(), nullptr);
}

}  // namespace
}  // namespace sluice::trace
