// Who is being limited: for each domain, the keys its limits denied most and the busiest keys,
// per limit, over the last 1, 5 or 15 minutes, in fixed memory: per domain and minute, two
// util::SpaceSaving sketches of `capacity` keys (denied; decided). The engine records every
// limit it decides when one is set (Engine::set_top_keys); the admin API reads it (GET /v1/top,
// docs/operations.md "Who is being limited", which states the error bounds).
//
// Thread safety: Record and Top from any thread (a lock per domain). Memory: at most
// `max_domains` domains (decisions of others are not recorded, and counted), each at most
// 15 x 2 x `capacity` keys. Times: µs on the clock the engine decides by.

#ifndef SLUICE_ENGINE_TOP_KEYS_H_
#define SLUICE_ENGINE_TOP_KEYS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "util/space_saving.h"

namespace sluice::engine {

class TopKeys {
 public:
  struct Options {
    size_t capacity = 1000;   // keys per domain, minute and kind
    size_t max_domains = 64;  // domains tracked at once
    // One decision in `sample` on average is recorded, counted `sample` times (1: each).
    uint32_t sample = 8;
  };
  enum class By { kDenied, kRequests };
  struct Row {
    std::string limit;   // the limit's name (LimitName)
    std::string key;     // its descriptor, `k=v,k=v` (a shared wildcard's pattern as its value)
    Entries entries;     // the key as entries (empty if it did not decode)
    uint64_t count = 0;  // at least what the key had in the window
    uint64_t error = 0;  // count - error is at most that
  };

  explicit TopKeys(Options options);
  TopKeys(const TopKeys&) = delete;
  TopKeys& operator=(const TopKeys&) = delete;

  // Whether to record the decision at hand (every limit of it): one in options.sample on
  // average, a random choice per thread, so that no pattern of requests lines up with it. The
  // cost of a decision not recorded is this call.
  bool Sample() {
    if (options_.sample <= 1) return true;
    uint32_t& skip = SkipCount();
    if (skip > 0) {
      --skip;
      return false;
    }
    skip = NextSkip();
    return true;
  }

  // One decided limit of a request to `domain`: its identity (RuleLimitId), its answer (a denial
  // unless shadow), and the state key the engine keeps it under (AppendStateKey), at now_us;
  // counted `weight` times (options.sample for a sampled decision). The limit's name
  // (LimitName) is made the first time its identity is seen.
  void Record(std::string_view domain, uint64_t limit_id, const AppliedLimit& limit,
              std::string_view state_key, uint64_t weight, int64_t now_us);
  uint32_t sample() const { return options_.sample; }

  // The `n` keys of `domain` with the most denials (or decisions) over the last `minutes`
  // (1..15: this minute and the minutes before it), most first; empty for an unknown domain.
  std::vector<Row> Top(std::string_view domain, By by, int minutes, size_t n, int64_t now_us) const;

  // Decisions not recorded because max_domains domains were tracked already.
  uint64_t untracked() const { return untracked_.load(std::memory_order_relaxed); }

  static constexpr int kMinutes = 15;

 private:
  struct Minute {
    int64_t minute = -1;  // since the epoch; -1: never used
    std::unique_ptr<util::SpaceSaving> denied, requests;
  };
  struct Domain {
    mutable absl::Mutex mu;
    std::array<Minute, kMinutes> minutes ABSL_GUARDED_BY(mu);
    // Limits' names by identity (bounded: an identity past the bound is shown as a number).
    absl::flat_hash_map<uint64_t, std::string> names ABSL_GUARDED_BY(mu);
  };
  // Decisions this thread skips before it records one.
  static uint32_t& SkipCount() {
    thread_local uint32_t skip = 0;
    return skip;
  }
  // A skip uniform in [0, 2 x sample - 2]: one decision in `sample` on average.
  uint32_t NextSkip() const;
  Domain* DomainFor(std::string_view domain);
  const Domain* FindDomain(std::string_view domain) const;

  const Options options_;
  const uint64_t serial_;   // tells this instance's entries of DomainFor's per-thread cache
  mutable absl::Mutex mu_;  // the map; a Domain, once made, lives as long as this
  absl::flat_hash_map<std::string, std::unique_ptr<Domain>> domains_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> untracked_{0};
};

// A state key's entries (AppendStateKey's "<length>:<part>" pairs, key then value), or nullopt
// when it does not decode.
std::optional<Entries> StateKeyEntries(std::string_view state_key);
// Its text form: `k=v,k=v`; the bytes as they are when it does not decode.
std::string StateKeyText(std::string_view state_key);

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_TOP_KEYS_H_
