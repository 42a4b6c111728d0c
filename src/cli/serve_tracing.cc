#include "cli/serve_tracing.h"

#include <string>
#include <vector>

#include "util/log.h"

namespace sluice::cli {

trace::otlp::ExporterOptions ExporterOptionsFrom(const rules::TracingSettings& settings) {
  const bool grpc = settings.protocol == "grpc";
  return {.protocol = grpc ? trace::otlp::Protocol::kGrpc : trace::otlp::Protocol::kHttp,
          .endpoint = !settings.endpoint.empty() ? settings.endpoint
                      : grpc                     ? "127.0.0.1:4317"
                                                 : "http://127.0.0.1:4318",
          .service_name = settings.service_name,
          .service_namespace = settings.service_namespace,
          .service_instance_id = settings.service_instance_id,
          .service_version = {},
          .interval_us = settings.export_interval_us,
          .max_batch = settings.max_batch,
          .timeout_us = settings.export_timeout_us};
}

absl::Status CheckTracing(const rules::TracingSettings& settings) {
  if (!settings.enabled) return absl::OkStatus();
  const trace::otlp::ExporterOptions options = ExporterOptionsFrom(settings);
  return trace::otlp::ParseEndpoint(options.endpoint, options.protocol).status();
}

Tracing::Tracing(const rules::TracingSettings& settings, const Clock* clock)
    : tracer_({.sampling_rate = settings.sampling_rate,
               .queue_size = settings.queue_size,
               .record_keys = settings.record_keys},
              clock),
      exporter_(&tracer_, ExporterOptionsFrom(settings)) {}

absl::StatusOr<std::unique_ptr<Tracing>> Tracing::Start(const rules::TracingSettings& settings,
                                                        const Clock* clock) {
  if (!settings.enabled) return nullptr;
  auto tracing = std::make_unique<Tracing>(settings, clock);
  if (absl::Status s = tracing->exporter_.Start(); !s.ok()) return s;
  util::Log().info("tracing: spans to {} over {} (sampling rate {}, service.instance.id {})",
                   ExporterOptionsFrom(settings).endpoint, settings.protocol,
                   settings.sampling_rate, tracing->exporter_.service_instance_id());
  return tracing;
}

absl::Status Tracing::RegisterMetrics(metrics::Registry& registry) {
  return registry.AddCallback(
      {.name = "sluice_trace_spans_total",
       .help = "Spans of sampled traces, by outcome: ended, dropped (the export queue was full), "
               "exported (taken by the collector), failed (in a batch the collector refused or "
               "did not answer in time).",
       .label_names = {"outcome"}},
      metrics::MetricType::kCounter, [this] {
        return std::vector<metrics::CallbackSample>{
            {{"ended"}, static_cast<double>(tracer_.ended())},
            {{"dropped"}, static_cast<double>(tracer_.dropped())},
            {{"exported"}, static_cast<double>(exporter_.exported())},
            {{"failed"}, static_cast<double>(exporter_.failed())}};
      });
}

}  // namespace sluice::cli
