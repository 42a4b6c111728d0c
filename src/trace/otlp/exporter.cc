#include "trace/otlp/exporter.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/strings/numbers.h"
#include "fmt/format.h"
#include "trace/wire.h"
#include "util/log.h"

namespace sluice::trace::otlp {

absl::StatusOr<Endpoint> ParseEndpoint(std::string_view text, Protocol protocol) {
  Endpoint endpoint;
  std::string_view rest = text;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
    endpoint.tls = true;
  } else if (rest.find("://") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        fmt::format("OTLP endpoint '{}': the scheme must be http:// or https://", text));
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  const size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        fmt::format("OTLP endpoint '{}': expected HOST:PORT (e.g. http://127.0.0.1:4318)", text));
  }
  endpoint.host = std::string(authority.substr(0, colon));
  if (endpoint.host.size() > 2 && endpoint.host.front() == '[' && endpoint.host.back() == ']') {
    endpoint.host = endpoint.host.substr(1, endpoint.host.size() - 2);
  }
  endpoint.port = std::string(authority.substr(colon + 1));
  int port = 0;
  if (!absl::SimpleAtoi(endpoint.port, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("OTLP endpoint '{}': '{}' is not a port", text, endpoint.port));
  }
  if (protocol == Protocol::kHttp) {
    if (endpoint.tls) {
      return absl::InvalidArgumentError(fmt::format(
          "OTLP endpoint '{}': https is supported with protocol grpc only; use http:// or grpc",
          text));
    }
    while (path.ends_with('/')) path.remove_suffix(1);
    endpoint.path = std::string(path) + "/v1/traces";
  }
  return endpoint;
}

