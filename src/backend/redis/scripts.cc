#include "backend/redis/scripts.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "backend/redis/decide_lua.h"  // generated from scripts/decide/: kDecideLua
#include "fmt/format.h"

namespace sluice::redis {
namespace {

int AlgorithmCode(Algorithm a) {
  switch (a) {
    case Algorithm::kTokenBucket:
      return 0;
    case Algorithm::kLeakyBucket:
      return 1;
    case Algorithm::kFixedWindow:
      return 2;
    case Algorithm::kSlidingLog:
      return 3;
    case Algorithm::kSlidingWindow:
      return 4;
  }
  return 0;
}

}  // namespace

std::string_view DecideScript() { return kDecideLua; }

namespace {

// An item's six numbers as decide.lua reads them (struct '<dddddd'): its kind. Flags: 1
// count_denied, 2 shadow, 4 its state is a hash field, 8 a calendar window.
constexpr size_t kKindBytes = 6 * sizeof(double);

// A calendar window's two numbers in place of W and the capacity (decide.lua, "Calendar
// windows"): the boundary nearest `near_us`, and the end of the window that starts there.
std::pair<int64_t, int64_t> CalendarBoundaries(const Calendar& calendar, int64_t near_us) {
  const Calendar::Window window = calendar.WindowAt(near_us);
  if (near_us - window.start_us < window.end_us - near_us) return {window.start_us, window.end_us};
  return {window.end_us, calendar.WindowAt(window.end_us).end_us};
}

// A decision's kind with a penalty: six more doubles (decide.lua, "Penalties").
constexpr size_t kPenalizedKindBytes = 2 * kKindBytes;

// An item's kind as decide.lua reads it: six little-endian doubles, written to `out`; with
// `penalty` (decisions only) and a penalized limit, its six numbers after them (out has room
// for kPenalizedKindBytes). Returns the bytes written.
size_t PackKindInto(const DecideItem& it, char* out, bool penalty = false) {
  const Limit& l = *it.limit;
  penalty = penalty && l.penalty.has_value();
  int flags = (it.count_denied ? 1 : 0) | (it.shadow ? 2 : 0) | (it.field.empty() ? 0 : 4) |
              (penalty ? 16 : 0);
  double w = static_cast<double>(l.window_us), capacity = static_cast<double>(l.Capacity());
  if (l.calendar) {
    const auto [boundary, end] = CalendarBoundaries(*l.calendar, it.near_us);
    w = static_cast<double>(boundary);
    capacity = static_cast<double>(end);
    flags |= 8;
  }
  const double numbers[6] = {static_cast<double>(AlgorithmCode(l.algorithm)),
                             static_cast<double>(l.requests),
                             w,
                             capacity,
                             static_cast<double>(it.cost),
                             static_cast<double>(flags)};
  static_assert(sizeof numbers == kKindBytes);
  std::memcpy(out, numbers, sizeof numbers);
  if (!penalty) return kKindBytes;
  const Penalty& p = *l.penalty;
  const double rules[6] = {static_cast<double>(p.after),    static_cast<double>(p.within_us),
                           static_cast<double>(p.block_us), p.growth,
                           static_cast<double>(p.max_us),   static_cast<double>(p.forget_us)};
  static_assert(sizeof numbers + sizeof rules == kPenalizedKindBytes);
  std::memcpy(out + kKindBytes, rules, sizeof rules);
  return kPenalizedKindBytes;
}

std::string PackKind(const DecideItem& it) {
  std::string out(kKindBytes, '\0');
  PackKindInto(it, out.data());
  return out;
}

// A refund's item: its kind, then its hash field if any.
std::string PackItem(const DecideItem& it) { return PackKind(it) + it.field; }

// A call's deadline argument before the connection writes it (none): kRedisTimeDigits zeros.
constexpr std::string_view kNoDeadline = "0000000000000000";
static_assert(kNoDeadline.size() == kRedisTimeDigits);

// The byte offset of argument `index`'s bytes in AppendCommand(args)'s command: *<count>\r\n,
// then $<length>\r\n<bytes>\r\n per argument.
size_t ArgumentOffset(std::span<const std::string_view> args, size_t index) {
  size_t at = fmt::formatted_size("*{}\r\n", args.size());
  for (size_t i = 0; i <= index; ++i) {
    at += fmt::formatted_size("${}\r\n", args[i].size());
    if (i < index) at += args[i].size() + 2;
  }
  return at;
}

}  // namespace

std::string EncodeRefund(std::string_view sha, std::span<const DecideItem> items,
                         int64_t decided_at_us) {
  std::vector<std::string> text = {std::to_string(items.size()), "2", std::to_string(decided_at_us),
                                   std::to_string(items.size())};
  for (const DecideItem& it : items) text.push_back(PackItem(it));
  std::vector<std::string_view> args;
  args.push_back(sha.empty() ? "EVAL" : "EVALSHA");
  args.push_back(sha.empty() ? DecideScript() : sha);
  args.push_back(text[0]);
  for (const DecideItem& it : items) args.push_back(it.key);
  for (size_t i = 1; i < text.size(); ++i) args.push_back(text[i]);
  std::string command;
  AppendCommand(&command, args);
  return command;
}

std::string EncodeLease(std::string_view sha, const DecideItem& item, uint64_t want,
                        int64_t life_us) {
  const std::string life = std::to_string(life_us), units = std::to_string(want);
  const std::string kind = PackItem(item);
  std::string command;
  AppendCommand(&command, {sha.empty() ? "EVAL" : "EVALSHA", sha.empty() ? DecideScript() : sha,
                           "1", item.key, "4", life, units, kind});
  return command;
}

std::string EncodeLeases(std::string_view sha, std::span<const LeaseAsk> asks,
                         size_t* deadline_at) {
  std::vector<std::string> text;  // the count, then per ask: its kind and field, life, want
  text.reserve(1 + 3 * asks.size());
  text.push_back(std::to_string(asks.size()));
  for (const LeaseAsk& ask : asks) {
    text.push_back(PackItem(ask.item));
    text.push_back(std::to_string(ask.life_us));
    text.push_back(std::to_string(ask.want));
  }
  std::vector<std::string_view> args = {sha.empty() ? "EVAL" : "EVALSHA",
                                        sha.empty() ? DecideScript() : sha,
                                        "0",
                                        "6",
                                        kNoDeadline,
                                        text[0]};
  const size_t deadline_arg = 4;
  args.reserve(6 + 4 * asks.size());
  for (size_t i = 0; i < asks.size(); ++i) {
    args.push_back(asks[i].item.key);
    for (size_t j = 1; j <= 3; ++j) args.push_back(text[3 * i + j]);
  }
  std::string command;
  AppendCommand(&command, args);
  if (deadline_at != nullptr) *deadline_at = ArgumentOffset(args, deadline_arg);
  return command;
}

absl::StatusOr<LeaseReply> ParseLeaseReply(const Reply& reply, size_t asks) {
  if (reply.IsError()) return absl::InternalError(fmt::format("lease script: {}", reply.str));
  const auto& e = reply.elements;
  if (reply.type != Reply::Type::kArray || e.empty() ||
      !std::all_of(e.begin(), e.end(),
                   [](const Reply& r) { return r.type == Reply::Type::kInteger; })) {
    return absl::InternalError("lease script: a malformed reply");
  }
  if (e.size() == 2 && e[1].integer == -1) {  // {now_us, -1}: no grant has two elements
    return absl::DeadlineExceededError(
        "lease script: Redis ran the call past its deadline; it took nothing");
  }
  if (e.size() != 1 + 3 * asks) return absl::InternalError("lease script: a malformed reply");
  const auto count = [](const Reply& r) {
    return static_cast<uint64_t>(std::max<int64_t>(0, r.integer));
  };
  LeaseReply out{.now_us = e[0].integer, .grants = {}};
  out.grants.reserve(asks);
  for (size_t i = 0; i < asks; ++i) {
    // A fenced state's lease leaves -1 (no lease leaves less than 0).
    out.grants.push_back({.granted = count(e[1 + 3 * i]),
                          .ends_us = e[2 + 3 * i].integer,
                          .left = count(e[3 + 3 * i]),
                          .fenced = e[3 + 3 * i].integer == -1});
  }
  return out;
}

std::string EncodeSync(std::string_view sha, std::span<const SyncItem> items) {
  // Per item: its kind and field (units as its cost), its time, its fence.
  std::vector<std::string> text;
  text.reserve(3 * items.size() + 1);
  text.push_back(std::to_string(items.size()));
  for (const SyncItem& s : items) {
    DecideItem it = s.item;
    it.cost = s.units;
    text.push_back(PackItem(it));
    text.push_back(std::to_string(s.counted_at_us));
    text.push_back(std::to_string(std::max<int64_t>(0, s.fence_us)));
  }
  std::vector<std::string_view> args = {sha.empty() ? "EVAL" : "EVALSHA",
                                        sha.empty() ? DecideScript() : sha, "0", "5", text[0]};
  args.reserve(5 + 4 * items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    args.push_back(items[i].item.key);
    for (size_t j = 1; j <= 3; ++j) args.push_back(text[3 * i + j]);
  }
  std::string command;
  AppendCommand(&command, args);
  return command;
}

absl::StatusOr<SyncReply> ParseSyncReply(const Reply& reply, std::span<const SyncItem> sent) {
  const size_t items = sent.size();
  if (reply.IsError()) return absl::InternalError(fmt::format("merge script: {}", reply.str));
  const auto& e = reply.elements;
  if (reply.type != Reply::Type::kArray || e.size() != 1 + 3 * items ||
      !std::all_of(e.begin(), e.end(),
                   [](const Reply& r) { return r.type == Reply::Type::kInteger; })) {
    return absl::InternalError("merge script: a malformed reply");
  }
  SyncReply out{.now_us = e[0].integer, .states = {}};
  out.states.reserve(items);
  for (size_t i = 0; i < items; ++i) {
    const int64_t prev = e[2 + 3 * i].integer, cur = e[3 + 3 * i].integer;
    // A sliding window's two counts as its aux (prev << 32 | cur); the others' aux alone.
    const bool sliding = sent[i].item.limit->algorithm == Algorithm::kSlidingWindow;
    const uint64_t aux = sliding ? static_cast<uint64_t>(prev) << 32 | static_cast<uint64_t>(cur)
                                 : static_cast<uint64_t>(prev);
    out.states.push_back({.idle_at_us = e[1 + 3 * i].integer, .aux = aux});
  }
  return out;
}

namespace {

// A count in decide.lua's plan: one byte below 255, else 255 and three bytes, little-endian.
void AppendPlanCount(std::string* plan, size_t count) {
  if (count < 255) {
    plan->push_back(static_cast<char>(count));
    return;
  }
  plan->push_back(static_cast<char>(255));
  for (int shift = 0; shift < 24; shift += 8)
    plan->push_back(static_cast<char>((count >> shift) & 0xff));
}

}  // namespace

std::string EncodeDecide(std::string_view sha,
                         std::span<const std::span<const DecideItem>> requests, bool commit,
                         bool keys_in_argv, size_t* deadline_at) {
  static_assert(std::endian::native == std::endian::little,
                "decide.lua reads little-endian doubles");
  size_t items = 0;
  for (const auto& r : requests) items += r.size();
  // The distinct kinds of item (limit, cost, flags) and states (key, field), each once, numbered
  // in the order first used, and the plan that says, per request, how many items it has and the
  // kind and state of each (see decide.lua's header). Maps of views, into `packed` (reserved
  // for every item, so never moved) and into the items: no allocation per item.
  std::vector<std::array<char, kPenalizedKindBytes>> packed;
  packed.reserve(items);
  absl::flat_hash_map<std::string_view, size_t> kind_numbers;
  std::vector<std::string_view> kinds;
  absl::flat_hash_map<std::pair<std::string_view, std::string_view>, size_t> state_numbers;
  state_numbers.reserve(items);
  std::vector<const DecideItem*> states;  // each state's first item
  states.reserve(items);
  std::string plan;
  plan.reserve(requests.size() + 2 * items);
  for (const auto& request : requests) {
    AppendPlanCount(&plan, request.size());
    for (const DecideItem& it : request) {
      const size_t bytes = PackKindInto(it, packed.emplace_back().data(), /*penalty=*/true);
      auto kind =
          kind_numbers.try_emplace(std::string_view(packed.back().data(), bytes), kinds.size() + 1)
              .first;
      if (kind->second > kinds.size()) {
        kinds.push_back(kind->first);
      } else {
        packed.pop_back();  // a kind already listed
      }
      auto state = state_numbers
                       .try_emplace(std::pair<std::string_view, std::string_view>(it.key, it.field),
                                    states.size() + 1)
                       .first;
      if (state->second > states.size()) states.push_back(&it);
      AppendPlanCount(&plan, kind->second);
      AppendPlanCount(&plan, state->second);
    }
  }
  const bool argv_keys = commit && keys_in_argv;
  const std::string key_count = argv_keys ? "0" : std::to_string(states.size());
  const std::string requests_text = std::to_string(requests.size());
  const std::string states_text = std::to_string(states.size());
  const std::string kinds_text = std::to_string(kinds.size());
  std::vector<std::string_view> args;
  args.reserve(8 + 2 * states.size() + kinds.size());
  args.push_back(sha.empty() ? "EVAL" : "EVALSHA");
  args.push_back(sha.empty() ? DecideScript() : sha);
  args.push_back(key_count);
  if (!argv_keys) {
    for (const DecideItem* it : states) args.push_back(it->key);
  }
  args.push_back(argv_keys ? "3" : (commit ? "1" : "0"));
  const size_t deadline_arg = args.size();
  args.push_back(kNoDeadline);
  args.push_back(requests_text);
  if (argv_keys) {
    args.push_back(states_text);
    for (const DecideItem* it : states) args.push_back(it->key);
  }
  args.push_back(kinds_text);
  for (std::string_view kind : kinds) args.push_back(kind);
  args.push_back(plan);
  for (const DecideItem* it : states) {
    if (!it->field.empty()) args.push_back(it->field);
  }
  std::string command;
  AppendCommand(&command, args);
  if (deadline_at != nullptr) *deadline_at = ArgumentOffset(args, deadline_arg);
  return command;
}

std::string EncodeDecide(std::string_view sha, std::span<const DecideItem> items, bool commit,
                         size_t* deadline_at) {
  const std::span<const DecideItem> one[] = {items};
  return EncodeDecide(sha, one, commit, /*keys_in_argv=*/false, deadline_at);
}

absl::StatusOr<std::vector<DecideResult>> ParseDecideReply(
    const Reply& reply, std::span<const std::span<const DecideItem>> requests) {
  if (reply.IsError()) return absl::InternalError(fmt::format("decide script: {}", reply.str));
  const auto& e = reply.elements;
  const auto malformed = [] { return absl::InternalError("decide script: a malformed reply"); };
  if (reply.type != Reply::Type::kArray || e.empty()) return malformed();
  for (const Reply& r : e) {
    if (r.type != Reply::Type::kInteger) return malformed();
  }
  if (e.size() == 2 && e[1].integer == -1) {  // {now_us, -1}: no decision has two elements
    return absl::DeadlineExceededError(
        "decide script: Redis ran the call past its deadline; it changed nothing");
  }
  std::vector<DecideResult> out(requests.size());
  size_t at = 1;
  for (size_t r = 0; r < requests.size(); ++r) {
    out[r].now_us = e[0].integer;
    out[r].allowed = true;
    out[r].decisions.resize(requests[r].size());
    // Per item: remaining (-1 - remaining when denied), reset_after_us, then retry_after_us when
    // denied, delay_us when a leaky_bucket allowed it. The request is allowed when every item
    // that is not shadow is.
    for (size_t i = 0; i < requests[r].size(); ++i) {
      if (at + 2 > e.size()) return malformed();
      Decision& d = out[r].decisions[i];
      d.allowed = e[at].integer >= 0;
      d.remaining = d.allowed ? e[at].integer : -1 - e[at].integer;
      d.reset_after_us = e[at + 1].integer;
      at += 2;
      const bool leaky = requests[r][i].limit->algorithm == Algorithm::kLeakyBucket;
      if (!d.allowed || leaky) {
        if (at >= e.size()) return malformed();
        (d.allowed ? d.delay_us : d.retry_after_us) = e[at++].integer;
        if (!d.allowed && d.retry_after_us <= -2) {  // -2 - the block: the key's penalty
          d.penalty = true;
          d.retry_after_us = -2 - d.retry_after_us;
        }
      }
      if (!d.allowed && !requests[r][i].shadow) out[r].allowed = false;
    }
  }
  if (at != e.size()) return malformed();
  return out;
}

absl::StatusOr<DecideResult> ParseDecideReply(const Reply& reply,
                                              std::span<const DecideItem> items) {
  const std::span<const DecideItem> one[] = {items};
  auto all = ParseDecideReply(reply, one);
  if (!all.ok()) return all.status();
  return std::move((*all)[0]);
}

}  // namespace sluice::redis
