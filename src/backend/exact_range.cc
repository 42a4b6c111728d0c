#include "backend/exact_range.h"

#include "fmt/format.h"

namespace sluice::backend {

absl::Status CheckExactRange(const Limit& limit) {
  constexpr double kExact = 9007199254740992.0;  // 2^53
  const double w = static_cast<double>(limit.window_us);
  double product = 0;
  std::string_view what;
  switch (limit.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      product =
          static_cast<double>(limit.Capacity()) * w + 2.0 * static_cast<double>(limit.requests);
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

}  // namespace sluice::backend