namespace {

// OTLP's messages written straight to the protobuf wire format (varints, fixed-width numbers and
// length-delimited fields; field numbers from opentelemetry-proto, as in proto/): building the
// generated messages first cost more than the rest of a traced request. Each message's length is
// worked out before it is written, so that every byte is written once, in place; a span's
// attributes come written already (trace/wire.h). The exporter's tests parse the bytes with the
// generated messages.
// Where the next byte goes, in a buffer already as long as what is written (the lengths are
// worked out first): no growth. A write past the end (a length worked out wrong) writes nothing
// and marks the cursor: the batch is then not sent.
struct Cursor {
  char* p;
  char* end;
  bool overflowed = false;
  void append(const char* bytes, size_t n) {
    if (static_cast<size_t>(end - p) < n) {
      overflowed = true;
      return;
    }
    wire::CopyBytes(p, bytes, n);
    p += n;
  }
  void append(std::string_view bytes) { append(bytes.data(), bytes.size()); }
  // N bytes, N known when compiled: copied inline, not by a call to memcpy (ids, fixed numbers:
  // a dozen such copies a span).
  template <size_t N>
  ABSL_ATTRIBUTE_ALWAYS_INLINE void append(const char* bytes) {
    if (static_cast<size_t>(end - p) < N) {
      overflowed = true;
      return;
    }
    std::memcpy(p, bytes, N);
    p += N;
  }
};

using wire::FieldSize;
using wire::VarintSize;

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Varint(Cursor& out, uint64_t v) {
  if (out.end - out.p < 10 && static_cast<size_t>(out.end - out.p) < VarintSize(v)) {
    out.overflowed = true;
    return;
  }
  out.p = wire::PutVarint(out.p, v);
}
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Tag(Cursor& out, int field, int type) {
  Varint(out, static_cast<uint64_t>((field << 3) | type));  // (field 16, flags: two bytes)
}
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Header(Cursor& out, int field,
                                                size_t length) {  // a length-delimited field's head
  Tag(out, field, 2);
  Varint(out, length);
}
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Bytes(Cursor& out, int field, std::string_view bytes) {
  Header(out, field, bytes.size());
  out.append(bytes);
}
template <size_t N>
void Bytes(Cursor& out, int field, const std::array<uint8_t, N>& bytes) {
  Header(out, field, N);
  out.append<N>(reinterpret_cast<const char*>(bytes.data()));
}
// A fixed64 (Bytes 8) or fixed32 (Bytes 4) field, little endian.
template <size_t Bytes>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Fixed(Cursor& out, int field, uint64_t v) {
  Tag(out, field, Bytes == 8 ? 1 : 5);
  char little[Bytes];
  wire::PutFixed<Bytes>(little, v);
  out.append<Bytes>(little);
}

size_t StatusSize(const SpanData& s) {
  return (s.status_message.empty() ? 0 : FieldSize(s.status_message.size())) + 2;
}
// Span's body.
size_t SpanSize(const SpanData& s) {
  // ids, name, kind, start, end, and flags (field 16: a two-byte tag and four bytes)
  size_t n = FieldSize(16) + FieldSize(8) + FieldSize(s.name.size()) + 2 + 9 + 9 + 6;
  if (!s.trace_state.empty()) n += FieldSize(s.trace_state.size());
  if (s.parent_span_id != SpanId{}) n += FieldSize(8);
  n += s.attributes.size();  // (its fields written when they were set)
  if (s.error) n += FieldSize(StatusSize(s));
  return n;
}
// `size`: SpanSize(s).
void WriteSpan(Cursor& out, const SpanData& s, size_t size) {
  Header(out, 2, size);  // ScopeSpans.spans
  Bytes(out, 1, s.trace_id);
  Bytes(out, 2, s.span_id);
  if (!s.trace_state.empty()) Bytes(out, 3, s.trace_state);
  if (s.parent_span_id != SpanId{}) Bytes(out, 4, s.parent_span_id);
  Bytes(out, 5, s.name);
  Tag(out, 6, 0);
  Varint(out, static_cast<uint64_t>(s.kind));  // one byte: kinds are 1-3
  Fixed<8>(out, 7, static_cast<uint64_t>(s.start_unix_ns));
  Fixed<8>(out, 8, static_cast<uint64_t>(s.end_unix_ns));
  out.append(s.attributes.view());
  if (s.error) {
    Header(out, 15, StatusSize(s));  // Status
    if (!s.status_message.empty()) Bytes(out, 2, s.status_message);
    Tag(out, 3, 0);
    Varint(out, 2);  // STATUS_CODE_ERROR
  }
  // Bits 0-7 the W3C flags; bit 8: whether the parent is remote is known; bit 9: it is.
  Fixed<4>(out, 16, uint64_t{s.flags} | 0x100u | (s.remote_parent ? 0x200u : 0u));
}

class Encoder {
 public:
  // The resource and the scope are the same in every request of `options`: written here, once.
  explicit Encoder(const ExporterOptions& options) {
    wire::Buffer attributes;  // Resource's
    const auto add = [&attributes](std::string_view key, std::string_view value) {
      wire::AppendAttribute(attributes, wire::kResourceAttributes, key, value);
    };
    add("service.name", options.service_name);
    add("service.instance.id", options.service_instance_id);
    add("telemetry.sdk.name", "sluice");
    add("telemetry.sdk.language", "cpp");
    if (!options.service_namespace.empty()) add("service.namespace", options.service_namespace);
    if (!options.service_version.empty()) add("service.version", options.service_version);
    resource_.resize(FieldSize(attributes.size()));
    Cursor r{resource_.data(), resource_.data() + resource_.size()};
    Header(r, 1, attributes.size());  // ResourceSpans.resource
    r.append(attributes.view());
    // InstrumentationScope{name, version}
    const std::string_view version = options.service_version;
    const size_t scope_size = FieldSize(6) + (version.empty() ? 0 : FieldSize(version.size()));
    scope_.resize(FieldSize(scope_size));
    Cursor c{scope_.data(), scope_.data() + scope_.size()};
    Header(c, 1, scope_size);  // ScopeSpans.scope
    Bytes(c, 1, "sluice");
    if (!version.empty()) Bytes(c, 2, version);
    well_formed_ = !r.overflowed && r.p == r.end && !c.overflowed && c.p == c.end;
  }

