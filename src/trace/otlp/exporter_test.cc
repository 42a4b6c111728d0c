// Tests for trace/otlp/exporter.h: endpoints as OTEL_EXPORTER_OTLP_ENDPOINT writes them, the
// ExportTraceServiceRequest a batch becomes (decoded with the same messages a collector uses),
// and the exporter against an in-process gRPC collector: spans arrive in batches, and a
// collector that is down costs failed batches, not a hang.

#include "trace/otlp/exporter.h"

#include <grpcpp/grpcpp.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "tests/support/units.h"
#include "trace/wire.h"

namespace sluice::trace::otlp {
namespace {

using ::opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
using ::opentelemetry::proto::collector::trace::v1::ExportTraceServiceResponse;
using ::opentelemetry::proto::collector::trace::v1::TraceService;
using testing::kT0;

TEST(EndpointTest, HttpAppendsTheTracesPathAndGrpcTakesHostAndPort) {
  auto http = ParseEndpoint("http://collector:4318", Protocol::kHttp);
  ASSERT_TRUE(http.ok()) << http.status();
  EXPECT_EQ(http->host, "collector");
  EXPECT_EQ(http->port, "4318");
  EXPECT_EQ(http->path, "/v1/traces");
  auto with_path = ParseEndpoint("http://127.0.0.1:9000/otlp/", Protocol::kHttp);
  ASSERT_TRUE(with_path.ok());
  EXPECT_EQ(with_path->path, "/otlp/v1/traces");
  auto bare = ParseEndpoint("localhost:4317", Protocol::kGrpc);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->host, "localhost");
  EXPECT_FALSE(bare->tls);
  auto secure = ParseEndpoint("https://[::1]:4317", Protocol::kGrpc);
  ASSERT_TRUE(secure.ok());
  EXPECT_TRUE(secure->tls);
  EXPECT_EQ(secure->host, "::1");
  for (const char* bad :
       {"collector", "http://collector", "ftp://c:1", "c:0", "c:99999", ":4317"}) {
    EXPECT_FALSE(ParseEndpoint(bad, Protocol::kGrpc).ok()) << bad;
  }
  EXPECT_FALSE(ParseEndpoint("https://c:4318", Protocol::kHttp).ok());
}

// Appends an attribute to `span` as Span::Set does.
template <typename T>
void Add(SpanData& span, std::string_view key, T value) {
  wire::AppendAttribute(span.attributes, wire::kSpanAttributes, key, value);
}

SpanData ExampleSpan() {
  SpanData span;
  span.trace_id = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                   0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
  span.span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  span.parent_span_id = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
  span.remote_parent = true;
  span.trace_state = "congo=t61rcWkgMzE";
  span.name = "POST /v1/check";
  span.kind = SpanKind::kServer;
  span.start_unix_ns = kT0 * 1000;
  span.end_unix_ns = kT0 * 1000 + 250000;
  Add(span, "sluice.domain", std::string_view("api"));
  Add(span, "http.response.status_code", int64_t{429});
  Add(span, "sluice.allowed", false);
  const std::vector<std::string> limits = {"per-user", "100-per-1s"};
  Add(span, "sluice.limits", std::span<const std::string>(limits));
  Add(span, "x.negative", int64_t{-5});
  Add(span, "x.double", 2.5);
  span.error = true;
  span.status_message = "denied";
  return span;
}

TEST(EncodeTest, ASpanBecomesOtlpsMessageFieldForField) {
  const SpanData span = ExampleSpan();
  const std::string bytes = EncodeRequest(
      std::span(&span, 1),
      {.service_name = "sluice-test", .service_namespace = "edge", .service_instance_id = "i-1"});
  ExportTraceServiceRequest request;
  ASSERT_TRUE(request.ParseFromString(bytes));
  ASSERT_EQ(request.resource_spans_size(), 1);
  const auto& resource = request.resource_spans(0).resource();
  std::map<std::string, std::string> attributes;
  for (const auto& kv : resource.attributes()) attributes[kv.key()] = kv.value().string_value();
  EXPECT_EQ(attributes["service.name"], "sluice-test");
  EXPECT_EQ(attributes["service.namespace"], "edge");
  EXPECT_EQ(attributes["service.instance.id"], "i-1");
  ASSERT_EQ(request.resource_spans(0).scope_spans_size(), 1);
  const auto& scope = request.resource_spans(0).scope_spans(0);
  EXPECT_EQ(scope.scope().name(), "sluice");
  ASSERT_EQ(scope.spans_size(), 1);
  const auto& out = scope.spans(0);
  EXPECT_EQ(out.trace_id(), std::string(span.trace_id.begin(), span.trace_id.end()));
  EXPECT_EQ(out.span_id(), std::string(span.span_id.begin(), span.span_id.end()));
  EXPECT_EQ(out.parent_span_id(),
            std::string(span.parent_span_id.begin(), span.parent_span_id.end()));
  EXPECT_EQ(out.trace_state(), "congo=t61rcWkgMzE");
  EXPECT_EQ(out.flags(), 0x301u);  // sampled; the parent is known to be remote
  EXPECT_EQ(out.name(), "POST /v1/check");
  EXPECT_EQ(out.kind(), 2);  // SPAN_KIND_SERVER
  EXPECT_EQ(out.start_time_unix_nano(), static_cast<uint64_t>(kT0) * 1000);
  EXPECT_EQ(out.end_time_unix_nano() - out.start_time_unix_nano(), 250000u);
  ASSERT_EQ(out.attributes_size(), 6);
  EXPECT_EQ(out.attributes(4).value().int_value(), -5);
  EXPECT_EQ(out.attributes(5).value().double_value(), 2.5);
  EXPECT_EQ(out.attributes(0).value().string_value(), "api");
  EXPECT_EQ(out.attributes(1).value().int_value(), 429);
  EXPECT_FALSE(out.attributes(2).value().bool_value());
  EXPECT_TRUE(out.attributes(2).value().has_bool_value());
  ASSERT_EQ(out.attributes(3).value().array_value().values_size(), 2);
  EXPECT_EQ(out.attributes(3).value().array_value().values(1).string_value(), "100-per-1s");
  EXPECT_EQ(out.status().code(), 2);  // STATUS_CODE_ERROR
  EXPECT_EQ(out.status().message(), "denied");
  // Lengths past one varint byte (a long name, an attribute of 300 bytes, a key of 130, a list
  // of 40 items), several spans, a namespace and a version in the resource.
  SpanData long_one = ExampleSpan();
  long_one.name = std::string(200, 'n');
  Add(long_one, "x.long", std::string_view(std::string(300, 'v')));
  const std::string long_key(130, 'k');
  Add(long_one, long_key, std::numeric_limits<int64_t>::min());
  const std::vector<std::string> many(40, "ten bytes!");
  Add(long_one, "x.many", std::span<const std::string>(many));
  const std::vector<SpanData> three = {ExampleSpan(), long_one, ExampleSpan()};
  ExportTraceServiceRequest several;
  ASSERT_TRUE(several.ParseFromString(EncodeRequest(
      std::span(three.data(), three.size()), {.service_name = "s", .service_version = "1.2"})));
  const auto& spans = several.resource_spans(0).scope_spans(0).spans();
  ASSERT_EQ(spans.size(), 3);
  EXPECT_EQ(spans[1].name(), std::string(200, 'n'));
  ASSERT_EQ(spans[1].attributes_size(), 9);
  EXPECT_EQ(spans[1].attributes(6).value().string_value(), std::string(300, 'v'));
  EXPECT_EQ(spans[1].attributes(7).key(), long_key);
  EXPECT_EQ(spans[1].attributes(7).value().int_value(), std::numeric_limits<int64_t>::min());
  ASSERT_EQ(spans[1].attributes(8).value().array_value().values_size(), 40);
  EXPECT_EQ(spans[1].attributes(8).value().array_value().values(39).string_value(), "ten bytes!");
  EXPECT_EQ(spans[2].status().message(), "denied");
  EXPECT_EQ(several.resource_spans(0).scope_spans(0).scope().version(), "1.2");
  // A root span has no parent id at all.
  SpanData root = ExampleSpan();
  root.parent_span_id = {};
  root.remote_parent = false;
  ExportTraceServiceRequest again;
  ASSERT_TRUE(again.ParseFromString(EncodeRequest(std::span(&root, 1), {})));
  EXPECT_TRUE(again.resource_spans(0).scope_spans(0).spans(0).parent_span_id().empty());
  // Strings of every length from 0 to 40 (short ones are copied by fixed-size pieces), as
  // attribute values, and as the span's name.
  SpanData lengths = ExampleSpan();
  lengths.attributes.clear();
  std::vector<std::string> values;
  for (size_t n = 0; n <= 40; ++n) {
    std::string value;
    for (size_t i = 0; i < n; ++i) value += static_cast<char>('a' + (n + i) % 26);
    values.push_back(value);
    Add(lengths, "x.length", std::string_view(value));
  }
  lengths.name = values[13];
  ExportTraceServiceRequest by_length;
  ASSERT_TRUE(by_length.ParseFromString(EncodeRequest(std::span(&lengths, 1), {})));
  const auto& decoded = by_length.resource_spans(0).scope_spans(0).spans(0);
  EXPECT_EQ(decoded.name(), values[13]);
  ASSERT_EQ(decoded.attributes_size(), 41);
  for (size_t n = 0; n <= 40; ++n) {
    EXPECT_EQ(decoded.attributes(static_cast<int>(n)).value().string_value(), values[n]) << n;
    EXPECT_EQ(decoded.attributes(static_cast<int>(n)).key(), "x.length");
  }
  EXPECT_EQ(again.resource_spans(0).scope_spans(0).spans(0).flags(), 0x101u);
}

// A collector in this process: keeps what it receives.
class Collector final : public TraceService::Service {
 public:
  ::grpc::Status Export(::grpc::ServerContext*, const ExportTraceServiceRequest* request,
                        ExportTraceServiceResponse*) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    size_t spans = 0;
    for (const auto& r : request->resource_spans()) {
      for (const auto& s : r.scope_spans()) {
        for (const auto& span : s.spans()) names_.push_back(span.name()), ++spans;
      }
    }
    largest_ = std::max(largest_, spans);
    return ::grpc::Status::OK;
  }
  size_t received() {
    absl::MutexLock lock(&mu_);
    return names_.size();
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  size_t largest() {
    absl::MutexLock lock(&mu_);
    return largest_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> names_;
  int calls_ = 0;
  size_t largest_ = 0;  // spans in one call
};

TEST(ExporterTest, SendsEverySpanToAGrpcCollectorInBatchesAndFlushesAtStop) {
  Collector collector;
  int port = 0;
  ::grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", ::grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&collector);
  std::unique_ptr<::grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  ManualClock clock(kT0);
  Tracer tracer({.queue_size = 10000}, &clock);
  Exporter exporter(&tracer, {.protocol = Protocol::kGrpc,
                              .endpoint = "127.0.0.1:" + std::to_string(port),
                              .interval_us = 3600000000,  // only full batches, and the last
                              .max_batch = 100});
  ASSERT_TRUE(exporter.Start().ok());
  for (int i = 0; i < 250; ++i) tracer.StartRequest("r", SpanKind::kServer, "", "")->End();
  exporter.Stop();  // sends the last 50
  EXPECT_EQ(collector.received(), 250u);
  EXPECT_GE(collector.calls(), 3);  // batches of at most 100
  EXPECT_LE(collector.largest(), 100u);
  EXPECT_EQ(exporter.exported(), 250u);
  EXPECT_EQ(exporter.failed(), 0u);
  EXPECT_EQ(tracer.dropped(), 0u);
  server->Shutdown();
}

// Exports 30 spans to `endpoint` over `protocol`, in batches of 10, each call given 200 ms, and
// stops: within 10 s, with none exported and every span counted lost.
void ExpectEveryBatchLostInTime(Protocol protocol, const std::string& endpoint) {
  ManualClock clock(kT0);
  Tracer tracer({.queue_size = 100}, &clock);
  Exporter exporter(&tracer, {.protocol = protocol,
                              .endpoint = endpoint,
                              .interval_us = 1000,
                              .max_batch = 10,
                              .timeout_us = 200000});
  ASSERT_TRUE(exporter.Start().ok());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 30; ++i) tracer.StartRequest("r", SpanKind::kServer, "", "")->End();
  exporter.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(exporter.exported(), 0u);
  EXPECT_EQ(exporter.failed() + tracer.dropped(), 30u);
}

TEST(ExporterTest, ACollectorThatIsDownCostsFailedBatchesNotAHang) {
  // A port nothing listens on: found by binding and closing a server.
  int port = 0;
  {
    Collector unused;
    ::grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", ::grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&unused);
    std::unique_ptr<::grpc::Server> server = builder.BuildAndStart();
    server->Shutdown();
  }
  for (const Protocol protocol : {Protocol::kGrpc, Protocol::kHttp}) {
    ExpectEveryBatchLostInTime(protocol, "http://127.0.0.1:" + std::to_string(port));
  }
}

// A collector that takes the connection and never answers (the kernel accepts it into the
// listener's backlog; nothing reads): each export call ends at its timeout, and Stop gives up on
// the rest after the first failure there.
TEST(ExporterTest, AnHttpCollectorThatNeverAnswersCostsTimeoutsNotAHang) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor silent(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  ExpectEveryBatchLostInTime(Protocol::kHttp,
                             "http://127.0.0.1:" + std::to_string(silent.local_endpoint().port()));
}

}  // namespace
}  // namespace sluice::trace::otlp
