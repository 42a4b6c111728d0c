#include "redis/scripts.h"

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

std::string EncodeDecide(std::string_view sha, std::span<const DecideItem> items, bool commit) {
  std::vector<std::string> numbers;
  numbers.reserve(2 + 6 * items.size());
  numbers.push_back(std::to_string(items.size()));
  numbers.push_back(commit ? "1" : "0");
  for (const DecideItem& it : items) {
    const Limit& l = *it.limit;
    numbers.push_back(std::to_string(AlgorithmCode(l.algorithm)));
    numbers.push_back(std::to_string(l.requests));
    numbers.push_back(std::to_string(l.window_us));
    numbers.push_back(std::to_string(l.Capacity()));
    numbers.push_back(std::to_string(it.cost));
    numbers.push_back(std::to_string((it.count_denied ? 1 : 0) | (it.shadow ? 2 : 0)));
  }
  std::vector<std::string_view> args;
  args.reserve(3 + numbers.size() + items.size());
  args.push_back(sha.empty() ? "EVAL" : "EVALSHA");
  args.push_back(sha.empty() ? DecideScript() : sha);
  args.push_back(numbers[0]);
  for (const DecideItem& it : items) args.push_back(it.key);
  for (size_t i = 1; i < numbers.size(); ++i) args.push_back(numbers[i]);
  std::string command;
  AppendCommand(&command, args);
  return command;
}

absl::StatusOr<DecideResult> ParseDecideReply(const Reply& reply, size_t items) {
  if (reply.IsError()) return absl::InternalError(fmt::format("decide script: {}", reply.str));
  const auto& e = reply.elements;
  if (reply.type != Reply::Type::kArray || e.size() != 2 + 5 * items) {
    return absl::InternalError(fmt::format("decide script: expected an array of {} integers",
                                           2 + 5 * items));
  }
  for (const Reply& r : e) {
    if (r.type != Reply::Type::kInteger) {
      return absl::InternalError("decide script: a reply element is not an integer");
    }
  }
  DecideResult out;
  out.now_us = e[0].integer;
  out.allowed = e[1].integer != 0;
  out.decisions.resize(items);
  for (size_t i = 0; i < items; ++i) {
    const Reply* d = &e[2 + 5 * i];
    out.decisions[i] = Decision{.allowed = d[0].integer != 0,
                                .remaining = d[1].integer,
                                .retry_after_us = d[2].integer,
                                .reset_after_us = d[3].integer,
                                .delay_us = d[4].integer};
  }
  return out;
}

}  // namespace sluice::redis
