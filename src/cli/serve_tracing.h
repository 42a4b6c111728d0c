// serve's traces (settings `tracing:`, or --envoy-env's TRACING_* and OTEL_EXPORTER_OTLP_*): the
// Tracer the frontends start spans on and the OTLP exporter that sends them, with their counts in
// the metrics (sluice_trace_spans_total).

#ifndef SLUICE_CLI_SERVE_TRACING_H_
#define SLUICE_CLI_SERVE_TRACING_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "metrics/registry.h"
#include "rules/config.h"
#include "sluice/clock.h"
#include "trace/otlp/exporter.h"
#include "trace/tracer.h"

namespace sluice::cli {

// The exporter's options from the settings (the endpoint defaulted by protocol).
trace::otlp::ExporterOptions ExporterOptionsFrom(const rules::TracingSettings& settings);

// What check-config and serve refuse in `settings` (an endpoint that is not one); ok when
// tracing is off.
absl::Status CheckTracing(const rules::TracingSettings& settings);

class Tracing {
 public:
  // Null when tracing is off; else the tracer and its exporter, started.
  static absl::StatusOr<std::unique_ptr<Tracing>> Start(const rules::TracingSettings& settings,
                                                        const Clock* clock);
  ~Tracing() { Stop(); }

  trace::Tracer* tracer() { return &tracer_; }
  // The tracer of `tracing`, or null when there is none (tracing off).
  static trace::Tracer* TracerOf(Tracing* tracing) {
    return tracing == nullptr ? nullptr : tracing->tracer();
  }
  // sluice_trace_spans_total{outcome}: ended (sampled), dropped (queue full), exported, failed.
  absl::Status RegisterMetrics(metrics::Registry& registry);
  // Sends what is left (each call within the export timeout) and stops. Call once the servers
  // have stopped.
  void Stop() { exporter_.Stop(); }

  Tracing(const rules::TracingSettings& settings, const Clock* clock);

 private:
  trace::Tracer tracer_;
  trace::otlp::Exporter exporter_;
};

}  // namespace sluice::cli

#endif  // SLUICE_CLI_SERVE_TRACING_H_
