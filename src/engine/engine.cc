// Engine (engine.h): a batch of requests matched against the rules (Collect), decided through
// the backend in one call, settled into responses (Finish, Conclude), recorded for refunds. The
// state keys it writes are in state_key.h. A little over 500 lines in one file: the steps share
// the batch's private types (Pending, Batch) and are one request's way through.

#include "engine/engine.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/decision_trace.h"
#include "engine/state_key.h"
#include "engine/top_keys.h"
#include "fmt/format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::engine {
namespace {

using rules::Domain;
using rules::LimitRule;
using rules::RuleNode;

}  // namespace

std::string LimitName(const AppliedLimit& limit) { return LimitName(limit.name, limit.limit); }

std::string LimitName(std::string_view name, const Limit& limit) {
  if (!name.empty()) return std::string(name);
  // (StrCat, not a format: a traced decision names every limit it applied.)
  return absl::StrCat(limit.requests, "-per-", FormatDuration(limit.window_us));
}

// Is `a` more restrictive than `b`? A deny beats an allow; between denies the longer wait
// (never = longest); between allows the lower remaining, then the later reset.
bool MoreRestrictive(const AppliedLimit& a, const AppliedLimit& b) {
  const bool a_denies = !a.decision.allowed && !a.shadow;
  const bool b_denies = !b.decision.allowed && !b.shadow;
  if (a_denies != b_denies) return a_denies;
  if (a_denies) {
    const auto wait = [](const Decision& d) {
      return d.retry_after_us == Decision::kNever ? INT64_MAX : d.retry_after_us;
    };
    return wait(a.decision) > wait(b.decision);
  }
  if (a.decision.remaining != b.decision.remaining) {
    return a.decision.remaining < b.decision.remaining;
  }
  return a.decision.reset_after_us > b.decision.reset_after_us;
}

