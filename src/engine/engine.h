// The decision engine: request -> matched limits -> store -> response.
//
// Frontends (replay, HTTP, gRPC) turn their input into a Request and render the Response; the
// engine matches rules on an immutable Config snapshot and decides every matched limit of the
// request at once, all-or-nothing. Safe for concurrent use.

#ifndef SLUICE_ENGINE_ENGINE_H_
#define SLUICE_ENGINE_ENGINE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "backend/backend.h"
#include "backend/limit_id.h"
#include "rules/config.h"
#include "rules/matcher.h"
#include "rules/override_book.h"
#include "rules/overrides.h"
#include "sluice/limit.h"

namespace sluice::engine {

using rules::Entry;

class TopKeys;        // engine/top_keys.h
class DecisionTrace;  // engine/decision_trace.h

// A limit sent with the request instead of the configured ones (RLS RateLimitOverride):
// requests_per_unit per unit, an epoch-aligned fixed window, as envoyproxy/ratelimit does.
struct LimitOverride {
  uint64_t requests_per_unit = 0;
  int64_t window_us = 0;
  std::string unit;  // "second", ... as received
};

// Requests and answers keep their lists inline for the usual sizes (a descriptor of a few
// entries, a limit or two), so that deciding one allocates no list: they are built for every
// request.
using Entries = absl::InlinedVector<Entry, 2>;

struct Descriptor {
  Entries entries;
  std::optional<LimitOverride> limit;
  std::optional<uint64_t> hits_addend;  // overrides the request's; 0 = look without consuming
};

using Descriptors = absl::InlinedVector<Descriptor, 1>;

struct Request {
  std::string domain;
  Descriptors descriptors;
  uint64_t hits_addend = 1;  // 0 counts as 1, as in RLS
  bool observed = true;      // recorded into top keys (the admin API's own looks are not)
  // Every limit records the cost whatever it decides, as count_denied does (POST /v1/report: a
  // cost already spent is counted, even past the limit).
  bool record = false;
};

// The most a client may ask for in one request (/v1/check, /json, gRPC ShouldRateLimit); more is
// a bad request. One request is decided at once on one thread, so an unbounded list would hold
// that thread and every connection on it (a body of 15000 descriptors took 73 ms). Envoy sends
// one descriptor per matching `rate_limits` action list and one entry per action: a handful.
inline constexpr size_t kMaxRequestDescriptors = 64;
inline constexpr size_t kMaxDescriptorEntries = 32;

// One limit applied to one descriptor.
struct AppliedLimit {
  Limit limit;
  std::string name;
  std::string unit;  // as configured with `unit:`, else empty
  bool shadow = false;
  bool quota = false;  // its descriptor is in quota mode (DescriptorResult::quota)
  // Admitted with what is used of the limit past the settings' near_limit_ratio of it.
  bool near_limit = false;
  Decision decision;
};

using AppliedLimits = absl::InlinedVector<AppliedLimit, 1>;

struct DescriptorResult {
  enum class Code { kOk, kOverLimit };
  Code code = Code::kOk;
  bool unlimited = false;  // matched an `unlimited: true` rule
  // Quota mode (a rule's `quota_mode: true`, or the settings' for every descriptor but an
  // unlimited one), as envoyproxy/ratelimit decides it: such a descriptor over its limit keeps
  // its OVER_LIMIT code but does not deny the request by itself; the request is denied when some
  // descriptor not in quota mode is over its limit, or when every quota-mode descriptor is. Its
  // limits then consume nothing where they deny, like shadow ones, while the others of the
  // request consume as usual; a request denied because all its quotas are spent gives back
  // what the others consumed (all-or-nothing, as always).
  bool quota = false;
  const rules::RuleNode* rule = nullptr;  // null: no rule (or an override)
  std::string plan;                       // the plan whose limits applied, if any
  AppliedLimits limits;
  // Index into `limits` of the one that speaks for the descriptor (see Response::headline), or -1.
  int headline = -1;
};

// How the backend took part in a decision.
enum class BackendState {
  kOk,            // decided by the backend
  kFailedOpen,    // the backend failed; allowed by failure_mode open
  kLocal,         // the backend failed; decided in this process at limit / instances
  kFailedClosed,  // the backend failed; denied by failure_mode closed (HTTP 503, gRPC UNAVAILABLE)
};

using DescriptorResults = absl::InlinedVector<DescriptorResult, 1>;

struct Response {
  bool domain_found = false;
  BackendState backend = BackendState::kOk;
  bool allowed = true;
  DescriptorResults descriptors;
  // The most restrictive limit over the whole request: on a deny the denying limit with the
  // longest retry_after; otherwise the lowest remaining. -1 when no limit applied.
  int headline_descriptor = -1;
  int headline_limit = -1;
  // The lowest remaining over every applied limit (on a deny: with nothing consumed); -1 when
  // no limit applied.
  int64_t remaining = -1;

