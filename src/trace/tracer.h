// Distributed traces of sluice's work, as OpenTelemetry models them: spans of a request, of its
// decision, of each backend call and of a proxied upstream call, which the frontends start from
// the caller's W3C `traceparent` (HTTP header or gRPC metadata) and which an exporter
// (trace/otlp) sends to an OTLP collector.
//
//   Tracer tracer({.sampling_rate = 0.01}, &clock);
//   std::shared_ptr<Span> request = tracer.StartRequest("POST /v1/check", SpanKind::kServer,
//                                                       traceparent, tracestate);
//   if (request) {                        // null: not sampled (or tracing is off)
//     CurrentSpan scope(request.get());   // what the engine's decision span is a child of
//     ...                                 // the span ends when its last owner lets go
//   }
//
// Sampling is parent-based: a request whose caller sent a valid `traceparent` is sampled when the
// caller's was (its sampled flag); any other starts a new trace, sampled at `sampling_rate` by its
// trace id as OpenTelemetry's TraceIdRatioBased sampler decides (the id's last 8 bytes, big
// endian, shifted right by one, below rate × 2^63), so that every service of a trace that samples
// at a rate makes the same choice. Spans not sampled cost nothing but that choice.
//
// Ended spans wait in a bounded queue for the exporter; when it is full a span is dropped and
// counted (dropped()), never waited for: a collector that is down or slow cannot slow a decision.
//
// Thread safety: the Tracer is safe for concurrent use. A Span is used by one thread at a time
// (the work it covers passes it on); it ends once, when End() is called or its last owner lets go.

#ifndef SLUICE_TRACE_TRACER_H_
#define SLUICE_TRACE_TRACER_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sluice/clock.h"
#include "trace/wire.h"
#include "util/trace_context.h"

namespace sluice::trace {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

// OTLP's Span.SpanKind values.
enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

// An ended span, as the exporter sends it.
struct SpanData {
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_span_id{};     // all zero: a root span
  bool remote_parent = false;  // the parent is the caller's (from its traceparent)
  uint8_t flags = 1;           // W3C trace flags (bit 0: sampled)
  std::string trace_state;     // the caller's tracestate, passed on
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  // The attributes as they are sent: OTLP Span.attributes fields, one KeyValue each, in the
  // order they were set (wire.h).
  wire::Buffer attributes;
  bool error = false;  // Status ERROR, with status_message; else UNSET
  std::string status_message;
};

struct TracerOptions {
  // Of the traces this process starts (no valid traceparent): 0 none, 1 every one.
  double sampling_rate = 1.0;
  // Ended spans waiting for the exporter; more are dropped.
  size_t queue_size = 2048;
  // The descriptors' entries (the keys) as attributes of the decision span. Off: keys (user ids,
  // API keys, addresses) stay out of the traces.
  bool record_keys = false;
};

// Parent-based ratio sampling (above): whether a span of `trace_id` is sampled, given its caller's
// parent (nullopt: none).
bool Sampled(const std::optional<util::TraceParent>& parent, const TraceId& trace_id,
             double sampling_rate);
// The ratio rule's bound: a trace is sampled when its id's last 8 bytes (big endian), shifted
// right by one, are below it (rate × 2^63; 2^63 at a rate of 1 or more, 0 at 0 or less).
uint64_t RatioBound(double sampling_rate);

class Tracer;

class Span : public std::enable_shared_from_this<Span> {
 public:
  // Use Tracer::StartRequest or StartChild (which fill in its data).
  explicit Span(Tracer* tracer);
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() { End(); }

  // The attribute `key` = `value` (a string, an integer, a boolean, a double or a list of
  // strings), written at once as it is sent (wire.h). Integers are int64_t: `Set(k, 5)` would not
  // know which one it is.
  void Set(std::string_view key, std::string_view value) { Append(key, value); }
  void Set(std::string_view key, const char* value) { Append(key, std::string_view(value)); }
  void Set(std::string_view key, int64_t value) { Append(key, value); }
  void Set(std::string_view key, bool value) { Append(key, value); }
  void Set(std::string_view key, double value) { Append(key, value); }
  void Set(std::string_view key, std::span<const std::string> values) { Append(key, values); }
  // (Any other pointer would otherwise be taken for a boolean.)
  template <typename T>
  void Set(std::string_view key, T* value) = delete;
  // Status ERROR with `message`.
  void SetError(std::string message) {
    data_.error = true;
    data_.status_message = std::move(message);
  }
  // Ends the span now (the first call only) and hands it to the tracer's queue.
  void End();

  // A child of this span starting now (of the same trace, sampled as this one is).
  std::shared_ptr<Span> StartChild(std::string name, SpanKind kind) const;

  // The `traceparent` that makes this span a callee's parent (e.g. a proxied upstream's).
  std::string TraceParent() const;
  const std::string& trace_state() const { return data_.trace_state; }
  const TraceId& trace_id() const { return data_.trace_id; }
  const SpanId& span_id() const { return data_.span_id; }
  const SpanId& parent_span_id() const { return data_.parent_span_id; }
  bool record_keys() const;

