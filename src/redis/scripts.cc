#include "redis/scripts.h"

#include <bit>
#include <cstring>

#include "fmt/format.h"
#include "redis/decide_lua.h"  // generated from scripts/decide.lua: kDecideLua

namespace sluice::redis {
namespace {

constexpr double kExact = 9007199254740992.0;  // 2^53

int AlgorithmCode(Algorithm a) {
  switch (a) {
    case Algorithm::kTokenBucket: return 0;
    case Algorithm::kLeakyBucket: return 1;
    case Algorithm::kFixedWindow: return 2;
    case Algorithm::kSlidingLog: return 3;
    case Algorithm::kSlidingWindow: return 4;
  }
  return 0;
}

}  // namespace

std::string_view DecideScript() { return kDecideLua; }

absl::Status CheckExactRange(const Limit& limit) {
  const double w = static_cast<double>(limit.window_us);
  double product = 0;
  std::string_view what;
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      product = static_cast<double>(limit.Capacity()) * w + 2.0 * static_cast<double>(limit.requests);
      what = "capacity x window";
      break;
    case Algorithm::kSlidingWindow:
      product = 2.0 * static_cast<double>(limit.requests) * w;
      what = "2 x requests x window";
      break;
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingLog:
      return absl::OkStatus();
  }
  if (product < kExact) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format(
      "limit {} is too large to decide exactly on Redis ({} is {:.3g} requests x µs, over 2^53); "
      "use fewer requests or a shorter window, or fixed_window / sliding_log",
      DescribeLimit(limit), what, product));
}

namespace {

// An item's six numbers as decide.lua reads them (struct '<dddddd'), then its hash field if any.
std::string PackItem(const DecideItem& it) {
  const Limit& l = *it.limit;
  const double numbers[6] = {static_cast<double>(AlgorithmCode(l.algorithm)),
                             static_cast<double>(l.requests),
                             static_cast<double>(l.window_us),
                             static_cast<double>(l.Capacity()),
                             static_cast<double>(it.cost),
                             static_cast<double>((it.count_denied ? 1 : 0) | (it.shadow ? 2 : 0))};
  std::string packed(sizeof numbers + it.field.size(), '\0');
  std::memcpy(packed.data(), numbers, sizeof numbers);
  std::memcpy(packed.data() + sizeof numbers, it.field.data(), it.field.size());
  return packed;
}

}  // namespace

std::string EncodeRefund(std::string_view sha, std::span<const DecideItem> items,
                         int64_t decided_at_us) {
  std::vector<std::string> text = {std::to_string(items.size()), "2",
                                   std::to_string(decided_at_us), std::to_string(items.size())};
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

std::string EncodeDecide(std::string_view sha, std::span<const std::span<const DecideItem>> requests,
                         bool commit, bool keys_in_argv) {
  static_assert(std::endian::native == std::endian::little, "decide.lua reads little-endian doubles");
  size_t items = 0;
  for (const auto& r : requests) items += r.size();
  // The counts as decimal text; each item's six numbers as one string of little-endian doubles
  // (struct '<dddddd' in decide.lua), converted as tonumber would convert their decimal text.
  std::vector<std::string> args_text;
  args_text.reserve(3 + requests.size() + items);
  const bool argv_keys = commit && keys_in_argv;
  args_text.push_back(argv_keys ? "0" : std::to_string(items));
  args_text.push_back(argv_keys ? "3" : (commit ? "1" : "0"));
  args_text.push_back(std::to_string(requests.size()));
  if (argv_keys) args_text.push_back(std::to_string(items));
  for (const auto& request : requests) {
    args_text.push_back(std::to_string(request.size()));
    for (const DecideItem& it : request) args_text.push_back(PackItem(it));
  }
  std::vector<std::string_view> args;
  args.reserve(3 + args_text.size() + items);
  args.push_back(sha.empty() ? "EVAL" : "EVALSHA");
  args.push_back(sha.empty() ? DecideScript() : sha);
  args.push_back(args_text[0]);
  const size_t keys_after = argv_keys ? 4 : 1;  // KEYS, or ARGV after mode, R and K
  for (size_t i = 1; i < keys_after; ++i) args.push_back(args_text[i]);
  for (const auto& request : requests) {
    for (const DecideItem& it : request) args.push_back(it.key);
  }
  for (size_t i = keys_after; i < args_text.size(); ++i) args.push_back(args_text[i]);
  std::string command;
  AppendCommand(&command, args);
  return command;
}

std::string EncodeDecide(std::string_view sha, std::span<const DecideItem> items, bool commit) {
  const std::span<const DecideItem> one[] = {items};
  return EncodeDecide(sha, one, commit);
}

absl::StatusOr<std::vector<DecideResult>> ParseDecideReply(const Reply& reply,
                                                           std::span<const size_t> items_per_request) {
  if (reply.IsError()) return absl::InternalError(fmt::format("decide script: {}", reply.str));
  size_t expected = 1;
  for (size_t n : items_per_request) expected += 1 + 5 * n;
  const auto& e = reply.elements;
  if (reply.type != Reply::Type::kArray || e.size() != expected) {
    return absl::InternalError(fmt::format("decide script: expected an array of {} integers", expected));
  }
  for (const Reply& r : e) {
    if (r.type != Reply::Type::kInteger) {
      return absl::InternalError("decide script: a reply element is not an integer");
    }
  }
  std::vector<DecideResult> out(items_per_request.size());
  size_t at = 1;
  for (size_t r = 0; r < items_per_request.size(); ++r) {
    out[r].now_us = e[0].integer;
    out[r].allowed = e[at++].integer != 0;
    out[r].decisions.resize(items_per_request[r]);
    for (size_t i = 0; i < items_per_request[r]; ++i, at += 5) {
      out[r].decisions[i] = Decision{.allowed = e[at].integer != 0,
                                     .remaining = e[at + 1].integer,
                                     .retry_after_us = e[at + 2].integer,
                                     .reset_after_us = e[at + 3].integer,
                                     .delay_us = e[at + 4].integer};
    }
  }
  return out;
}

absl::StatusOr<DecideResult> ParseDecideReply(const Reply& reply, size_t items) {
  const size_t one[] = {items};
  auto all = ParseDecideReply(reply, one);
  if (!all.ok()) return all.status();
  return std::move((*all)[0]);
}

}  // namespace sluice::redis
