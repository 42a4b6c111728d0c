// The OTLP exporter of a Tracer's spans: a thread of its own takes the ended spans in batches
// (up to max_batch at once, at least every `interval`) and sends each batch to a collector as an
// ExportTraceServiceRequest, over gRPC (opentelemetry.proto.collector.trace.v1.TraceService/
// Export) or HTTP/protobuf (POST <endpoint>/v1/traces, application/x-protobuf), from sluice's
// own copies of the opentelemetry-proto files (proto/). No OpenTelemetry SDK: Debian packages
// none for C++.
//
// A batch the collector refuses, or that is not answered within `timeout`, is dropped and counted
// (failed()): spans are not retried, and the queue in front (Tracer) stays bounded whatever the
// collector does. Decisions never wait on the exporter.
//
// Thread safety: Start and Stop from one thread; the counters from any.

#ifndef SLUICE_TRACE_OTLP_EXPORTER_H_
#define SLUICE_TRACE_OTLP_EXPORTER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trace/tracer.h"

namespace sluice::trace::otlp {

enum class Protocol { kHttp, kGrpc };

// An endpoint as OTEL_EXPORTER_OTLP_ENDPOINT writes it: `http://HOST:PORT[/PATH]`,
// `https://...` (gRPC only) or `HOST:PORT`.
struct Endpoint {
  bool tls = false;
  std::string host;
  std::string port;
  std::string path;  // HTTP: where the traces are posted (PATH + "/v1/traces")
};
absl::StatusOr<Endpoint> ParseEndpoint(std::string_view text, Protocol protocol);

struct ExporterOptions {
  Protocol protocol = Protocol::kHttp;
  std::string endpoint = "http://127.0.0.1:4318";
  // The resource: service.name, service.namespace (empty: left out) and service.instance.id
  // (empty: a random UUID, made at start, as envoyproxy/ratelimit makes one).
  std::string service_name = "sluice";
  std::string service_namespace{};
  std::string service_instance_id{};
  std::string service_version{};  // empty: left out
  int64_t interval_us = 5000000;  // OpenTelemetry's batch span processor's default delay
  size_t max_batch = 512;
  int64_t timeout_us = 10000000;  // one export call
};

// The request one batch is sent as (exposed for the tests).
std::string EncodeRequest(std::span<const SpanData> spans, const ExporterOptions& options);

class Exporter {
 public:
  // Exports `tracer`'s spans (not owned; it must outlive the exporter).
  Exporter(Tracer* tracer, ExporterOptions options);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // Checks the options and starts the thread; an error names what is wrong.
  absl::Status Start();
  // Shuts the tracer's queue, sends what is left in it (each batch within `timeout`; after one
  // that fails the rest are counted failed, unsent) and joins.
  void Stop();

  // Spans the collector took, and those lost with a batch it refused or did not answer.
  uint64_t exported() const { return exported_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }
  const std::string& service_instance_id() const { return options_.service_instance_id; }

  class Transport;  // gRPC or HTTP (exporter.cc)

 private:
  void Run();

  Tracer* tracer_;
  ExporterOptions options_;
  std::unique_ptr<Transport> transport_;
  std::thread thread_;
  std::atomic<uint64_t> exported_{0};
  std::atomic<uint64_t> failed_{0};
};

}  // namespace sluice::trace::otlp

#endif  // SLUICE_TRACE_OTLP_EXPORTER_H_
