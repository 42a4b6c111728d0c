#include "sluice/limit.h"

#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include "fmt/format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice {
namespace {

struct AlgorithmSpelling {
  std::string_view name;
  Algorithm algorithm;
};
constexpr std::array<AlgorithmSpelling, 6> kAlgorithmSpellings = {{
    {"token_bucket", Algorithm::kTokenBucket},
    {"gcra", Algorithm::kTokenBucket},
    {"leaky_bucket", Algorithm::kLeakyBucket},
    {"fixed_window", Algorithm::kFixedWindow},
    {"sliding_log", Algorithm::kSlidingLog},
    {"sliding_window", Algorithm::kSlidingWindow},
}};

struct DurationUnit {
  std::string_view suffix;
  int64_t us;
};
// Longest suffixes first so that "ms" is not read as "m" followed by garbage.
constexpr std::array<DurationUnit, 7> kDurationUnits = {{
    {"us", 1},
    {"ms", 1000},
    {"s", 1000000},
    {"m", int64_t{60} * 1000000},
    {"h", int64_t{3600} * 1000000},
    {"d", int64_t{86400} * 1000000},
    {"w", int64_t{7} * 86400 * 1000000},
}};

}  // namespace

std::string_view AlgorithmName(Algorithm algorithm) {
  for (const auto& s : kAlgorithmSpellings) {
    if (s.algorithm == algorithm) return s.name;
  }
  return "unknown";
}

absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name) {
  for (const auto& s : kAlgorithmSpellings) {
    if (s.name == name) return s.algorithm;
  }
  std::string names;
  for (const auto& s : kAlgorithmSpellings)
    names += fmt::format("{}{}", names.empty() ? "" : ", ", s.name);
  return absl::InvalidArgumentError(
      fmt::format("unknown algorithm \"{}\" (known: {})", name, names));
}