  // The request of `spans` (one ResourceSpans of one ScopeSpans), in a buffer kept from call to
  // call; Internal if a length was worked out wrong (a bug: nothing is sent).
  absl::StatusOr<std::string*> Request(std::span<const SpanData> spans) {
    size_t scope_spans_size = scope_.size();  // ScopeSpans
    span_sizes_.clear();
    for (const SpanData& s : spans) {
      span_sizes_.push_back(SpanSize(s));
      scope_spans_size += FieldSize(span_sizes_.back());
    }
    const size_t resource_spans_size = resource_.size() + FieldSize(scope_spans_size);

    out_.resize(FieldSize(resource_spans_size));
    Cursor out{out_.data(), out_.data() + out_.size()};
    Header(out, 1, resource_spans_size);  // ExportTraceServiceRequest.resource_spans
    out.append(resource_);
    Header(out, 2, scope_spans_size);  // ResourceSpans.scope_spans
    out.append(scope_);
    for (size_t i = 0; i < spans.size(); ++i) WriteSpan(out, spans[i], span_sizes_[i]);
    if (!well_formed_ || out.overflowed || out.p != out.end) {
      return absl::InternalError("OTLP encoding: a length was worked out wrong");
    }
    return &out_;
  }

 private:
  std::string resource_;  // ResourceSpans.resource, as a field
  std::string scope_;     // ScopeSpans.scope, as a field
  bool well_formed_ = false;
  std::string out_;
  std::vector<size_t> span_sizes_;
};

// A random (version 4) UUID, as envoyproxy/ratelimit names an instance that has no id.
std::string RandomUuid() {
  const TraceId bytes = Tracer::NewTraceId();
  std::string hex;
  for (size_t i = 0; i < bytes.size(); ++i) {
    uint8_t b = bytes[i];
    if (i == 6) b = static_cast<uint8_t>((b & 0x0f) | 0x40);
    if (i == 8) b = static_cast<uint8_t>((b & 0x3f) | 0x80);
    hex += fmt::format("{:02x}", b);
    if (i == 3 || i == 5 || i == 7 || i == 9) hex += '-';
  }
  return hex;
}

}  // namespace

std::string EncodeRequest(std::span<const SpanData> spans, const ExporterOptions& options) {
  Encoder encoder(options);
  absl::StatusOr<std::string*> request = encoder.Request(spans);
  return request.ok() ? std::move(**request) : std::string();
}

class Exporter::Transport {
 public:
  virtual ~Transport() = default;
  // Sends one ExportTraceServiceRequest, `request` its bytes (which it may borrow while it sends:
  // they are as they were when it returns).
  virtual absl::Status Send(std::string& request, int64_t timeout_us) = 0;
};

namespace {

class GrpcTransport final : public Exporter::Transport {
 public:
  explicit GrpcTransport(const Endpoint& endpoint) {
    std::shared_ptr<::grpc::ChannelCredentials> credentials =
        endpoint.tls ? ::grpc::SslCredentials(::grpc::SslCredentialsOptions{})
                     : ::grpc::InsecureChannelCredentials();
    const std::string host =
        endpoint.host.find(':') != std::string::npos ? "[" + endpoint.host + "]" : endpoint.host;
    stub_ = std::make_unique<::grpc::GenericStub>(
        ::grpc::CreateChannel(fmt::format("{}:{}", host, endpoint.port), credentials));
  }

