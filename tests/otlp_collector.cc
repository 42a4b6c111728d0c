// An OTLP trace collector for the tests (tests/tracing_e2e.sh, bench/tracing.sh): gRPC
// (opentelemetry.proto.collector.trace.v1.TraceService/Export) and HTTP/protobuf (POST
// /v1/traces), decoded with the same .proto files sluice's exporter is built from
// (src/trace/otlp/proto), each span written to standard output as one JSON line:
//
//   {"via":"grpc","service":"sluice","instance":"...","trace_id":"<32 hex>","span_id":"<16 hex>",
//    "parent":"<16 hex or empty>","name":"decide","kind":1,"error":false,"status":"",
//    "start":<ns>,"end":<ns>,"attrs":{"sluice.domain":"api","sluice.limits":["per-user"],...}}
//
//   otlp_collector [--delay-ms N] [--http-status N] [--quiet 1|2]
//     prints "otlp_collector: grpc 127.0.0.1:P http 127.0.0.1:Q" once both listen (ports the
//     kernel picks); --delay-ms answers every export N ms late (a slow collector); --http-status
//     answers HTTP exports with N (e.g. 503: a collector that refuses) and writes none of them;
//     --quiet 1 writes no spans (a benchmark's collector: decoded, then dropped); --quiet 2 does
//       not decode them either over HTTP (the body is read and answered 200): the lightest
//       collector, for a benchmark on a machine whose cores it shares with what is measured.
// Stops on SIGTERM/SIGINT.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "util/hex.h"
#include "util/json_string.h"