 private:
  friend class Tracer;

  template <typename T>
  void Append(std::string_view key, T value) {
    wire::AppendAttribute(data_.attributes, wire::kSpanAttributes, key, value);
  }

  Tracer* tracer_;
  SpanData data_;
  bool ended_ = false;
};

class Tracer {
 public:
  // `clock` (not owned) gives the spans' times.
  Tracer(TracerOptions options, const Clock* clock)
      : options_(options), clock_(clock), bound_(RatioBound(options.sampling_rate)) {}

  // A request's span (kServer for a request served): a child of the caller's span when
  // `traceparent` is a valid one (its `tracestate` is kept, if valid), else the root of a new
  // trace. Null when the trace is not sampled (above).
  std::shared_ptr<Span> StartRequest(std::string name, SpanKind kind, std::string_view traceparent,
                                     std::string_view tracestate);

  // The same in two steps, for a caller that would rather not build the span's name for a
  // request that is not sampled: the sampling decision, then the span (`tracestate` is read
  // only when the trace has a parent).
  struct SampledTrace {
    TraceId trace_id{};
    std::optional<util::TraceParent> parent;  // the caller's, when it sent a valid one
  };
  std::optional<SampledTrace> Sample(std::string_view traceparent) const;
  std::shared_ptr<Span> StartRequest(std::string name, SpanKind kind, const SampledTrace& trace,
                                     std::string_view tracestate);

  // Queues an ended span for the exporter, or drops it (counted) when the queue is full.
  void Submit(SpanData&& span);

  // The exporter's side: waits until `min` spans are queued, Shutdown() was called or `timeout`
  // has passed, then moves up to `max` of the oldest into `out` (appended; when `out` is empty
  // and all fit, the queue's storage and out's are swapped: no copy, no allocation). Returns how
  // many.
  size_t Take(std::vector<SpanData>& out, size_t min, size_t max, absl::Duration timeout);
  // The exporter's side, after a batch was sent: the spans' attribute buffers are kept (as many
  // as the queue holds) for new spans, which empty and fill them, so that a span's attributes
  // take no allocation: allocated on a request's thread and freed on the exporter's, they took
  // glibc's slow paths at every span. `spent` is left empty.
  void Recycle(std::vector<SpanData>& spent);
  // Wakes a waiting Take for good (its later calls wait no longer).
  void Shutdown();

  // Spans ended in sampled traces, and those of them dropped because the queue was full.
  uint64_t ended() const { return ended_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  size_t queued() const;
  bool shut_down() const;

  const TracerOptions& options() const { return options_; }
  int64_t NowUnixNanos() const { return clock_->NowMicros() * 1000; }
  // A random non-zero span id (and trace id).
  static SpanId NewSpanId();
  static TraceId NewTraceId();

 private:
  friend class Span;
  static constexpr size_t kUsualAttributes = 192;  // room (bytes) for a new span's attributes
  static constexpr size_t kKeptAttributes = 4096;  // larger buffers are not recycled

  // A new span of this tracer (its data's attribute buffer taken from the recycled ones).
  std::shared_ptr<Span> NewSpan();
  // An empty attribute buffer with room, recycled when there is one; taken by a thread's spans
  // from a stock of its own, filled from spare_ a few dozen at a time (one lock for them all).
  wire::Buffer FreshAttributes();

  const TracerOptions options_;
  const Clock* clock_;
  const uint64_t bound_;  // RatioBound(sampling_rate)
  std::atomic<uint64_t> ended_{0};
  std::atomic<uint64_t> dropped_{0};
  mutable absl::Mutex mu_;
  std::vector<SpanData> queue_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar ready_;                      // signalled when wake_at_ spans are queued
  size_t wake_at_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no exporter waits
  // Recycle's attribute buffers (emptied by FreshAttributes).
  std::vector<wire::Buffer> spare_ ABSL_GUARDED_BY(mu_);
};

// The span the calling thread works for: a frontend sets it while it hands a request to the
// engine, which makes its decision's spans children of it. Scopes nest; the span must outlive
// the scope.
class CurrentSpan {
 public:
  explicit CurrentSpan(Span* span) : previous_(current_) { current_ = span; }
  CurrentSpan(const CurrentSpan&) = delete;
  CurrentSpan& operator=(const CurrentSpan&) = delete;
  ~CurrentSpan() { current_ = previous_; }

  // The innermost scope's span, or null (no scope, or a request not sampled).
  static Span* Get() { return current_; }
  // The same, shared: for work that ends after the scope (the span must be owned by a shared_ptr,
  // as Tracer's and Span's spans are).
  static std::shared_ptr<Span> Shared() {
    return current_ == nullptr ? nullptr : current_->shared_from_this();
  }

 private:
  Span* const previous_;
  static thread_local Span* current_;
};

}  // namespace sluice::trace

#endif  // SLUICE_TRACE_TRACER_H_
