// The spans of one decision (Engine::CheckAll and CheckAllAsync), when the calling thread works
// for a sampled span (trace::CurrentSpan, set by the frontends): "decide", a child of that span,
// with the domain, the limits that applied and the verdict as attributes (the descriptors' entries
// only with the tracer's record_keys), and, on a backend that does not answer inline (Redis and
// the wrappers in front of it), the backend call's span below it, named after the backend
// ("redis" for every consistency), with its failure when it failed. (A decision of the memory
// store is the decide span's few microseconds: no span of its own.)

#ifndef SLUICE_ENGINE_DECISION_TRACE_H_
#define SLUICE_ENGINE_DECISION_TRACE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <span>

#include "backend/backend.h"
#include "engine/engine.h"
#include "trace/tracer.h"

namespace sluice::engine {

class DecisionTrace {
 public:
  // The decision's span and its backend call's, both starting now; nullopt when the calling
  // thread works for no span.
  static std::optional<DecisionTrace> Start(const backend::Backend& backend, size_t items);

  // The backend answered with `outcome`: its span ends.
  void Answered(const backend::Outcome& outcome);
  // The decision is made: its span ends, with what it decided.
  void Finish(std::span<const Request> requests, std::span<const Response> responses);

  // Use Start.
  DecisionTrace(std::shared_ptr<trace::Span> decide, std::shared_ptr<trace::Span> backend)
      : decide_(std::move(decide)), backend_(std::move(backend)) {}

 private:
  std::shared_ptr<trace::Span> decide_;
  std::shared_ptr<trace::Span> backend_;
};

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_DECISION_TRACE_H_