namespace {

// One limit of one descriptor waiting for its decision.
struct Pending {
  size_t response;    // which request of the batch
  size_t descriptor;  // which descriptor of it
  size_t limit;       // which of the descriptor's limits
  KeyPlace key;       // in the batch's key bytes
  uint64_t limit_id;
  uint64_t cost;
  bool count_denied;
  backend::FailureMode on_failure;   // the domain's failure_mode
  backend::Consistency consistency;  // the limit's, else the domain's
  uint32_t hot_key_rate;             // backend::Item's: the domain's, for its exact limits
};

// A batch's pending limits. Inline room for the usual request (a descriptor or two, a limit or
// two each), so that deciding it allocates no list.
using PendingList = absl::InlinedVector<Pending, 8>;

// A limit's backend::Item::hot_key_rate: its domain's, when the domain says hot_keys: lease and
// the limit is exact, or cold_keys: lease and it is eventual (its own consistency, else the
// domain's).
uint32_t HotKeyRate(const Domain& domain, std::optional<backend::Consistency> limit) {
  const backend::Consistency c = limit.value_or(domain.consistency);
  const bool split = (domain.lease_hot_keys && c == backend::Consistency::kExact) ||
                     (domain.lease_cold_keys && c == backend::Consistency::kEventual);
  return split ? domain.hot_key_rate : 0;
}

// The limit a request's own LimitOverride asks for: an epoch-aligned fixed window of its unit,
// as envoyproxy/ratelimit; with the domain's calendar_units, a day, week, month or year follows
// the domain's calendar instead.
Limit OverrideLimit(const Domain& domain, const LimitOverride& own) {
  if (auto calendar = domain.unit_calendars.find(own.unit);
      calendar != domain.unit_calendars.end()) {
    return CalendarLimit(own.requests_per_unit, calendar->second);
  }
  return {.algorithm = Algorithm::kFixedWindow,
          .requests = own.requests_per_unit,
          .window_us = own.window_us,
          .burst = std::nullopt};
}

// What a descriptor's limits counted under its entries alone have in common: their limit, id and
// consistency are each one's to fill in.
Pending EntriesPending(const Domain& domain, size_t response, size_t descriptor, uint64_t cost,
                       bool count_denied) {
  return {.response = response,
          .descriptor = descriptor,
          .limit = 0,
          .key = {},
          .limit_id = 0,
          .cost = cost,
          .count_denied = count_denied,
          .on_failure = domain.failure_mode,
          .consistency = domain.consistency,
          .hot_key_rate = 0};
}

// A descriptor's own limit (RLS RateLimitOverride) into `result` and `pending` (from `common`),
// unless it is no valid limit (frontends validate; nonsense is never decided on).
void ApplyOwnLimit(const Domain& domain, const LimitOverride& own, const Pending& common,
                   DescriptorResult& result, PendingList& pending) {
  const Limit limit = OverrideLimit(domain, own);
  if (!ValidateLimit(limit).ok()) return;
  AppliedLimit& applied = result.limits.emplace_back();
  applied.limit = limit;
  applied.unit = own.unit;
  applied.quota = result.quota;
  Pending& p = pending.emplace_back(common);
  p.limit = result.limits.size() - 1;
  p.limit_id = RuleLimitId(fmt::format("{}#override", domain.name), "", limit);
  p.hot_key_rate = HotKeyRate(domain, std::nullopt);
}

// A runtime override's limits for one descriptor: into `result` and `pending` (each from
// `common`, its limit and state filled in), in states of the override's own.
void ApplyOverride(const rules::Override& o, const Domain& domain, const Pending& common,
                   DescriptorResult& result, PendingList& pending) {
  result.limits.reserve(o.limits.size());
  for (const LimitRule& rule : o.limits) {
    AppliedLimit& applied = result.limits.emplace_back();
    applied.limit = rule.limit;
    applied.name = rule.name;
    applied.unit = rule.unit;
    applied.shadow = rule.shadow_mode || domain.shadow_mode;
    applied.quota = result.quota;
    Pending& p = pending.emplace_back(common);
    p.limit = result.limits.size() - 1;
    p.limit_id = rule.state_id;
    p.consistency = rule.consistency.value_or(domain.consistency);
    p.hot_key_rate = HotKeyRate(domain, rule.consistency);
  }
}

// A descriptor's own limit (RLS), or else runtime override `o`'s limits: counted under the
// descriptor's entries alone (appended to `keys`). Out of line: Collect's usual path, the rules',
// stays as small as it was.
ABSL_ATTRIBUTE_NOINLINE void ApplyEntriesLimits(const Domain& domain, const Descriptor& d,
                                                const rules::Override* o, Pending common,
                                                KeyBytes& keys, DescriptorResult& result,
                                                PendingList& pending) {
  common.key = AppendStateKey(d.entries, {}, keys);
  if (d.limit.has_value()) return ApplyOwnLimit(domain, *d.limit, common, result, pending);
  ApplyOverride(*o, domain, common, result, pending);
}

// Matches the descriptors of `request` (the `index`-th of a batch) and lists the limits they
// apply: into `response` (AppliedLimit without a decision yet) and `pending`, with their state
// keys appended to `keys`. A runtime override in `overrides` (may be null) in force at `now_us`
// outranks the rules for the descriptors it applies to.
void Collect(const rules::Config& config, const rules::OverrideSet* overrides, int64_t now_us,
             const Request& request, size_t index, Response& response, KeyBytes& keys,
             PendingList& pending) {
  const size_t n = request.descriptors.size();
  response.descriptors.resize(n);
  const Domain* domain = config.FindDomain(request.domain);
  response.domain_found = domain != nullptr;
  if (domain == nullptr) return;

  const bool count_denied =
      request.record || domain->count_denied.value_or(config.settings.count_denied);
  // (Global shadow mode is not a shadow of every limit: it admits after the decision, see
  // Conclude, so that statuses keep their codes.)
  const bool domain_shadow = domain->shadow_mode;
  const bool all_quota = config.settings.quota_mode;

  // Match every descriptor, then drop the rules another matched rule replaces. The state key
  // needs each descriptor's path (the node matched at each level, at most one per entry): all
  // paths share `nodes`, sized up front so that the spans into it stay valid.
  struct Match {
    const RuleNode* rule = nullptr;
    std::span<const RuleNode* const> path;
  };
  size_t levels = 0;
  for (const Descriptor& d : request.descriptors) levels += d.entries.size();
  absl::InlinedVector<const RuleNode*, 8> nodes(levels);
  absl::InlinedVector<Match, 4> matches(n);
  absl::flat_hash_set<std::string_view> replaced;  // views of the config's `replaces`
  // The descriptors' overrides in force, when their domain has any (else empty).
  absl::InlinedVector<const rules::Override*, 4> overridden;
  if (overrides != nullptr && overrides->HasDomain(domain->name)) overridden.resize(n);
  for (size_t i = 0, used = 0; i < n; ++i) {
    const Descriptor& d = request.descriptors[i];
    if (d.limit.has_value()) continue;
    if (!overridden.empty()) {
      overridden[i] = overrides->Find(domain->name, d.entries, now_us);
      if (overridden[i] != nullptr) continue;  // no rule of it applies, nor replaces another
    }
    const std::span<const RuleNode*> room(nodes.data() + used, d.entries.size());
    used += d.entries.size();
    size_t depth = 0;
    matches[i].rule = rules::MatchDescriptor(*domain, d.entries, room, &depth);
    matches[i].path = room.first(depth);
    if (matches[i].rule != nullptr) {
      for (const std::string& name : matches[i].rule->replaces) replaced.insert(name);
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const Descriptor& d = request.descriptors[i];
    DescriptorResult& result = response.descriptors[i];
    // A descriptor's own hits_addend (0 = peek) wins; the request's counts as at least 1.
    const uint64_t cost = d.hits_addend.value_or(std::max<uint64_t>(1, request.hits_addend));
    result.quota = all_quota;
    if (d.limit.has_value() || (!overridden.empty() && overridden[i] != nullptr)) {
      ApplyEntriesLimits(*domain, d, overridden.empty() ? nullptr : overridden[i],
                         EntriesPending(*domain, index, i, cost, count_denied), keys, result,
                         pending);
      continue;
    }
    const RuleNode* node = matches[i].rule;
    if (node == nullptr || (!node->rate_limit_name.empty() && !replaced.empty() &&
                            replaced.contains(std::string_view(node->rate_limit_name)))) {
      continue;
    }
    result.rule = node;
    if (node->unlimited) {
      result.unlimited = true;
      result.quota = false;  // an unlimited descriptor takes no part, as upstream
      continue;
    }
    result.quota = all_quota || node->quota_mode;
    const std::vector<LimitRule>* limits = &node->limits;
    std::string_view plan_name;
    if (!node->plan_from.empty()) {
      const rules::Plan* plan = rules::ChoosePlan(*domain, *node, d.entries).plan;
      if (plan == nullptr) continue;
      limits = &plan->limits;
      plan_name = plan->name;
      result.plan = plan->name;
    }
    const KeyPlace key = AppendStateKey(d.entries, matches[i].path, keys);
    result.limits.reserve(limits->size());
    for (const LimitRule& rule : *limits) {
      // Filled in place: no temporary to copy the strings into first.
      AppliedLimit& applied = result.limits.emplace_back();
      applied.limit = rule.limit;
      applied.name = rule.name;
      applied.unit = rule.unit;
      applied.shadow = rule.shadow_mode || node->shadow_mode || domain_shadow;
      applied.quota = result.quota;
      const uint64_t limit_id =
          plan_name.empty() ? rule.state_id : RuleLimitId(node->path, plan_name, rule.limit);
      pending.push_back({index, i, result.limits.size() - 1, key, limit_id, cost, count_denied,
                         domain->failure_mode, rule.consistency.value_or(domain->consistency),
                         HotKeyRate(*domain, rule.consistency)});
    }
  }
}

// With every decision in place: each descriptor's code and headline, the request's headline and
// lowest remaining. Returns whether the request has quota-mode descriptors and every one of them
// is over its limit (all its quotas spent).
bool Finish(Response& response) {
  size_t quotas = 0, spent = 0;
  for (size_t i = 0; i < response.descriptors.size(); ++i) {
    DescriptorResult& result = response.descriptors[i];
    for (size_t j = 0; j < result.limits.size(); ++j) {
      const AppliedLimit& limit = result.limits[j];
      if (!limit.decision.allowed && !limit.shadow)
        result.code = DescriptorResult::Code::kOverLimit;
      if (result.headline < 0 || MoreRestrictive(limit, result.limits[result.headline])) {
        result.headline = static_cast<int>(j);
      }
      if (response.remaining < 0 || limit.decision.remaining < response.remaining) {
        response.remaining = limit.decision.remaining;
      }
    }
    if (result.quota) {
      ++quotas;
      if (result.code == DescriptorResult::Code::kOverLimit) ++spent;
    }
    if (result.headline >= 0 &&
        (response.headline_descriptor < 0 ||
         MoreRestrictive(result.limits[result.headline], *response.Headline()))) {
      response.headline_descriptor = static_cast<int>(i);
      response.headline_limit = result.headline;
    }
  }
  return quotas > 0 && spent == quotas;
}

// Whether an admitted limit's decision leaves it near its limit: more used of it than the
// settings' near_limit_ratio of its capacity.
bool NearLimit(const AppliedLimit& limit, float ratio) {
  const uint64_t capacity = limit.limit.Capacity();
  const uint64_t left = static_cast<uint64_t>(std::max<int64_t>(0, limit.decision.remaining));
  const uint64_t used = capacity > left ? capacity - left : 0;
  // As upstream: the product in single precision, then floor.
  return used > static_cast<uint64_t>(std::floor(static_cast<float>(capacity) * ratio));
}

// The batch's verdict once the store has decided (`store_allowed`, all-or-nothing, with
// quota-mode limits not denying by themselves) and every decision is applied (Batch::Apply):
// denied as well when some request has spent all its quotas, and then what the store consumed
// must be given back (the returned flag); never a denial in global shadow mode, which admits
// what would be denied. Finishes the responses.
bool Conclude(const rules::Config& config, std::span<Response> responses, bool store_allowed) {
  bool spent = false;
  for (Response& response : responses) spent = Finish(response) || spent;
  const bool allowed = (store_allowed && !spent) || config.settings.shadow_mode;
  for (Response& response : responses) response.allowed = allowed;
  return store_allowed && spent;
}

}  // namespace

// Every limit of a set of requests, listed for the backend. Holds pointers into the responses
// and string_views into its own key bytes: never moved once built.
struct Engine::Batch {
  KeyBytes keys;  // inline: never moved (see above), and not grown once built
  PendingList pending;
  absl::InlinedVector<backend::Item, 8> items;
  absl::InlinedVector<AppliedLimit*, 8> applied;