absl::Status ValidateLimit(const Limit& limit) {
  if (limit.requests > kMaxRequests) {
    return absl::InvalidArgumentError(
        fmt::format("requests {} is above the maximum {}", limit.requests, kMaxRequests));
  }
  if (limit.window_us < 1 || limit.window_us > kMaxWindowUs) {
    return absl::InvalidArgumentError(fmt::format("window must be between 1us and {}, got {}us",
                                                  FormatDuration(kMaxWindowUs), limit.window_us));
  }
  if (limit.calendar) {
    if (limit.algorithm != Algorithm::kFixedWindow) {
      return absl::InvalidArgumentError(
          fmt::format("a calendar window ({}) applies to fixed_window, not {}",
                      limit.calendar->unit_name(), AlgorithmName(limit.algorithm)));
    }
    if (limit.window_us != limit.calendar->NominalUs()) {
      return absl::InvalidArgumentError(fmt::format(
          "a {} limit's window must be its nominal {}, got {}us", limit.calendar->unit_name(),
          FormatDuration(limit.calendar->NominalUs()), limit.window_us));
    }
  }
  if (limit.penalty) {
    if (absl::Status s = ValidatePenalty(*limit.penalty); !s.ok()) return s;
  }
  if (limit.burst.has_value()) {
    if (*limit.burst > kMaxBurst) {
      return absl::InvalidArgumentError(
          fmt::format("burst {} is above the maximum {}", *limit.burst, kMaxBurst));
    }
    if (limit.algorithm == Algorithm::kTokenBucket && *limit.burst < 1) {
      return absl::InvalidArgumentError("burst of a token_bucket must be at least 1");
    }
  }
  if ((limit.algorithm == Algorithm::kTokenBucket || limit.algorithm == Algorithm::kLeakyBucket) &&
      limit.requests > 0) {
    // A full bucket drains in C * W / N; keep that well inside int64 microseconds.
    __extension__ using u128 = unsigned __int128;
    const u128 drain_us = static_cast<u128>(limit.Capacity()) * limit.window_us / limit.requests;
    if (drain_us > (u128{1} << 60)) {
      return absl::InvalidArgumentError(
          "burst * window / requests is too large (the bucket would take centuries to refill)");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePenalty(const Penalty& p) {
  const auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError("penalty: " + what);
  };
  if (p.after < 1) return bad("after must be at least 1");
  if (p.within_us <= 0) return bad("within must be longer than 0");
  if (p.block_us <= 0) return bad("block must be longer than 0");
  if (!(p.growth >= 1.0) || !std::isfinite(p.growth)) return bad("growth must be at least 1");
  if (p.max_us < p.block_us) return bad("max must be at least block");
  if (p.forget_us < p.max_us) return bad("forget must be at least max");
  return absl::OkStatus();
}

Limit CalendarLimit(uint64_t requests, Calendar calendar) {
  const int64_t window_us = calendar.NominalUs();
  return {.algorithm = Algorithm::kFixedWindow,
          .requests = requests,
          .window_us = window_us,
          .burst = std::nullopt,
          .calendar = calendar};
}

uint64_t LimitId(const Limit& limit) {
  const uint64_t fields[5] = {static_cast<uint64_t>(limit.algorithm), limit.requests,
                              static_cast<uint64_t>(limit.window_us),
                              limit.burst.has_value() ? 1u : 0u, limit.burst.value_or(0)};
  const uint64_t id = XXH3_64bits(fields, sizeof fields);
  if (!limit.calendar) return id;
  // A calendar's unit and zone too: a quota per Berlin month is not one per New York month.
  const std::string zone =
      fmt::format("{}/{}", limit.calendar->unit_name(), limit.calendar->time_zone());
  return XXH3_64bits_withSeed(zone.data(), zone.size(), id);
}

std::string DescribeLimit(const Limit& limit) {
  const std::string window = limit.calendar ? fmt::format("{}({})", limit.calendar->unit_name(),
                                                          limit.calendar->time_zone())
                                            : FormatDuration(limit.window_us);
  std::string s = fmt::format("{}/{} {}", limit.requests, window, AlgorithmName(limit.algorithm));
  if (limit.burst.has_value()) s += fmt::format(" burst={}", *limit.burst);
  if (const auto& p = limit.penalty) {
    s += fmt::format(" penalty={}/{}:{}x{}<={}", p->after, FormatDuration(p->within_us),
                     FormatDuration(p->block_us), p->growth, FormatDuration(p->max_us));
  }
  return s;
}

absl::StatusOr<int64_t> ParseDuration(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format(
        "bad duration \"{}\": {} (write e.g. 250ms, 1s, 30s, 5m, 1h, 1d, 1w)", text, why));
  };
  if (text.empty()) return bad("empty");
  __extension__ using u128 = unsigned __int128;
  u128 total = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
    if (ec == std::errc::result_out_of_range) return bad("number too large");
    if (ec != std::errc() || ptr == rest.data()) return bad("expected a number");
    rest.remove_prefix(static_cast<size_t>(ptr - rest.data()));
    const DurationUnit* unit = nullptr;
    for (const auto& u : kDurationUnits) {
      if (rest.substr(0, u.suffix.size()) == u.suffix &&
          (u.suffix != "m" || rest.substr(0, 2) != "ms")) {
        unit = &u;
        break;
      }
    }
    if (unit == nullptr) return bad("expected a unit (us, ms, s, m, h, d, w) after the number");
    rest.remove_prefix(unit->suffix.size());
    total += static_cast<u128>(value) * static_cast<u128>(unit->us);
    if (total > static_cast<u128>(kMaxWindowUs)) return bad("longer than 10 years");
  }
  if (total == 0) return bad("must be positive");
  return static_cast<int64_t>(total);
}

std::string FormatDuration(int64_t duration_us) {
  // (std::to_chars into a short string, not a format: a traced decision names its limits so.)
  const DurationUnit* unit = &kDurationUnits.front();  // 0: "0us"
  for (auto it = kDurationUnits.rbegin(); it != kDurationUnits.rend(); ++it) {
    if (duration_us != 0 && duration_us % it->us == 0) {
      unit = &*it;
      break;
    }
  }
  char digits[24];
  char* end = std::to_chars(digits, digits + sizeof digits, duration_us / unit->us).ptr;
  std::string text(digits, end);
  text.append(unit->suffix);
  return text;
}

}  // namespace sluice
