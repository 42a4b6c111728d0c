// Reverse proxy mode of the data plane (Service::Proxy): decide with the `http:` routes exactly
// as forward-auth does, answer a deny at once, hold an admitted request for its leaky_bucket
// delay (a timer on the connection's io_context, bounded by http.max_delayed; cut short, with the
// quota given back, if the client closes its connection meanwhile), forward it
// upstream (UpstreamClient), give the quota back when the answer matches the domain's
// `refund_on`, and pass the upstream's answer on with the rate-limit headers added: its status
// and fields as soon as they arrive, then its body streamed piece by piece (PipeBody).
//
// Which upstream: the first domain by name, among those whose route matched the request and
// that have an `upstream`; if none of them has one, Config::proxy_domain's (the first domain by
// name with an upstream). Its `refund_on` applies, to everything the request consumed.

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <vector>

#include "engine/holds.h"
#include "fmt/format.h"
#include "http/check_json.h"
#include "http/costs.h"
#include "http/http_routes.h"
#include "http/service.h"
#include "http/service_answers.h"

namespace sluice::http {

// The holds a proxied request took (concurrency limits), given back when the last owner lets go:
// the call, and the answer's body while it streams (so a client that goes away releases too).
struct HeldSlots {
  backend::Holds* holds = nullptr;
  const Clock* clock = nullptr;
  std::vector<backend::Hold> taken;
  HeldSlots() = default;
  HeldSlots(const HeldSlots&) = delete;
  HeldSlots& operator=(const HeldSlots&) = delete;
  ~HeldSlots() {
    if (!taken.empty()) holds->Release(taken, clock->NowMicros(), [](absl::StatusOr<size_t>) {});
  }
};

struct Service::ProxyCall {
  Responder responder;
  HttpRequest request;
  std::shared_ptr<BodyReader> body;  // the request's body, still with the client (streamed)
  std::shared_ptr<const rules::Config> config;  // the snapshot it was decided on
  engine::Response decision;
  engine::Refundable consumed;
  const rules::HttpSection* section = nullptr;  // the upstream's (in `config`)
  UpstreamTarget target;
  boost::asio::any_io_executor executor;
  std::optional<boost::asio::steady_timer> delay;
  bool client_gone = false;  // the client closed its connection during the delay
  bool cancelled = false;    // the shutdown deadline came during the delay (CancelUpstreams)
  bool client_left = false;  // the client left while the upstream worked (its exchange ended)
  std::shared_ptr<const engine::HoldTargets> hold_targets;  // null: no concurrency limit applies
  std::shared_ptr<HeldSlots> held;
  std::vector<RouteChecks::Costed> costed;     // descriptors with a `cost:` (into `config`)
  std::shared_ptr<trace::Span> span;           // the request's, when it is traced
  std::shared_ptr<trace::Span> upstream_span;  // its upstream call's
};

// A proxied request's reserved costs, settled from its answer (a rate_limits entry's
// `cost.settle`): each item that took a reserve with what its source says, from the answer's
// header (known at once) or its body's JSON (once the body has ended: the meter). A source that
// says nothing keeps the estimate; so does an answer cut short.
struct ProxySettlement {
  UsageMeter meter;
  engine::Refundable reserved;
  std::vector<std::optional<uint64_t>> known;  // per item: its header's count
  std::vector<int> pointer_of;                 // per item: its JSON field in the meter, or -1
  std::function<void(const engine::Refundable&, std::vector<uint64_t>)> reconcile;