  // The request's bytes as they are (gRPC's generic stub: no message is built to be serialized
  // again), and the call waited for.
  absl::Status Send(std::string& request, int64_t timeout_us) override {
    ::grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::microseconds(timeout_us));
    ::grpc::Slice slice(request);
    ::grpc::ByteBuffer out(&slice, 1);
    ::grpc::ByteBuffer in;
    std::promise<::grpc::Status> done;
    stub_->UnaryCall(&context, kExportMethod, ::grpc::StubOptions(), &out, &in,
                     [&done](::grpc::Status status) { done.set_value(std::move(status)); });
    const ::grpc::Status status = done.get_future().get();
    if (!status.ok()) {
      return absl::UnavailableError(fmt::format(
          "gRPC {}: {}", static_cast<int>(status.error_code()), status.error_message()));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr char kExportMethod[] =
      "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
  std::unique_ptr<::grpc::GenericStub> stub_;
};

namespace asio = boost::asio;
namespace beast = boost::beast;

// HTTP/1.1 with one keep-alive connection, opened again when it fails. Each exchange runs on this
// thread's own io_context, its connect, write and read bounded by the stream's timer (Beast's
// synchronous calls are bounded by nothing: a collector that accepts and never answers would hold
// the thread, and shutdown, forever).
class HttpTransport final : public Exporter::Transport {
 public:
  explicit HttpTransport(Endpoint endpoint)
      : endpoint_(std::move(endpoint)),
        host_field_((endpoint_.host.find(':') != std::string::npos ? "[" + endpoint_.host + "]"
                                                                   : endpoint_.host) +
                    ":" + endpoint_.port) {}

  absl::Status Send(std::string& body, int64_t timeout_us) override {
    Outcome outcome = SendOnce(body, timeout_us);
    // A kept connection the collector closed while idle fails before any answer: once more on a
    // new one. (Not a timeout, nor an answer: those are the collector's.)
    if (outcome.reused && outcome.stale) outcome = SendOnce(body, timeout_us);
    return outcome.status;
  }

 private:
  struct Outcome {
    absl::Status status;
    bool reused = false;  // on a connection kept from an earlier exchange
    bool stale = false;   // it failed as a connection closed by the other end does
  };

  Outcome SendOnce(std::string& body, int64_t timeout_us) {
    const auto timeout = std::chrono::microseconds(std::max<int64_t>(1, timeout_us));
    Outcome outcome;
    outcome.reused = stream_.has_value();
    beast::http::request<beast::http::string_body> post{beast::http::verb::post, endpoint_.path,
                                                        11};
    post.set(beast::http::field::host, host_field_);
    post.set(beast::http::field::content_type, "application/x-protobuf");
    post.set(beast::http::field::user_agent, "sluice");
    post.body().swap(body);  // borrowed, not copied; given back below
    post.prepare_payload();
    struct GiveBack {
      std::string& from;
      std::string& to;
      ~GiveBack() { from.swap(to); }
    } give_back{post.body(), body};
    beast::http::response_parser<beast::http::string_body> parser;
    parser.body_limit(1 << 20);

    beast::error_code error = asio::error::would_block;  // not finished
    std::string_view stage;
    const auto read = [&] {
      stage = "answer";
      beast::http::async_read(*stream_, buffer_, parser,
                              [&](beast::error_code ec, size_t) { error = ec; });
    };
    const auto write = [&] {
      stage = "send";
      stream_->expires_after(timeout);  // the whole exchange, from here
      beast::http::async_write(*stream_, post, [&](beast::error_code ec, size_t) {
        if (ec) {
          error = ec;
          return;
        }
        read();
      });
    };
    asio::ip::tcp::resolver resolver(io_);
    io_.restart();
    if (!stream_) {
      stream_.emplace(io_);
      buffer_.clear();  // nothing of an earlier connection's answer
      stage = "resolve";
      resolver.async_resolve(
          endpoint_.host, endpoint_.port,
          [&](beast::error_code ec, asio::ip::tcp::resolver::results_type found) {
            if (ec) {
              error = ec;
              return;
            }
            stage = "connect";
            stream_->expires_after(timeout);
            stream_->async_connect(found, [&](beast::error_code ec2, const auto&) {
              if (ec2) {
                error = ec2;
                return;
              }
              write();
            });
          });
    } else {
      write();
    }
    // The stream's timer bounds the connect, the write and the read; this, the name's lookup too.
    io_.run_for(2 * timeout + std::chrono::seconds(1));
    if (error == asio::error::would_block) {  // still going: stopped, and its handlers drained
      resolver.cancel();
      stream_->socket().close();
      io_.restart();
      io_.run();
      error = beast::error::timeout;
    }
    if (error) {
      outcome.stale = stage == "send" ||
                      (stage == "answer" && parser.got_some() == false &&
                       (error == beast::http::error::end_of_stream ||
                        error == asio::error::connection_reset || error == asio::error::eof));
      stream_.reset();
      outcome.status = absl::UnavailableError(fmt::format("{}: {}", stage, error.message()));
      return outcome;
    }
    const auto& response = parser.get();
    if (!response.keep_alive()) stream_.reset();
    if (response.result_int() / 100 != 2) {
      outcome.status = absl::UnavailableError(fmt::format("HTTP {}", response.result_int()));
    }
    return outcome;
  }