namespace {

using ::opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
using ::opentelemetry::proto::collector::trace::v1::ExportTraceServiceResponse;
using ::opentelemetry::proto::collector::trace::v1::TraceService;
namespace common = ::opentelemetry::proto::common::v1;

int g_delay_ms = 0;
int g_http_status = 200;
int g_quiet = 0;
std::mutex g_out_mu;

void AppendValue(std::string* out, const common::AnyValue& value) {
  switch (value.value_case()) {
    case common::AnyValue::kStringValue:
      sluice::util::AppendJsonString(out, value.string_value());
      break;
    case common::AnyValue::kBoolValue:
      *out += value.bool_value() ? "true" : "false";
      break;
    case common::AnyValue::kIntValue:
      *out += std::to_string(value.int_value());
      break;
    case common::AnyValue::kDoubleValue:
      *out += std::to_string(value.double_value());
      break;
    case common::AnyValue::kArrayValue: {
      *out += '[';
      for (int i = 0; i < value.array_value().values_size(); ++i) {
        if (i > 0) *out += ',';
        AppendValue(out, value.array_value().values(i));
      }
      *out += ']';
      break;
    }
    default:
      *out += "null";
  }
}

std::string ResourceValue(const ::opentelemetry::proto::trace::v1::ResourceSpans& r,
                          std::string_view key) {
  for (const auto& kv : r.resource().attributes()) {
    if (kv.key() == key) return kv.value().string_value();
  }
  return "";
}

void Write(const ExportTraceServiceRequest& request, const char* via) {
  if (g_quiet) return;
  std::string lines;
  for (const auto& r : request.resource_spans()) {
    const std::string service = ResourceValue(r, "service.name");
    const std::string instance = ResourceValue(r, "service.instance.id");
    for (const auto& scope : r.scope_spans()) {
      for (const auto& span : scope.spans()) {
        std::string line = "{\"via\":\"";
        line += via;
        line += "\",\"service\":";
        sluice::util::AppendJsonString(&line, service);
        line += ",\"instance\":";
        sluice::util::AppendJsonString(&line, instance);
        line += ",\"trace_id\":\"" + sluice::util::Hex(span.trace_id()) + "\"";
        line += ",\"span_id\":\"" + sluice::util::Hex(span.span_id()) + "\"";
        line += ",\"parent\":\"" + sluice::util::Hex(span.parent_span_id()) + "\"";
        line += ",\"name\":";
        sluice::util::AppendJsonString(&line, span.name());
        line += ",\"kind\":" + std::to_string(span.kind());
        line += ",\"flags\":" + std::to_string(span.flags());
        line += ",\"trace_state\":";
        sluice::util::AppendJsonString(&line, span.trace_state());
        line += std::string(",\"error\":") + (span.status().code() == 2 ? "true" : "false");
        line += ",\"status\":";
        sluice::util::AppendJsonString(&line, span.status().message());
        line += ",\"start\":" + std::to_string(span.start_time_unix_nano());
        line += ",\"end\":" + std::to_string(span.end_time_unix_nano());
        line += ",\"attrs\":{";
        for (int i = 0; i < span.attributes_size(); ++i) {
          if (i > 0) line += ',';
          sluice::util::AppendJsonString(&line, span.attributes(i).key());
          line += ':';
          AppendValue(&line, span.attributes(i).value());
        }
        line += "}}\n";
        lines += line;
      }
    }
  }
  std::lock_guard<std::mutex> lock(g_out_mu);
  std::fwrite(lines.data(), 1, lines.size(), stdout);
  std::fflush(stdout);
}

void Delay() {
  if (g_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(g_delay_ms));
}

class GrpcCollector final : public TraceService::Service {
 public:
  ::grpc::Status Export(::grpc::ServerContext*, const ExportTraceServiceRequest* request,
                        ExportTraceServiceResponse*) override {
    Delay();
    Write(*request, "grpc");
    return ::grpc::Status::OK;
  }
};

namespace asio = boost::asio;
namespace http = boost::beast::http;

// One HTTP connection, keep-alive, until the client closes it.
void ServeHttp(asio::ip::tcp::socket socket) {
  boost::beast::flat_buffer buffer;
  boost::system::error_code error;
  for (;;) {
    http::request<http::string_body> request;
    http::read(socket, buffer, request, error);
    if (error) return;
    http::response<http::string_body> response;
    response.version(11);
    response.keep_alive(request.keep_alive());
    response.set(http::field::content_type, "application/x-protobuf");
    ExportTraceServiceRequest parsed;
    if (request.method() != http::verb::post || request.target() != "/v1/traces") {
      response.result(http::status::not_found);
    } else if (request[http::field::content_type] != "application/x-protobuf" ||
               (g_quiet < 2 && !parsed.ParseFromString(request.body()))) {
      response.result(http::status::bad_request);
    } else if (g_http_status != 200) {
      response.result(static_cast<http::status>(g_http_status));
    } else {
      Delay();
      Write(parsed, "http");
      response.result(http::status::ok);
      response.body() = ExportTraceServiceResponse().SerializeAsString();
    }
    response.prepare_payload();
    http::write(socket, response, error);
    if (error || !request.keep_alive()) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--delay-ms") == 0) {
      g_delay_ms = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--quiet") == 0) {
      g_quiet = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--http-status") == 0) {
      g_http_status = std::atoi(argv[i + 1]);
    } else {
      std::cerr << "otlp_collector: unknown option " << argv[i] << "\n";
      return 2;
    }
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // taken by sigwait below, in every thread

  GrpcCollector grpc_collector;
  int grpc_port = 0;
  ::grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", ::grpc::InsecureServerCredentials(), &grpc_port);
  builder.RegisterService(&grpc_collector);
  std::unique_ptr<::grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || grpc_port == 0) {
    std::cerr << "otlp_collector: gRPC did not start\n";
    return 1;
  }
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  const int http_port = acceptor.local_endpoint().port();
  std::thread([&acceptor] {
    for (;;) {
      boost::system::error_code error;
      asio::ip::tcp::socket socket = acceptor.accept(error);
      if (error) return;
      std::thread(ServeHttp, std::move(socket)).detach();
    }
  }).detach();
  {
    std::lock_guard<std::mutex> lock(g_out_mu);
    std::printf("otlp_collector: grpc 127.0.0.1:%d http 127.0.0.1:%d\n", grpc_port, http_port);
    std::fflush(stdout);
  }
  int signal = 0;
  sigwait(&stop, &signal);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  std::_Exit(0);  // the detached connection threads end with the process
}