  ProxySettlement(std::vector<std::string> pointers, bool event_stream)
      : meter(std::move(pointers), event_stream) {}
  // The body ended (or there is none to wait for): every item settled.
  void End() {
    const std::vector<std::optional<uint64_t>> found = meter.End();
    std::vector<uint64_t> actual;
    for (size_t i = 0; i < reserved.items.size(); ++i) {
      const std::optional<uint64_t> v =
          pointer_of[i] >= 0 ? found[static_cast<size_t>(pointer_of[i])] : known[i];
      actual.push_back(v.value_or(reserved.items[i].cost));
    }
    reconcile(reserved, std::move(actual));
  }
};

namespace {

bool Has(const std::vector<std::string>& list, std::string_view what) {
  return std::find(list.begin(), list.end(), what) != list.end();
}

std::string_view MethodOf(const HttpRequest& request) {
  return {request.method_string().data(), request.method_string().size()};
}

// sluice's answer to a proxied request still held for its shaping delay at the shutdown deadline.
HttpResponse ShuttingDown() {
  HttpResponse response(beast_http::status::service_unavailable, 11);
  response.set(beast_http::field::content_type, "application/json");
  response.body() = R"({"error":"not forwarded: sluice is shutting down"})";
  return response;
}

// Counts an answer cut short mid-body by `side` ("upstream" or "client"); `cut` may be null.
void CountCut(metrics::Family<metrics::Counter>* cut, std::string_view side) {
  if (cut == nullptr) return;
  const std::string_view labels[] = {side};
  cut->WithLabels(labels)->Inc();
}

// Copies the upstream's body to the client one piece at a time: the next piece is read only once
// the previous one is written, so a slow client slows the upstream down instead of filling
// memory. Either side failing ends both: the upstream cut short closes the client's connection
// (the status is out, so that is the only way left to say so), and a client gone drops `body`,
// which closes the upstream connection instead of pooling it. Either is counted in `cut`
// (sluice_proxy_answers_cut_total; may be null).
// `held` (may be null) goes along, and is let go with the rest. `settle` (may be null) sees each
// piece, and settles the request's costs when the body has ended.
void PipeBody(std::shared_ptr<UpstreamBody> body, std::shared_ptr<BodyWriter> client,
              metrics::Family<metrics::Counter>* cut, std::shared_ptr<HeldSlots> held,
              std::shared_ptr<ProxySettlement> settle) {
  UpstreamBody& source = *body;
  source.Read(
      [body = std::move(body), client = std::move(client), cut, held = std::move(held),
       settle = std::move(settle)](UpstreamBody::Status status, std::string_view piece) mutable {
        if (status == UpstreamBody::Status::kError) {
          CountCut(cut, "upstream");
          return client->Abort();
        }
        if (status == UpstreamBody::Status::kEnd) {
          if (settle != nullptr) settle->End();
          return client->End();
        }
        if (settle != nullptr) settle->meter.Feed(piece);
        BodyWriter& sink = *client;
        sink.Write(boost::asio::buffer(piece.data(), piece.size()),
                   [body = std::move(body), client = std::move(client), cut, held = std::move(held),
                    settle = std::move(settle)](bool written) mutable {
                     if (!written) return CountCut(cut, "client");
                     PipeBody(std::move(body), std::move(client), cut, std::move(held),
                              std::move(settle));
                   });
      });
}

}  // namespace

void Service::CountProxy(std::string_view outcome) {
  if (metrics_ == nullptr) return;
  const std::string_view labels[] = {outcome};
  metrics_->proxy_requests->WithLabels(labels)->Inc();
}

void Service::Proxy(HttpRequest& request, const std::string& peer, HttpResponse& response,
                    Deferral& deferral, std::shared_ptr<const rules::Config> config) {
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  auto checks = BuildRouteChecks(
      *config, {.method = MethodOf(request), .path = path, .peer = peer, .headers = &request});
  if (!checks.ok()) {
    response.result(beast_http::status::bad_request);
    response.set(beast_http::field::content_type, "application/json");
    response.body() = RenderError(std::string(checks.status().message()));
    return;
  }
  const rules::HttpSection* section = nullptr;
  std::string_view section_domain;
  for (size_t i = 0; i < checks->sections.size(); ++i) {
    if (checks->sections[i]->upstream.empty()) continue;
    if (section == nullptr || checks->requests[i].domain < section_domain) {
      section = checks->sections[i];
      section_domain = checks->requests[i].domain;
    }
  }
  if (section == nullptr) section = &*config->proxy_domain->http;

  auto call = std::make_shared<ProxyCall>();
  call->section = section;
  call->target = {.host = section->upstream_host, .port = section->upstream_port};
  call->executor = deferral.executor();
  call->span = trace::CurrentSpan::Shared();
  call->request = std::move(request);
  call->body = deferral.body();
  PrepareUpstreamRequest(call->request, peer);
  call->config = config;
  call->costed = std::move(checks->costed);
  if (holds_ != nullptr) {
    engine::HoldTargets targets;
    for (const engine::Request& r : checks->requests) {
      engine::HoldTargets more = engine::MatchHolds(*config, r);
      // (Moved whole: each one's requests point into its own keys, which moving keeps.)
      for (size_t i = 0; i < more.requests.size(); ++i) {
        targets.keys.push_back(std::string(more.requests[i].key));
        targets.names.push_back(std::move(more.names[i]));
        targets.on_failure.push_back(more.on_failure[i]);
        targets.domains.push_back(std::move(more.domains[i]));
        targets.requests.push_back(more.requests[i]);
      }
    }
    for (size_t i = 0; i < targets.requests.size(); ++i) targets.requests[i].key = targets.keys[i];
    if (!targets.requests.empty()) {
      call->hold_targets = std::make_shared<const engine::HoldTargets>(std::move(targets));
    }
  }
  call->responder = deferral.Take();  // every proxied request is answered later
  // What the request consumes is recorded (on the memory store or on Redis) for a refund.
  DecideRoutes(
      std::move(config), *std::move(checks), &call->consumed, [this, call](RouteDecision decided) {
        // Back on the connection's thread (the decision may come from Redis's).
        boost::asio::post(call->executor, [this, call, decided = std::move(decided)]() mutable {
          ProxyDecided(call, std::move(decided));
        });
      });
}

void Service::SendProxyAnswer(ProxyCall& call, HttpResponse response) {
  CountResponse(response);
  if (call.span != nullptr) {
    SpanAnswered(*call.span, response);
    call.span->End();
  }
  call.responder.Send(std::move(response));
}

void Service::ProxyDecided(std::shared_ptr<ProxyCall> call, RouteDecision decided) {
  const auto answer = [&](HttpResponse response) { SendProxyAnswer(*call, std::move(response)); };
  if (!decided.combined().allowed) {
    CountProxy("denied");
    HttpResponse response;
    SetDecision(*call->config, decided.combined(), static_cast<beast_http::status>(decided.status),
                response);
    return answer(std::move(response));
  }
  if (call->hold_targets != nullptr) return ProxyAdmitted(std::move(call), decided.combined());
  ProxyHeld(std::move(call), std::move(decided.combined()));
}

void Service::ProxyAdmitted(std::shared_ptr<ProxyCall> call, engine::Response decision) {
  const engine::HoldTargets& targets = *call->hold_targets;
  auto pending = std::make_shared<engine::Response>(std::move(decision));
  holds_->Acquire(
      targets.requests, clock_->NowMicros(),
      [this, call, pending](backend::Acquisition got) mutable {
        boost::asio::post(call->executor, [this, call, pending, got = std::move(got)]() mutable {
          const engine::HoldTargets& targets = *call->hold_targets;
          CountHolds(targets, got);
          const bool closed =
              std::any_of(targets.on_failure.begin(), targets.on_failure.end(),
                          [](auto m) { return m == backend::FailureMode::kClosed; });
          if (got.ok || (!got.status.ok() && !closed)) {
            call->held = std::make_shared<HeldSlots>();
            call->held->holds = holds_;
            call->held->clock = clock_;
            call->held->taken = std::move(got.holds);
            return ProxyHeld(std::move(call), std::move(*pending));
          }
          // Refused (or Redis down under failure_mode closed): not forwarded, so
          // the request keeps nothing of the rates either.
          engine_.Refund(call->consumed, clock_->NowMicros());
          CountProxy("held_refused");
          HttpResponse response;
          if (!got.status.ok()) {
            SetJson(response, beast_http::status::service_unavailable,
                    RenderError("backend: " + std::string(got.status.message())));
          } else {
            response.set(
                beast_http::field::retry_after,
                std::to_string(std::max<int64_t>(1, (got.retry_after_us + 999999) / 1000000)));
            std::string body = R"({"error":"too many in flight","limit":)";
            AppendJsonString(&body, targets.names[got.refused]);
            body += '}';
            SetJson(response, beast_http::status::too_many_requests, std::move(body));
          }
          SendProxyAnswer(*call, std::move(response));
        });
      });
}

void Service::ProxyHeld(std::shared_ptr<ProxyCall> call, engine::Response decision) {
  const auto answer = [&](HttpResponse response) { SendProxyAnswer(*call, std::move(response)); };
  int64_t delay_us = 0;
  for (const auto& d : decision.descriptors) {
    for (const auto& limit : d.limits) delay_us = std::max(delay_us, limit.decision.delay_us);
  }
  if (delay_us > 0 &&
      delayed_.fetch_add(1, std::memory_order_relaxed) >= call->config->settings.max_delayed) {
    // Shaping is full: the request is not served, so it keeps nothing of the quota.
    delayed_.fetch_sub(1, std::memory_order_relaxed);
    engine_.Refund(call->consumed, clock_->NowMicros());
    CountProxy("shaped_rejected");
    HttpResponse response;
    response.result(beast_http::status::service_unavailable);
    response.set(beast_http::field::retry_after,
                 std::to_string(std::max<int64_t>(1, (delay_us + 999999) / 1000000)));
    response.set(beast_http::field::content_type, "application/json");
    response.body() = fmt::format(
        "{{\"error\":\"too many requests are being delayed by shaping (http.max_delayed = {})\"}}",
        call->config->settings.max_delayed);
    return answer(std::move(response));
  }
  call->decision = std::move(decision);
  if (delay_us == 0) return Forward(std::move(call));
  if (!TrackDelayed(call)) {  // past the shutdown deadline: not held, not forwarded
    delayed_.fetch_sub(1, std::memory_order_relaxed);
    engine_.Refund(call->consumed, clock_->NowMicros());
    CountProxy("cancelled");
    return answer(ShuttingDown());
  }
  call->delay.emplace(call->executor, std::chrono::microseconds(delay_us));
  // A client that leaves during the delay is not forwarded: the delay ends at once and the
  // request keeps nothing of the quota (as when shaping is full).
  call->responder.OnClientGone([weak = std::weak_ptr<ProxyCall>(call)] {
    if (auto c = weak.lock(); c != nullptr && c->delay) {
      c->client_gone = true;
      c->delay->cancel();
    }
  });
  call->delay->async_wait([this, call](boost::system::error_code) mutable {
    delayed_.fetch_sub(1, std::memory_order_relaxed);
    if (call->client_gone) {
      engine_.Refund(call->consumed, clock_->NowMicros());
      CountProxy("client_gone");
      return;  // the Responder, dropped with the call, answers a client that is not there
    }
    if (call->cancelled) {  // the shutdown deadline: not forwarded, so it keeps nothing
      engine_.Refund(call->consumed, clock_->NowMicros());
      CountProxy("cancelled");
      HttpResponse response = ShuttingDown();
      return SendProxyAnswer(*call, std::move(response));
    }
    Forward(std::move(call));
  });
}

bool Service::TrackDelayed(const std::shared_ptr<ProxyCall>& call) {
  absl::MutexLock lock(&delayed_mu_);
  if (proxy_cancelled_) return false;
  if (++delayed_since_prune_ >= delayed_calls_.size() / 2 + 64) {  // amortised O(1), bounded
    delayed_since_prune_ = 0;
    std::erase_if(delayed_calls_, [](const std::weak_ptr<ProxyCall>& w) { return w.expired(); });
  }
  delayed_calls_.push_back(call);
  return true;
}

void Service::CancelUpstreams() {
  // The upstream client first: a delay ending meanwhile forwards into a cancelled exchange (503).
  upstream_.CancelAll();
  std::vector<std::weak_ptr<ProxyCall>> delayed;
  {
    absl::MutexLock lock(&delayed_mu_);
    proxy_cancelled_ = true;
    delayed.swap(delayed_calls_);
  }
  for (const std::weak_ptr<ProxyCall>& w : delayed) {
    std::shared_ptr<ProxyCall> call = w.lock();
    if (call == nullptr) continue;
    const boost::asio::any_io_executor executor = call->executor;
    boost::asio::post(executor, [call = std::move(call)] {
      if (!call->delay) return;
      call->cancelled = true;
      call->delay->cancel();  // (a delay already over went on to Forward)
    });
  }
}

void Service::Forward(std::shared_ptr<ProxyCall> call) {
  const auto timeout = std::chrono::milliseconds(
      std::max<int64_t>(1, call->config->settings.upstream_timeout_us / 1000));
  HttpRequest request = std::move(call->request);
  if (call->span != nullptr) {
    // The upstream continues this trace, as a child of the call's span.
    call->upstream_span = call->span->StartChild(
        std::string(request.method_string().data(), request.method_string().size()),
        trace::SpanKind::kClient);
    call->upstream_span->Set("server.address", call->target.host);
    call->upstream_span->Set("server.port", static_cast<int64_t>(call->target.port));
    request.set("traceparent", call->upstream_span->TraceParent());
    // The caller's tracestate goes on with its trace; one that was invalid, or of a trace that is
    // not this one, does not (W3C: a tracestate belongs to its traceparent).
    if (!call->upstream_span->trace_state().empty()) {
      request.set("tracestate", call->upstream_span->trace_state());
    } else {
      request.erase("tracestate");
    }
  }
  const boost::asio::any_io_executor executor = call->executor;
  UpstreamTarget target = call->target;
  std::shared_ptr<BodyReader> body = std::move(call->body);
  // A request that holds concurrency slots is watched while the upstream works, when its client
  // has nothing more to send (no body, or one read whole): a client that leaves ends the upstream
  // exchange and gives the slots back at once, so that leaving and coming back never runs more
  // than N requests upstream.
  const bool watch = call->held != nullptr && body == nullptr;
  const std::weak_ptr<ProxyCall> weak = call;
  std::function<void()> cancel = upstream_.Forward(
      executor, std::move(target), std::move(request), timeout,
      [this, call](UpstreamResult result) { ProxyAnswered(call, std::move(result)); },
      std::move(body));
  if (!watch) return;
  call->responder.OnClientGone([weak, cancel = std::move(cancel)] {
    if (auto c = weak.lock()) {
      c->client_left = true;
      c->held.reset();  // (the exchange ends on this thread too: nothing else uses it meanwhile)
    }
    cancel();
  });
}

void Service::ProxyAnswered(const std::shared_ptr<ProxyCall>& call, UpstreamResult result) {
  const std::vector<std::string>& refund_on = call->section->refund_on;
  bool refund = false;
  switch (result.outcome) {
    case UpstreamOutcome::kOk:
      CountProxy("forwarded");
      refund = result.response.result_int() >= 500 && Has(refund_on, "5xx");
      break;
    case UpstreamOutcome::kConnectError:
      CountProxy("upstream_error");
      refund = Has(refund_on, "connect_error");
      break;
    case UpstreamOutcome::kTimeout:
      CountProxy("timeout");
      refund = Has(refund_on, "timeout");
      break;
    case UpstreamOutcome::kError:
      CountProxy("upstream_error");
      break;
    case UpstreamOutcome::kCancelled:  // the upstream may have acted on it: nothing refunded
      CountProxy(call->client_left ? "client_gone" : "cancelled");
      break;
  }
  if (call->upstream_span != nullptr) {
    trace::Span& span = *call->upstream_span;
    if (result.outcome == UpstreamOutcome::kOk) {
      span.Set("http.response.status_code", static_cast<int64_t>(result.response.result_int()));
      if (result.response.result_int() >= 500) span.SetError("upstream answered 5xx");
    } else {
      span.SetError(result.outcome == UpstreamOutcome::kTimeout        ? "timeout"
                    : result.outcome == UpstreamOutcome::kConnectError ? "connect error"
                    : result.outcome == UpstreamOutcome::kCancelled    ? "cancelled"
                                                                       : "upstream error");
    }
    span.End();
  }
  if (refund && !call->consumed.items.empty()) {
    engine_.Refund(call->consumed, clock_->NowMicros());
    if (metrics_ != nullptr) metrics_->proxy_refunds->Inc();
  }
  std::shared_ptr<ProxySettlement> settle;
  if (!refund && result.outcome == UpstreamOutcome::kOk && !call->costed.empty()) {
    settle = Settlement(*call, result.response);
    // Nothing to read from the body (the headers said it all, or there is no body): now.
    if (settle != nullptr && (settle->meter.empty() || result.body == nullptr)) {
      settle->End();
      settle.reset();
    }
  }
  // The headers describe the decision as it was made (a refund is not reflected in them). When
  // a limit applied, the upstream's own fields of the same names give way to sluice's: one answer,
  // one set.
  if (call->decision.Headline() != nullptr) {
    for (const char* name : {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
                             "X-RateLimit-Status", "RateLimit", "RateLimit-Policy"}) {
      result.response.erase(name);
    }
  }
  AddRateLimitHeaders(*call->config, call->decision, result.response);
  CountResponse(result.response);
  if (call->span != nullptr) {
    SpanAnswered(*call->span, result.response);
    call->span->End();  // (a streamed body goes on after it)
  }
  if (result.body == nullptr) return call->responder.Send(std::move(result.response));
  const std::optional<uint64_t> content_length = result.body->content_length();
  metrics::Family<metrics::Counter>* cut =
      metrics_ != nullptr ? metrics_->proxy_answers_cut : nullptr;
  // The holds (if any) go with the body: released when it has streamed, or its client left.
  call->responder.Stream(std::move(result.response), content_length,
                         [body = std::move(result.body), cut, held = call->held,
                          settle = std::move(settle)](std::shared_ptr<BodyWriter> client) {
                           if (client != nullptr)
                             PipeBody(body, std::move(client), cut, held, settle);
                         });
}

std::shared_ptr<ProxySettlement> Service::Settlement(const ProxyCall& call,
                                                     const HttpResponse& answer) {
  // The items that took a reserve with a `settle`, and where each one's actual cost is read.
  engine::Refundable reserved;
  reserved.decided_at_us = call.consumed.decided_at_us;
  std::vector<const rules::CostSource*> sources;
  for (const engine::Refundable::Item& item : call.consumed.items) {
    for (const RouteChecks::Costed& c : call.costed) {
      if (c.request != item.request || c.descriptor != item.descriptor || !c.cost->settle) continue;
      reserved.items.push_back(item);
      sources.push_back(&*c.cost->settle);
      break;
    }
  }
  if (reserved.items.empty()) return nullptr;
  std::vector<std::string> pointers;
  std::vector<int> pointer_of;
  std::vector<std::optional<uint64_t>> known;
  for (const rules::CostSource* source : sources) {
    known.push_back(source->kind == rules::CostSource::Kind::kHeader
                        ? ReadCost(*source, FieldOf(answer, source->name), {})
                        : std::nullopt);
    int at = -1;
    if (source->kind == rules::CostSource::Kind::kJson) {
      const auto it = std::find(pointers.begin(), pointers.end(), source->pointer);
      at = static_cast<int>(it - pointers.begin());
      if (it == pointers.end()) pointers.push_back(source->pointer);
    }
    pointer_of.push_back(at);
  }
  const std::optional<std::string_view> type = FieldOf(answer, "Content-Type");
  auto settle = std::make_shared<ProxySettlement>(std::move(pointers),
                                                  type && type->starts_with("text/event-stream"));
  settle->reserved = std::move(reserved);
  settle->known = std::move(known);
  settle->pointer_of = std::move(pointer_of);
  settle->reconcile = [this](const engine::Refundable& r, std::vector<uint64_t> actual) {
    engine_.Reconcile(r, actual, clock_->NowMicros());
  };
  return settle;
}

}  // namespace sluice::http
