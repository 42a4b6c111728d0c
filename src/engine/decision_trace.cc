#include "engine/decision_trace.h"

#include <algorithm>
#include <string>
#include <vector>

#include "rules/overrides.h"

namespace sluice::engine {

std::optional<DecisionTrace> DecisionTrace::Start(const backend::Backend& backend, size_t items) {
  const trace::Span* parent = trace::CurrentSpan::Get();
  if (parent == nullptr) return std::nullopt;
  std::shared_ptr<trace::Span> decide = parent->StartChild("decide", trace::SpanKind::kInternal);
  std::shared_ptr<trace::Span> call = nullptr;
  // A backend that answers inline (the memory store) makes no call worth a span of its own: its
  // decision is the decide span's few microseconds.
  if (items > 0 && !backend.answers_inline()) {
    const std::string_view name = backend.name();
    const bool remote = name.starts_with("redis");
    call = decide->StartChild(std::string(name),
                              remote ? trace::SpanKind::kClient : trace::SpanKind::kInternal);
    call->Set("sluice.backend", name);
    call->Set("sluice.items", static_cast<int64_t>(items));
    if (remote) call->Set("db.system", "redis");
  }
  return DecisionTrace(std::move(decide), std::move(call));
}

void DecisionTrace::Answered(const backend::Outcome& outcome) {
  if (backend_ == nullptr) return;
  if (!outcome.status.ok()) {
    backend_->SetError(std::string(outcome.status.message()));
  } else if (outcome.fell_back) {
    backend_->SetError("failed; the failure policy decided");
  }
  // In this process from a lease, a copy or a kept denial, or by a call to the backend.
  backend_->Set("sluice.answered_by",
                outcome.answered_by != nullptr ? outcome.answered_by : "backend");
  backend_->End();
}

void DecisionTrace::Finish(std::span<const Request> requests, std::span<const Response> responses) {
  const size_t n = std::min(requests.size(), responses.size());
  // The limits' names, in a list the thread keeps from decision to decision (a short name takes
  // no allocation): only its first `used` are this decision's.
  thread_local std::vector<std::string> limits;
  size_t used = 0;
  bool allowed = true;
  const char* backend_state = nullptr;
  for (size_t r = 0; r < n; ++r) {
    const Response& response = responses[r];
    allowed = allowed && response.allowed;
    for (const DescriptorResult& d : response.descriptors) {
      for (const AppliedLimit& limit : d.limits) {
        if (used == limits.size()) limits.emplace_back();
        limits[used++] = LimitName(limit);
      }
    }
    switch (response.backend) {
      case BackendState::kOk:
        break;
      case BackendState::kFailedOpen:
        backend_state = "failed_open";
        break;
      case BackendState::kLocal:
        backend_state = "local";
        break;
      case BackendState::kFailedClosed:
        backend_state = "failed_closed";
        break;
    }
  }
  if (n == 1) {
    decide_->Set("sluice.domain", requests.front().domain);
  } else {
    std::vector<std::string> domains;
    for (size_t r = 0; r < n; ++r) domains.push_back(requests[r].domain);
    decide_->Set("sluice.domain", std::move(domains));
  }
  decide_->Set("sluice.limits", std::span<const std::string>(limits.data(), used));
  decide_->Set("sluice.verdict", allowed ? "allowed" : "denied");
  if (n == 1 && !allowed) {
    if (const AppliedLimit* headline = responses.front().Headline(); headline != nullptr) {
      decide_->Set("sluice.denied_by", LimitName(*headline));
    }
  }
  if (backend_state != nullptr) decide_->Set("sluice.backend_state", backend_state);
  if (decide_->record_keys()) {
    std::vector<std::string> keys;
    for (size_t r = 0; r < n; ++r) {
      for (const Descriptor& d : requests[r].descriptors) {
        keys.push_back(rules::OverrideEntriesText(d.entries));
      }
    }
    decide_->Set("sluice.descriptors", std::move(keys));
  }
  decide_->End();
}

}  // namespace sluice::engine
