// The engine's spans (engine/decision_trace.h): none unless the calling thread works for a span;
// with one, "decide" below it, with the domain, the limits, the verdict, the denying limit and
// (only when asked) the descriptors, and a backend call's below that when the backend does not
// answer inline (the memory store makes none); a failing backend's span carries its error.

#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_testing.h"
#include "trace/tracer.h"

namespace sluice::engine::test {
namespace {

constexpr char kTracedRules[] = R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, name: per-user}
)";

// The attribute `key` of `span`, or nullopt.
std::optional<trace::wire::AttributeValue> AttributeOf(const trace::SpanData& span,
                                                       std::string_view key) {
  const auto attributes = trace::wire::ReadAttributes(span.attributes);
  EXPECT_TRUE(attributes.has_value()) << "the span's attributes are not well formed";
  for (const trace::wire::Attribute& a :
       attributes.value_or(std::vector<trace::wire::Attribute>{})) {
    if (a.key == key) return a.value;
  }
  return std::nullopt;
}

std::string StringOf(const trace::SpanData& span, std::string_view key) {
  const std::optional<trace::wire::AttributeValue> value = AttributeOf(span, key);
  return !value ? "<none>" : std::get<std::string>(*value);
}

class EngineTraceTest : public EngineTest {
 protected:
  // Checks `user` as a request traced by a span of its own; returns the spans it ended
  // (request's last).
  std::vector<trace::SpanData> TracedCheck(trace::Tracer& tracer, const std::string& user,
                                           Response* response) {
    {
      std::shared_ptr<trace::Span> request =
          tracer.StartRequest("POST /v1/check", trace::SpanKind::kServer, "", "");
      trace::CurrentSpan scope(request.get());
      *response = Check1("api", {{"user", user}});
    }
    std::vector<trace::SpanData> spans;
    tracer.Take(spans, 0, 100, absl::ZeroDuration());
    return spans;
  }
};

TEST_F(EngineTraceTest, NoSpanIsMadeWhenTheCallerWorksForNone) {
  Load(kTracedRules);
  trace::Tracer tracer({}, &clock_);
  EXPECT_TRUE(Check1("api", {{"user", "a"}}).allowed);
  EXPECT_EQ(tracer.ended(), 0u);
  EXPECT_EQ(trace::CurrentSpan::Get(), nullptr);
}

TEST_F(EngineTraceTest, ADecisionIsASpanBelowTheRequest) {
  Load(kTracedRules);
  trace::Tracer tracer({}, &clock_);
  Response response;
  std::vector<trace::SpanData> spans = TracedCheck(tracer, "alice", &response);
  ASSERT_TRUE(response.allowed);
  ASSERT_EQ(spans.size(), 2u);  // no backend call's: the memory store answers inline
  const trace::SpanData& decide = spans[0];
  const trace::SpanData& request = spans[1];
  EXPECT_EQ(request.name, "POST /v1/check");
  EXPECT_EQ(decide.name, "decide");
  EXPECT_EQ(decide.parent_span_id, request.span_id);
  EXPECT_EQ(decide.trace_id, request.trace_id);
  EXPECT_EQ(StringOf(decide, "sluice.domain"), "api");
  EXPECT_EQ(StringOf(decide, "sluice.verdict"), "allowed");
  EXPECT_EQ(std::get<std::vector<std::string>>(*AttributeOf(decide, "sluice.limits")),
            std::vector<std::string>{"per-user"});
  EXPECT_FALSE(AttributeOf(decide, "sluice.denied_by").has_value());
  EXPECT_FALSE(AttributeOf(decide, "sluice.descriptors").has_value());  // keys stay out by default
  EXPECT_FALSE(decide.error);

  // The second request of the minute is denied, by per-user.
  spans = TracedCheck(tracer, "alice", &response);
  ASSERT_FALSE(response.allowed);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(StringOf(spans[0], "sluice.verdict"), "denied");
  EXPECT_EQ(StringOf(spans[0], "sluice.denied_by"), "per-user");
}

