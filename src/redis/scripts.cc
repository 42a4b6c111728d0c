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

void AppendDecideArgs(const Limit& limit, uint64_t cost, bool count_denied, bool shadow,
                      std::vector<std::string>* argv) {
  argv->push_back(std::to_string(AlgorithmCode(limit.algorithm)));
  argv->push_back(std::to_string(limit.requests));
  argv->push_back(std::to_string(limit.window_us));
  argv->push_back(std::to_string(limit.Capacity()));
  argv->push_back(std::to_string(cost));
  argv->push_back(std::to_string((count_denied ? 1 : 0) | (shadow ? 2 : 0)));
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
