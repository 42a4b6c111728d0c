// sluice/limit.h — what a limit is and what a decision says.
//
// A `Limit` is one rate limit: an algorithm, N requests per window W, and an optional burst.
// A `Decision` is the answer to one request against one limit. Both are plain values: copy them
// freely and share them between threads.
//
// Time is integer microseconds (`_us`) everywhere. Reported durations are the exact value rounded
// up to the microsecond, so a denied request never reports retry_after_us == 0.

#ifndef SLUICE_LIMIT_H_
#define SLUICE_LIMIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice {

enum class Algorithm : uint8_t {
  kTokenBucket,    // "token_bucket", alias "gcra": refills continuously, bursts up to capacity
  kLeakyBucket,    // "leaky_bucket": a queue drained at N per W; admitted requests get a delay
  kFixedWindow,    // "fixed_window": epoch-aligned windows, a counter per window
  kSlidingLog,     // "sliding_log": exact; remembers every admitted request of the last W
  kSlidingWindow,  // "sliding_window": weighted two-window counter estimate (approximate)
};

// The canonical name ("token_bucket", ...). Never fails.
std::string_view AlgorithmName(Algorithm algorithm);

// Parses a canonical name or the alias "gcra". Unknown names are InvalidArgument, with the list
// of known names in the message.
absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name);

// Bounds that keep every computation inside 64/128-bit integers (see docs/algorithms.md).
inline constexpr uint64_t kMaxRequests = 0xFFFFFFFFu;  // requests per window (uint32, as Envoy)
inline constexpr uint64_t kMaxBurst = 0xFFFFFFFFu;
inline constexpr int64_t kMaxWindowUs = int64_t{10} * 366 * 24 * 3600 * 1000000;  // ~10 years
inline constexpr int64_t kMaxTimeUs = (int64_t{1} << 62) - 1;  // latest usable instant

// Windows that follow the calendar of a time zone, for quotas ("10,000 calls per calendar month,
// reset on the 1st at midnight in Europe/Berlin"): a day from local midnight to the next, an ISO
// week from Monday's midnight, a month from the 1st, a year from January 1st. Their lengths vary
// (a day is 23 or 25 hours across a daylight-saving change, a month 28 to 31 days); a midnight
// that a zone skips starts the day at the jump. Zones come from the system's tz database
// (Debian's tzdata). A value, a pointer's size: each unit and zone is loaded once for the
// process's life and shared by every copy (at most 4 units x the database's few hundred zones).
// Safe to share between threads.
class Calendar {
 public:
  enum class Unit : uint8_t { kDay, kWeek, kMonth, kYear };

  struct Window {
    int64_t start_us = 0;  // the window's first instant (µs since the Unix epoch)
    int64_t end_us = 0;    // the next window's first instant
    friend bool operator==(const Window&, const Window&) = default;
  };

  // `unit` is "calendar_day", "calendar_week", "calendar_month" or "calendar_year"; `time_zone`
  // an IANA name ("Europe/Berlin", "UTC"). InvalidArgument naming what is unknown.
  static absl::StatusOr<Calendar> Make(std::string_view unit, std::string_view time_zone);
  static absl::StatusOr<Calendar> Make(Unit unit, std::string_view time_zone);

  Unit unit() const;
  std::string_view unit_name() const;  // "calendar_month", ...
  const std::string& time_zone() const;
  // The unit's usual length, a Limit's window_us: 1 d, 7 d, 30 d or 365 d.
  int64_t NominalUs() const;
  // The window holding `t_us`: start_us <= t_us < end_us. Each thread remembers the last few
  // windows it found, so that asking again within one costs a comparison, not the zone's rules.
  Window WindowAt(int64_t t_us) const;

  // Equal when unit and zone are: the same loaded calendar.
  friend bool operator==(const Calendar&, const Calendar&) = default;

  struct Impl;  // the loaded zone (opaque)

 private:
  explicit Calendar(const Impl* impl) : impl_(impl) {}
  const Impl* impl_;  // never freed
};