TEST_F(EngineTraceTest, TheKeysAreRecordedOnlyWhenTheTracerIsToldTo) {
  Load(kTracedRules);
  trace::Tracer tracer({.record_keys = true}, &clock_);
  Response response;
  const std::vector<trace::SpanData> spans = TracedCheck(tracer, "bob", &response);
  ASSERT_EQ(spans.size(), 2u);
  const std::optional<trace::wire::AttributeValue> keys =
      AttributeOf(spans[0], "sluice.descriptors");
  ASSERT_TRUE(keys.has_value());
  EXPECT_EQ(std::get<std::vector<std::string>>(*keys), std::vector<std::string>{"user=bob"});
}

// What the decide span (and the JSON answers) call a limit: its name, else its rate.
TEST(LimitNameTest, AnUnnamedLimitIsCalledByItsRequestsPerWindow) {
  Limit limit;
  limit.requests = 100;
  limit.window_us = 1000000;
  EXPECT_EQ(LimitName("per-user", limit), "per-user");
  EXPECT_EQ(LimitName("", limit), "100-per-1s");
  limit.requests = UINT64_MAX;
  limit.window_us = int64_t{90} * 60 * 1000000;
  EXPECT_EQ(LimitName("", limit), "18446744073709551615-per-90m");
}

// Fails every decision, from a thread of its own.
class FailingRemote final : public backend::Backend {
 public:
  void Decide(std::span<const backend::Item>, int64_t, std::span<Decision>, Done done) override {
    std::thread([done = std::move(done)] {
      backend::Outcome outcome;
      outcome.status = absl::UnavailableError("redis 127.0.0.1:1: connection refused");
      done(outcome);
    }).detach();
  }
  void Refund(std::span<const backend::Item>, int64_t, int64_t, RefundDone done) override {
    done(absl::OkStatus());
  }
  void Reset(std::span<const backend::Item>, ResetDone done) override { done(size_t{0}); }
  std::string_view name() const override { return "redis"; }
};

TEST_F(EngineTraceTest, AFailingBackendsSpanCarriesItsErrorOnTheAsynchronousPath) {
  Load(kTracedRules);
  FailingRemote remote;
  Engine engine(&remote);
  trace::Tracer tracer({}, &clock_);
  std::promise<Response> answered;
  {
    std::shared_ptr<trace::Span> request =
        tracer.StartRequest("ShouldRateLimit", trace::SpanKind::kServer, "", "");
    trace::CurrentSpan scope(request.get());
    engine.CheckAllAsync(config_, {Req("api", {Desc({{"user", "carol"}})})}, clock_.NowMicros(),
                         [&answered](std::vector<Response> responses) {
                           answered.set_value(std::move(responses.front()));
                         });
  }
  const Response response = answered.get_future().get();
  EXPECT_EQ(response.backend, BackendState::kFailedClosed);
  std::vector<trace::SpanData> spans;
  // The request's span ended when its scope did; the decision's two when the backend answered.
  for (int i = 0; i < 100 && spans.size() < 3; ++i) {
    tracer.Take(spans, 1, 100, absl::Milliseconds(100));
  }
  ASSERT_EQ(spans.size(), 3u);
  const trace::SpanData* backend = nullptr;
  const trace::SpanData* decide = nullptr;
  for (const trace::SpanData& s : spans) {
    if (s.name == "redis") backend = &s;
    if (s.name == "decide") decide = &s;
  }
  ASSERT_NE(backend, nullptr);
  ASSERT_NE(decide, nullptr);
  EXPECT_TRUE(backend->error);
  EXPECT_EQ(backend->status_message, "redis 127.0.0.1:1: connection refused");
  EXPECT_EQ(backend->kind, trace::SpanKind::kClient);
  EXPECT_EQ(StringOf(*backend, "db.system"), "redis");
  EXPECT_EQ(StringOf(*decide, "sluice.backend_state"), "failed_closed");
  EXPECT_EQ(StringOf(*decide, "sluice.verdict"), "denied");
}

}  // namespace
}  // namespace sluice::engine::test