  const AppliedLimit* Headline() const {
    if (headline_descriptor < 0) return nullptr;
    return &descriptors[static_cast<size_t>(headline_descriptor)]
                .limits[static_cast<size_t>(headline_limit)];
  }
};

// What an admitted request consumed, kept to give it back later (Engine::Refund). Self-contained
// (limits and keys are copies), so it may outlive the config snapshot it was decided on.
struct Refundable {
  struct Item {
    Limit limit;
    uint64_t limit_id = 0;
    std::string key;
    uint64_t cost = 0;
    uint32_t request = 0;     // which request of the batch it is of
    uint32_t descriptor = 0;  // which descriptor of that request
  };
  std::vector<Item> items;    // only limits that consumed (allowed, cost > 0)
  int64_t decided_at_us = 0;  // in the backend's clock
};

class Engine {
 public:
  // Decides on `backend` (not owned; it must outlive the engine).
  explicit Engine(backend::Backend* backend) : backend_(backend) {}

  // Records every limit it decides into `top` (not owned; null, the default: nothing is
  // recorded). Set before deciding.
  void set_top_keys(TopKeys* top) { top_keys_ = top; }
  TopKeys* top_keys() const { return top_keys_; }

  // Decides with the runtime overrides of `book` (not owned; null, the default: none). Set
  // before deciding.
  void set_overrides(const rules::OverrideBook* book) { overrides_ = book; }
  const rules::OverrideBook* overrides() const { return overrides_; }

  // Whether the backend answers inline: then the synchronous calls below may be used.
  bool answers_inline() const { return backend_->answers_inline(); }
  backend::Backend& backend() const { return *backend_; }

  // CheckAll on any backend. When it fails and its failure policy answers (backend::Failover),
  // Response::backend says how for each request, from its domain's failure_mode; a backend that
  // fails with no policy refuses (kFailedClosed). `done` runs once, on any thread, perhaps
  // before this returns. With `consumed` (which must live until `done` runs), an admitted batch
  // records there what it consumed (for Refund).
  using Done = std::function<void(std::vector<Response>)>;
  void CheckAllAsync(std::shared_ptr<const rules::Config> config, std::vector<Request> requests,
                     int64_t now_us, Done done, Refundable* consumed = nullptr);
  // Reset on any backend.
  using ResetDone = backend::Backend::ResetDone;
  void ResetAsync(std::shared_ptr<const rules::Config> config, Request request, ResetDone done);

  // The synchronous calls: only on a backend that answers inline (answers_inline()); they abort
  // on any other, where they would return before the decision.
  Response Check(const rules::Config& config, const Request& request, int64_t now_us);

  // Decides several requests (e.g. one per domain) as one: all-or-nothing over every limit of
  // every request, so either all consume or none does. Each response's `allowed` is the
  // batch's. One response per request, in order.
  // With `consumed`, an admitted batch also records what it consumed there (for Refund).
  std::vector<Response> CheckAll(const rules::Config& config, std::span<const Request> requests,
                                 int64_t now_us, Refundable* consumed = nullptr);
  // The same into `responses` (as many as `requests`, freshly made), for a caller that keeps
  // the answers where they will be used.
  void CheckAll(const rules::Config& config, std::span<const Request> requests,
                std::span<Response> responses, int64_t now_us, Refundable* consumed = nullptr);

  // Forgets the state of every limit the request's descriptors match ("unblock this customer").
  // Returns how many states there were.
  size_t Reset(const rules::Config& config, const Request& request);

  // Gives back what an admitted request consumed (see MemoryStore::Refund for what that means
  // per algorithm): e.g. the upstream it was admitted for failed. On any backend; in the
  // background when it does not answer inline (a refund that fails leaves the quota consumed,
  // which never over-admits).
  void Refund(const Refundable& consumed, int64_t now_us);