// Escalating penalties of a limit ("ban for 2 minutes, then 5, then 12.5 after repeated
// violations"): a key that the limit denies `after` times within `within_us` is blocked for
// `block_us`, denied without its limit being asked; each further offence blocks it `growth`
// times longer than the one before, up to `max_us`; offences are forgotten after `forget_us`
// without one. Denials while blocked are not counted again. Defaults: the example.
struct Penalty {
  uint32_t after = 3;
  int64_t within_us = 600'000'000;     // 10 min
  int64_t block_us = 120'000'000;      // the first offence's block: 2 min
  double growth = 2.5;                 // each further offence's block, times the one before
  int64_t max_us = 3'600'000'000;      // the longest block: 1 h
  int64_t forget_us = 86'400'000'000;  // offences forgotten after this long without one: 1 day
  friend bool operator==(const Penalty&, const Penalty&) = default;
};

// Checks the bounds: after >= 1, within and block > 0, growth >= 1, block <= max <= forget (an
// offence is not forgotten while its block may still run). The message names the field.
absl::Status ValidatePenalty(const Penalty& penalty);

struct Limit {
  Algorithm algorithm = Algorithm::kTokenBucket;
  // N: requests admitted per window. 0 is valid and denies everything.
  uint64_t requests = 0;
  // W: the window, or for the buckets the time to refill/drain N. At least 1 µs.
  int64_t window_us = 0;
  // B. token_bucket: capacity (default N, must be >= 1). leaky_bucket: queue depth (default 0).
  // The window algorithms ignore it.
  std::optional<uint64_t> burst = std::nullopt;
  // fixed_window only: its windows follow this calendar instead of starting at multiples of
  // window_us since the epoch; window_us is then the calendar's NominalUs() (CalendarLimit).
  std::optional<Calendar> calendar = std::nullopt;
  // Blocks a key denied again and again (see Penalty). It has a state of its own beside the
  // limit's; LimitId leaves it out, so adding one keeps the limit's counting state.
  std::optional<Penalty> penalty = std::nullopt;

  // token_bucket: the bucket size. leaky_bucket: B + 1, the most admitted at one instant.
  // fixed/sliding windows and sliding_log: N. (Inline: every decision's answer asks it.)
  uint64_t Capacity() const {
    switch (algorithm) {
      case Algorithm::kTokenBucket:
        return burst.value_or(requests);
      case Algorithm::kLeakyBucket:
        return burst.value_or(0) + 1;
      default:
        return requests;
    }
  }

  friend bool operator==(const Limit&, const Limit&) = default;
};

// Checks the bounds above; the message names the offending field.
absl::Status ValidateLimit(const Limit& limit);

// A fixed_window quota of `requests` per window of `calendar`.
Limit CalendarLimit(uint64_t requests, Calendar calendar);

// A 64-bit identity of the definition (algorithm, N, W, B, and a calendar's unit and zone). Equal
// limits have equal ids, so state kept under an id survives a reload that does not change the
// limit.
uint64_t LimitId(const Limit& limit);

// "10/1s token_bucket burst=20", "10000/calendar_month(Europe/Berlin) fixed_window", for logs and
// `explain`.
std::string DescribeLimit(const Limit& limit);

// Parses durations such as "250ms", "1s", "30s", "5m", "1h", "1d", "1w", "1500us" and sums such
// as "1h30m". The result is positive and at most kMaxWindowUs.
absl::StatusOr<int64_t> ParseDuration(std::string_view text);

// The shortest exact spelling of a duration: 1500000 -> "1500ms", 60000000 -> "1m".
std::string FormatDuration(int64_t duration_us);

// The answer for one request against one limit.
struct Decision {
  bool allowed = false;
  // Denied by the limit's penalty (Limit::penalty): the key is blocked, retry_after_us and
  // reset_after_us say for how long yet (the denial that starts a block reports it too).
  // (Beside `allowed`: in its padding, so a Decision stays 48 bytes.)
  bool penalty = false;
  // Requests of cost 1 that would still be admitted right after this decision (for leaky_bucket:
  // admitted one after another at this instant, each queued behind the previous). Never negative.
  int64_t remaining = 0;
  // 0 when allowed; the wait until the same request would be admitted with no other traffic;
  // kNever when it can never be admitted (cost above the capacity, or N == 0).
  int64_t retry_after_us = 0;
  // Time until the key's state is back to its initial state (bucket full, window over).
  int64_t reset_after_us = 0;
  // leaky_bucket only: how long the caller must hold an admitted request before forwarding it.
  int64_t delay_us = 0;

  static constexpr int64_t kNever = -1;

  friend bool operator==(const Decision&, const Decision&) = default;
};

}  // namespace sluice

#endif  // SLUICE_LIMIT_H_