  Endpoint endpoint_;
  const std::string host_field_;  // HOST:PORT, an IPv6 address in brackets
  asio::io_context io_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
};

}  // namespace

Exporter::Exporter(Tracer* tracer, ExporterOptions options)
    : tracer_(tracer), options_(std::move(options)) {}

Exporter::~Exporter() { Stop(); }

absl::Status Exporter::Start() {
  absl::StatusOr<Endpoint> endpoint = ParseEndpoint(options_.endpoint, options_.protocol);
  if (!endpoint.ok()) return endpoint.status();
  if (options_.service_instance_id.empty()) options_.service_instance_id = RandomUuid();
  if (options_.max_batch == 0) options_.max_batch = 1;
  if (options_.protocol == Protocol::kGrpc) {
    transport_ = std::make_unique<GrpcTransport>(*endpoint);
  } else {
    transport_ = std::make_unique<HttpTransport>(*std::move(endpoint));
  }
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void Exporter::Stop() {
  if (!thread_.joinable()) return;
  tracer_->Shutdown();
  thread_.join();
}

void Exporter::Run() {
  std::vector<SpanData> taken;  // the queue's storage, swapped in whole (Tracer::Take)
  Encoder encoder(options_);
  int64_t failures_logged = 0;
  bool giving_up = false;  // shut down and a batch failed: the rest are not sent (counted failed)
  for (;;) {
    tracer_->Recycle(taken);  // (empties it)
    const size_t wait_for =
        std::max<size_t>(1, std::min(options_.max_batch, tracer_->options().queue_size));
    if (tracer_->Take(taken, wait_for, SIZE_MAX, absl::Microseconds(options_.interval_us)) == 0) {
      // Nothing joins the queue once it is shut: shut and empty is the end.
      if (tracer_->shut_down() && tracer_->queued() == 0) return;
      continue;
    }
    for (size_t from = 0; from < taken.size(); from += options_.max_batch) {
      const std::span<const SpanData> batch = std::span<const SpanData>(taken).subspan(
          from, std::min(options_.max_batch, taken.size() - from));
      if (giving_up) {
        failed_.fetch_add(batch.size(), std::memory_order_relaxed);
        continue;
      }
      absl::StatusOr<std::string*> request = encoder.Request(batch);
      const absl::Status sent =
          request.ok() ? transport_->Send(**request, options_.timeout_us) : request.status();
      if (sent.ok()) {
        exported_.fetch_add(batch.size(), std::memory_order_relaxed);
        continue;
      }
      failed_.fetch_add(batch.size(), std::memory_order_relaxed);
      // At shutdown one failed call is enough: a collector down does not hold the exit for a
      // timeout per batch.
      giving_up = tracer_->shut_down();
      // The first failure, then one in 100: a collector that is down is not a log flood.
      if (failures_logged++ % 100 == 0) {
        util::Log().warn("traces: {} spans not exported to {}: {}", batch.size(), options_.endpoint,
                         std::string(sent.message()));
      }
    }
  }
}

}  // namespace sluice::trace::otlp