  Batch() = default;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  void Build(const rules::Config& config, const rules::OverrideSet* overrides, int64_t now_us,
             std::span<const Request> requests, std::span<Response> responses) {
    for (size_t r = 0; r < requests.size(); ++r) {
      Collect(config, overrides, now_us, requests[r], r, responses[r], keys, pending);
    }
    const auto instances = static_cast<uint32_t>(std::max(1, config.settings.local_instances));
    // (No result.limits grows any more: pointers into them are stable.)
    for (const Pending& p : pending) {
      AppliedLimit& limit = responses[p.response].descriptors[p.descriptor].limits[p.limit];
      applied.push_back(&limit);
      items.push_back({.limit = &limit.limit,
                       .limit_id = p.limit_id,
                       .key = std::string_view(keys.data() + p.key.offset, p.key.size),
                       .cost = p.cost,
                       .count_denied = p.count_denied,
                       // A quota-mode limit does not deny the request by itself (Conclude).
                       .shadow = limit.shadow || limit.quota,
                       .sharing = {.on_failure = p.on_failure,
                                   .instances = instances,
                                   .consistency = p.consistency,
                                   .hot_key_rate = p.hot_key_rate}});
    }
  }

  // Item k's decision into its limit's answer; an admitted limit's near_limit from the
  // settings' near_limit_ratio (a denied one's stays false).
  void Apply(size_t k, const Decision& decision, float near_limit_ratio) {
    AppliedLimit& limit = *applied[k];
    limit.decision = decision;
    if (limit.shadow && !decision.allowed) limit.decision.remaining = 0;
    if (decision.allowed) limit.near_limit = NearLimit(limit, near_limit_ratio);
  }
};

namespace {

// How a request was answered when the backend's failure policy decided it.
BackendState FallbackState(const rules::Config& config, const Request& request) {
  const rules::Domain* domain = config.FindDomain(request.domain);
  switch (domain != nullptr ? domain->failure_mode : rules::FailureMode::kOpen) {
    case rules::FailureMode::kClosed:
      return BackendState::kFailedClosed;
    case rules::FailureMode::kLocal:
      return BackendState::kLocal;
    case rules::FailureMode::kOpen:
      break;
  }
  return BackendState::kFailedOpen;
}

}  // namespace

// What an admitted batch consumed, for a refund.
void Engine::Record(const Batch& batch, std::span<const Decision> decisions, int64_t decided_at_us,
                    Refundable* consumed, bool denied) {
  consumed->decided_at_us = decided_at_us;
  for (size_t k = 0; k < batch.items.size(); ++k) {
    const backend::Item& item = batch.items[k];
    if (!decisions[k].allowed || item.cost == 0) continue;  // a shadow deny took nothing
    if (denied && item.count_denied) continue;  // a denied request counts there (count_denied)
    consumed->items.push_back({.limit = *item.limit,
                               .limit_id = item.limit_id,
                               .key = std::string(item.key),
                               .cost = item.cost,
                               .request = static_cast<uint32_t>(batch.pending[k].response),
                               .descriptor = static_cast<uint32_t>(batch.pending[k].descriptor)});
  }
}

inline void Engine::SettleDecided(const rules::Config& config, std::span<Response> responses,
                                  Batch& batch, std::span<const Decision> decisions,
                                  const backend::Outcome& outcome, int64_t now_us,
                                  Refundable* consumed) {
  const float ratio = config.settings.near_limit_ratio;
  for (size_t k = 0; k < batch.items.size(); ++k) batch.Apply(k, decisions[k], ratio);
  if (Conclude(config, responses,
               outcome.allowed)) {  // every quota spent: give back what was taken
    Refundable taken;
    Record(batch, decisions, outcome.decided_at_us, &taken, /*denied=*/true);
    Refund(taken, now_us);
  } else if (consumed != nullptr && outcome.allowed) {
    Record(batch, decisions, outcome.decided_at_us, consumed);
  }
}

void Engine::Settle(const rules::Config& config, std::span<const Request> requests,
                    std::span<Response> responses, Batch& batch,
                    std::span<const Decision> decisions, const backend::Outcome& outcome,
                    int64_t now_us, Refundable* consumed) {
  const float ratio = config.settings.near_limit_ratio;
  if (!outcome.status.ok()) {  // failed, and no policy answered: refuse
    for (Response& response : responses) response.backend = BackendState::kFailedClosed;
    for (size_t k = 0; k < batch.items.size(); ++k) {
      batch.Apply(k,
                  {.allowed = false,
                   .remaining = 0,
                   .retry_after_us = backend::kUnavailableRetryAfterUs,
                   .reset_after_us = backend::kUnavailableRetryAfterUs,
                   .delay_us = 0},
                  ratio);
    }
    Conclude(config, responses, false);
    return;
  }
  if (outcome.fell_back) {
    for (size_t k = 0; k < batch.items.size(); ++k) batch.Apply(k, decisions[k], ratio);
    for (size_t r = 0; r < requests.size(); ++r) {
      responses[r].backend = FallbackState(config, requests[r]);
    }
    // (What the policy admitted is not recorded: the backend never counted it.)
    Conclude(config, responses, outcome.allowed);
    return;
  }
  SettleDecided(config, responses, batch, decisions, outcome, now_us, consumed);
}

// A CheckAllAsync call waiting for the backend.
struct Engine::AsyncCall {
  std::shared_ptr<const rules::Config> config;
  std::vector<Request> requests;
  std::vector<Response> responses;
  Batch batch;
  absl::InlinedVector<Decision, 8> decisions;
  int64_t now_us = 0;
  Done done;
  Refundable* consumed = nullptr;
  std::optional<DecisionTrace> trace;  // when the caller's request is traced
};

void Engine::RequireInline() const {
  if (!backend_->answers_inline()) {
    std::fprintf(stderr,
                 "sluice: a synchronous decision on a backend that does not answer inline\n");
    std::abort();
  }
}

inline void Engine::DecideInline(const rules::Config& config, std::span<const Request> requests,
                                 std::span<Response> responses, Batch& batch, int64_t now_us,
                                 Refundable* consumed, DecisionTrace* traced) {
  RequireInline();
  absl::InlinedVector<Decision, 8> decisions(batch.items.size());
  const backend::Outcome outcome =
      backend_->DecideNow(std::span(batch.items.data(), batch.items.size()), now_us,
                          std::span(decisions.data(), decisions.size()));
  if (traced != nullptr) traced->Answered(outcome);
  const std::span<const Decision> decided(decisions.data(), decisions.size());
  if (outcome.status.ok() && !outcome.fell_back) {  // the usual case, inline
    SettleDecided(config, responses, batch, decided, outcome, now_us, consumed);
  } else {
    Settle(config, requests, responses, batch, decided, outcome, now_us, consumed);
  }
}

Response Engine::Check(const rules::Config& config, const Request& request, int64_t now_us) {
  Response response;
  CheckAll(config, std::span(&request, 1), std::span(&response, 1), now_us, nullptr);
  return response;
}

std::vector<Response> Engine::CheckAll(const rules::Config& config,
                                       std::span<const Request> requests, int64_t now_us,
                                       Refundable* consumed) {
  std::vector<Response> responses(requests.size());
  CheckAll(config, requests, std::span(responses), now_us, consumed);
  return responses;
}

void Engine::CheckAll(const rules::Config& config, std::span<const Request> requests,
                      std::span<Response> responses, int64_t now_us, Refundable* consumed) {
  Batch batch;
  if (overrides_ == nullptr || !overrides_->any()) {  // the usual case: no shared_ptr copied
    batch.Build(config, nullptr, now_us, requests, responses);
  } else {
    const std::shared_ptr<const rules::OverrideSet> overrides = overrides_->Current();
    batch.Build(config, overrides.get(), now_us, requests, responses);
  }
  if (trace::CurrentSpan::Get() == nullptr) {  // the usual case: not traced
    DecideInline(config, requests, responses, batch, now_us, consumed);
  } else {
    std::optional<DecisionTrace> traced = DecisionTrace::Start(*backend_, batch.items.size());
    DecideInline(config, requests, responses, batch, now_us, consumed, &*traced);
    traced->Finish(requests, responses);
  }
  if (top_keys_ != nullptr) Observe(requests, batch, now_us);
}

void Engine::Observe(std::span<const Request> requests, const Batch& batch, int64_t now_us) const {
  if (!top_keys_->Sample()) return;
  for (size_t k = 0; k < batch.items.size(); ++k) {
    const backend::Item& item = batch.items[k];
    const Request& request = requests[batch.pending[k].response];
    if (!request.observed) continue;
    top_keys_->Record(request.domain, item.limit_id, *batch.applied[k], item.key,
                      top_keys_->sample(), now_us);
  }
}

void Engine::Refund(const Refundable& consumed, int64_t now_us) {
  if (consumed.items.empty()) return;
  absl::InlinedVector<backend::Item, 8> items;
  for (const Refundable::Item& c : consumed.items) {
    items.push_back({.limit = &c.limit, .limit_id = c.limit_id, .key = c.key, .cost = c.cost});
  }
  // Nothing in `items` needs to outlive the call (Backend::Refund).
  backend_->Refund(std::span(items.data(), items.size()), consumed.decided_at_us, now_us,
                   [](absl::Status) {});
}

void Engine::Reconcile(const Refundable& reserved, std::span<const uint64_t> actual, int64_t now_us,
                       std::function<void(absl::Status)> done) {
  // What was over-estimated, given back; what was under-estimated, recorded past the limit.
  // (Neither call needs `back` or `excess` to outlive it.)
  absl::InlinedVector<backend::Item, 8> back, excess;
  for (size_t i = 0; i < reserved.items.size() && i < actual.size(); ++i) {
    const Refundable::Item& c = reserved.items[i];
    if (actual[i] == c.cost) continue;
    (actual[i] < c.cost ? back : excess)
        .push_back({.limit = &c.limit,
                    .limit_id = c.limit_id,
                    .key = c.key,
                    .cost = actual[i] < c.cost ? c.cost - actual[i] : actual[i] - c.cost});
  }
  // `done` once the last of the (at most two) calls has answered, with the first failure.
  const int calls = (back.empty() ? 0 : 1) + (excess.empty() ? 0 : 1);
  if (calls == 0) {
    if (done) done(absl::OkStatus());
    return;
  }
  struct Waiting {
    absl::Mutex mu;
    int calls ABSL_GUARDED_BY(mu) = 0;
    absl::Status first ABSL_GUARDED_BY(mu);  // the first failure
    std::function<void(absl::Status)> done;
  };
  auto waiting = std::make_shared<Waiting>();
  {
    absl::MutexLock lock(&waiting->mu);
    waiting->calls = calls;
  }
  waiting->done = std::move(done);
  auto answered = [waiting](absl::Status status) {
    absl::Status first;
    {
      absl::MutexLock lock(&waiting->mu);
      if (waiting->first.ok()) waiting->first = std::move(status);
      if (--waiting->calls != 0) return;
      first = waiting->first;
    }
    if (waiting->done) waiting->done(std::move(first));
  };
  if (!back.empty()) {
    backend_->Refund(std::span(back.data(), back.size()), reserved.decided_at_us, now_us, answered);
  }
  if (!excess.empty()) {
    backend_->RecordPastLimits(std::span(excess.data(), excess.size()), now_us, answered);
  }
}

size_t Engine::Reset(const rules::Config& config, const Request& request) {
  RequireInline();
  size_t forgotten = 0;
  ResetOn(config, request, [&forgotten](absl::StatusOr<size_t> n) { forgotten = n.value_or(0); });
  return forgotten;
}

void Engine::CheckAllAsync(std::shared_ptr<const rules::Config> config,
                           std::vector<Request> requests, int64_t now_us, Done done,
                           Refundable* consumed) {
  if (backend_->answers_inline()) return done(CheckAll(*config, requests, now_us, consumed));
  auto call = std::make_shared<AsyncCall>();
  call->config = std::move(config);
  call->requests = std::move(requests);
  call->responses.resize(call->requests.size());
  call->now_us = now_us;
  call->done = std::move(done);
  call->consumed = consumed;
  call->batch.Build(*call->config, CurrentOverrides().get(), now_us, call->requests,
                    std::span(call->responses));
  call->trace = DecisionTrace::Start(*backend_, call->batch.items.size());
  if (call->batch.items.empty()) {
    Conclude(*call->config, std::span(call->responses), true);
    if (call->trace) call->trace->Finish(call->requests, call->responses);
    return call->done(std::move(call->responses));
  }
  call->decisions.resize(call->batch.items.size());
  backend_->Decide(std::span(call->batch.items.data(), call->batch.items.size()), now_us,
                   std::span(call->decisions.data(), call->decisions.size()),
                   [this, call](const backend::Outcome& outcome) {
                     if (call->trace) call->trace->Answered(outcome);
                     Settle(*call->config, call->requests, std::span(call->responses), call->batch,
                            std::span(call->decisions.data(), call->decisions.size()), outcome,
                            call->now_us, call->consumed);
                     if (top_keys_ != nullptr) Observe(call->requests, call->batch, call->now_us);
                     if (call->trace) call->trace->Finish(call->requests, call->responses);
                     call->done(std::move(call->responses));
                   });
}

void Engine::ResetAsync(std::shared_ptr<const rules::Config> config, Request request,
                        ResetDone done) {
  ResetOn(*config, request, std::move(done));
}

void Engine::ResetOn(const rules::Config& config, const Request& request, ResetDone done) {
  // The rules' states, and, for a descriptor with an override (even one that has ended, as of
  // time 0), the override's too: "unblock this customer" leaves nothing of theirs counted.
  Response response;
  Batch batch;
  batch.Build(config, nullptr, 0, std::span(&request, 1), std::span(&response, 1));
  const std::shared_ptr<const rules::OverrideSet> overrides = CurrentOverrides();
  Response overridden_response;
  Batch overridden;
  absl::InlinedVector<backend::Item, 8> items(batch.items.begin(), batch.items.end());
  if (overrides != nullptr) {
    overridden.Build(config, overrides.get(), 0, std::span(&request, 1),
                     std::span(&overridden_response, 1));
    for (const backend::Item& item : overridden.items) {
      const bool listed = std::any_of(items.begin(), items.end(), [&](const backend::Item& i) {
        return i.limit_id == item.limit_id && i.key == item.key;
      });
      if (!listed) items.push_back(item);
    }
  }
  // Nothing in the items needs to outlive the call (Backend::Reset).
  backend_->Reset(std::span(items.data(), items.size()), std::move(done));
}

Response Combine(std::span<Response> parts) {
  if (parts.size() == 1) return std::move(parts.front());  // already finished: nothing to merge
  Response combined;
  for (Response& part : parts) {
    combined.domain_found = combined.domain_found || part.domain_found;
    combined.allowed = combined.allowed && part.allowed;
    combined.backend = std::max(combined.backend, part.backend);
    for (DescriptorResult& d : part.descriptors) combined.descriptors.push_back(std::move(d));
  }
  Finish(combined);
  return combined;
}

}  // namespace sluice::engine