  // Settles what `reserved` consumed at its items' costs (an estimate) to what it turned out to
  // cost: item i's to actual[i] (as many as reserved.items). Where the actual cost is lower the
  // difference is given back (as Refund); where it is higher the excess is recorded whatever the
  // limits say, as count_denied records a denied request: a state may go past its limit, and its
  // key then waits until it is back under. A limit's penalty takes no part (the excess is no
  // offence). On any backend; `done` (may be empty) runs once both are applied, on any thread,
  // perhaps before this returns, with the first failure (a settlement that failed leaves the
  // estimate, or what of it was applied).
  void Reconcile(const Refundable& reserved, std::span<const uint64_t> actual, int64_t now_us,
                 std::function<void(absl::Status)> done = {});

 private:
  struct Batch;
  struct AsyncCall;
  // Reset's work: the items `request` matches, forgotten on the backend.
  void ResetOn(const rules::Config& config, const Request& request, ResetDone done);
  // Dies unless the backend answers inline (the synchronous calls).
  void RequireInline() const;
  // Decides `batch` (built from `requests` into `responses`) on the backend, inline.
  // `traced`: the decision's spans, when its caller's request is traced.
  void DecideInline(const rules::Config& config, std::span<const Request> requests,
                    std::span<Response> responses, Batch& batch, int64_t now_us,
                    Refundable* consumed, DecisionTrace* traced = nullptr);
  // With the backend's `outcome` and `decisions` for `batch`: the responses' decisions, each
  // request's backend state, the verdict; what was consumed into `consumed`, or given back when
  // every quota of a request was spent.
  void Settle(const rules::Config& config, std::span<const Request> requests,
              std::span<Response> responses, Batch& batch, std::span<const Decision> decisions,
              const backend::Outcome& outcome, int64_t now_us, Refundable* consumed);
  // Settle when the backend decided (status ok, no fallback), the usual case (DecideInline
  // calls it directly): the decisions applied to the responses, the verdict, what was consumed
  // recorded or given back.
  void SettleDecided(const rules::Config& config, std::span<Response> responses, Batch& batch,
                     std::span<const Decision> decisions, const backend::Outcome& outcome,
                     int64_t now_us, Refundable* consumed);
  // What the batch consumed, into `consumed`; of a request `denied` after all (its quotas spent),
  // what is to be given back: not what count_denied keeps counted.
  static void Record(const Batch& batch, std::span<const Decision> decisions, int64_t decided_at_us,
                     Refundable* consumed, bool denied = false);

  // Each decided limit of `batch` into top_keys_, when set.
  void Observe(std::span<const Request> requests, const Batch& batch, int64_t now_us) const;

  // The overrides in force now (a snapshot; null when there are none or no book).
  std::shared_ptr<const rules::OverrideSet> CurrentOverrides() const {
    return overrides_ == nullptr ? nullptr : overrides_->Current();
  }

  backend::Backend* backend_;
  TopKeys* top_keys_ = nullptr;
  const rules::OverrideBook* overrides_ = nullptr;
};

// What answers call a limit's size (X-RateLimit-Limit, RateLimit-Policy's q, /v1/check's
// "limit"): its requests per window, or its burst when that is larger (a token bucket of 100/s
// with a burst of 200 admits 200 at once), so that no remaining ever exceeds it.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint64_t ReportedLimit(const Limit& limit) {
  return std::max(limit.requests, limit.Capacity());
}

// The name answers, metrics and logs give a limit: its `name:`, else "<requests>-per-<window>"
// ("100-per-1s", FormatDuration's spelling). (RLS current_limit.name stays the configured one,
// empty when there is none, as upstream.)
std::string LimitName(const AppliedLimit& limit);
// The same for a configured limit and its `name:` (empty: none).
std::string LimitName(std::string_view name, const Limit& limit);

// Is `a` more restrictive than `b`? A deny (not in shadow mode) beats an allow; between denies
// the longer wait (never = longest); between allows the lower remaining, then the later reset.
// The order the engine picks headlines by; renderers that list limits use it too.
bool MoreRestrictive(const AppliedLimit& a, const AppliedLimit& b);

// One response for several requests decided together by CheckAll: their descriptors in order,
// with the headline and the lowest remaining over all of them. `parts` are as CheckAll returns
// them (a single part is returned as it is); they are moved from.
Response Combine(std::span<Response> parts);

using backend::RuleLimitId;  // (backend/limit_id.h) the state identity of a configured limit

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_ENGINE_H_
