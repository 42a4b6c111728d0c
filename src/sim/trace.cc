#include "sim/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "util/trace_line.h"

namespace sluice::sim {
namespace {

constexpr uint64_t kMaxKeys = 10'000'000;
constexpr int64_t kOnOffPeriodUs = 400000;  // 100 ms of 4R, then 300 ms of silence
constexpr int64_t kOnOffBurstUs = 100000;

// Uniform in [0, 1) from the top 53 bits (the same on every platform, unlike
// std::uniform_real_distribution).
double Unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// FNV-1a: a hash that is the same in every build, so that --spread hash is reproducible.
uint64_t StableHash(std::string_view s) {
  uint64_t h = 14695981039346656037u;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211u;
  }
  return h;
}

std::vector<std::string> NumberedKeys(uint64_t keys) {
  std::vector<std::string> out;
  out.reserve(keys);
  for (uint64_t k = 0; k < keys; ++k) out.push_back(fmt::format("k{}", k));
  return out;
}

// `n` times evenly spaced over [0, span_us): i·span/n.
int64_t Spaced(uint64_t i, uint64_t n, int64_t span_us) {
  return static_cast<int64_t>((static_cast<__int128>(i) * span_us) / static_cast<__int128>(n));
}

// The boundary-burst attack: see trace.h.
absl::Status AddBoundaryBursts(const TraceOptions& o, int64_t duration_us, Trace& trace) {
  const int64_t w = o.window_us;
  const int64_t burst_us = std::max<int64_t>(1, w / 10);
  const auto per_window =
      static_cast<uint64_t>(std::llround(o.rate * static_cast<double>(w) / 1e6));
  const uint64_t before = per_window / 2, after = per_window - before;
  const int64_t phase = ((o.window_phase_us % w) + w) % w;
  uint64_t next_key = 0;
  // Boundaries in run time: where the epoch-aligned windows end.
  for (int64_t b = (w - phase) % w; b + burst_us <= duration_us; b += w) {
    if (b - burst_us < 0) continue;
    if (trace.arrivals.size() + per_window > kMaxArrivals) {
      return absl::InvalidArgumentError(
          fmt::format("the trace would have more than {} decisions", kMaxArrivals));
    }
    for (uint64_t i = 0; i < before; ++i) {
      trace.arrivals.push_back({.t_us = b - burst_us + Spaced(i, before, burst_us),
                                .key = static_cast<uint32_t>(next_key++ % o.keys)});
    }
    for (uint64_t i = 0; i < after; ++i) {
      trace.arrivals.push_back({.t_us = b + Spaced(i, after, burst_us),
                                .key = static_cast<uint32_t>(next_key++ % o.keys)});
    }
  }
  if (trace.arrivals.empty()) {
    return absl::InvalidArgumentError(
        "boundary: no window boundary with room for its bursts in the run (the window must be "
        "shorter than --seconds, and --rate x window at least 1)");
  }
  return absl::OkStatus();
}

}  // namespace

TraceKind ParseTraceKind(std::string_view name) {
  if (name == "uniform") return TraceKind::kUniform;
  if (name == "zipf") return TraceKind::kZipf;
  if (name == "onoff") return TraceKind::kOnOff;
  if (name == "hot") return TraceKind::kHot;
  if (name == "boundary") return TraceKind::kBoundary;
  if (name == "poisson") return TraceKind::kPoisson;
  return TraceKind::kFile;
}

ZipfSampler::ZipfSampler(uint64_t keys, double s) {
  cdf_.reserve(keys);
  double sum = 0;
  for (uint64_t k = 1; k <= keys; ++k) {
    sum += std::pow(static_cast<double>(k), -s);
    cdf_.push_back(sum);
  }
  for (double& c : cdf_) c /= sum;
}

uint32_t ZipfSampler::Rank(double u) const {
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  const auto rank = static_cast<size_t>(it - cdf_.begin());
  return static_cast<uint32_t>(std::min(rank, cdf_.size() - 1));
}

absl::StatusOr<Trace> GenerateTrace(const TraceOptions& o) {
  if (o.kind == TraceKind::kFile) return absl::InvalidArgumentError("not a synthetic trace");
  if (o.keys == 0 || o.keys > kMaxKeys) {
    return absl::InvalidArgumentError(fmt::format("--keys must be 1..{}", kMaxKeys));
  }
  if (!(o.rate > 0) || !(o.seconds > 0) || !(o.zipf_s >= 0)) {
    return absl::InvalidArgumentError("--rate and --seconds must be positive, --zipf-s >= 0");
  }
  const double expected = o.rate * o.seconds;
  if (expected > static_cast<double>(kMaxArrivals)) {
    return absl::InvalidArgumentError(
        fmt::format("--rate x --seconds is {:.0f} decisions; at most {}", expected, kMaxArrivals));
  }
  const auto duration_us = static_cast<int64_t>(o.seconds * 1e6);
  Trace trace;
  if (o.kind == TraceKind::kHot) {
    trace.keys = {"hot"};
  } else {
    trace.keys = NumberedKeys(o.keys);
  }
  if (o.kind == TraceKind::kBoundary) {
    if (o.window_us <= 0) return absl::InvalidArgumentError("boundary: the window must be > 0");
    if (auto s = AddBoundaryBursts(o, duration_us, trace); !s.ok()) return s;
    return trace;
  }
  const auto n = static_cast<uint64_t>(std::llround(expected));
  if (n == 0) return absl::InvalidArgumentError("--rate x --seconds is under one decision");
  std::mt19937_64 rng(o.seed);
  std::optional<ZipfSampler> zipf;
  if (o.kind == TraceKind::kZipf || o.kind == TraceKind::kOnOff) zipf.emplace(o.keys, o.zipf_s);
  // onoff: as many per burst as R gives a period on average.
  const uint64_t per_burst =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(o.rate * kOnOffPeriodUs / 1e6)));
  trace.arrivals.reserve(n);
  if (o.kind == TraceKind::kPoisson) {
    // Exponential gaps at rate R (a Poisson process), keys uniform over K: each key's arrivals
    // are a Poisson process of rate R/K.
    std::exponential_distribution<double> gap_s(o.rate);
    for (double t_s = gap_s(rng); t_s < o.seconds && trace.arrivals.size() < kMaxArrivals;
         t_s += gap_s(rng)) {
      trace.arrivals.push_back(
          {.t_us = static_cast<int64_t>(t_s * 1e6), .key = static_cast<uint32_t>(rng() % o.keys)});
    }
    return trace;
  }
  for (uint64_t i = 0; i < n; ++i) {
    Arrival a;
    if (o.kind == TraceKind::kOnOff) {
      a.t_us = static_cast<int64_t>(i / per_burst) * kOnOffPeriodUs +
               Spaced(i % per_burst, per_burst, kOnOffBurstUs);
      if (a.t_us >= duration_us) break;
    } else {
      a.t_us = Spaced(i, n, duration_us);
    }
    switch (o.kind) {
      case TraceKind::kUniform:
        a.key = static_cast<uint32_t>(rng() % o.keys);
        break;
      case TraceKind::kZipf:
      case TraceKind::kOnOff:
        a.key = zipf->Rank(Unit(rng));
        break;
      default:
        a.key = 0;  // hot
        break;
    }
    trace.arrivals.push_back(a);
  }
  return trace;
}

absl::StatusOr<Trace> ReadTrace(std::istream& in, const TraceOptions& o) {
  struct Line {
    int64_t t_ms;
    uint32_t key;
    uint64_t cost;
  };
  std::vector<Line> lines;
  Trace trace;
  absl::flat_hash_map<std::string, uint32_t> key_index;
  std::string text;
  for (size_t line_no = 1; std::getline(in, text); ++line_no) {
    const std::string_view stripped = util::StripTraceLine(text);
    if (stripped.empty() || stripped[0] == '#') continue;
    util::TraceLine line;
    // Milliseconds that still fit in µs once made relative.
    if (std::string why = util::ParseTraceLine(stripped, INT64_MAX / 1000, &line); !why.empty()) {
      return absl::InvalidArgumentError(fmt::format("line {}: {}", line_no, why));
    }
    if (lines.size() >= kMaxArrivals) {
      return absl::InvalidArgumentError(
          fmt::format("line {}: more than {} requests", line_no, kMaxArrivals));
    }
    auto [it, added] =
        key_index.try_emplace(std::string(line.key), static_cast<uint32_t>(trace.keys.size()));
    if (added) trace.keys.emplace_back(line.key);
    lines.push_back({.t_ms = line.t_ms, .key = it->second, .cost = line.cost});
  }
  if (in.bad()) return absl::InvalidArgumentError("error reading the trace");
  if (lines.empty()) return absl::InvalidArgumentError("the trace has no requests");
  std::stable_sort(lines.begin(), lines.end(),
                   [](const Line& a, const Line& b) { return a.t_ms < b.t_ms; });
  const int64_t first_ms = lines.front().t_ms;
  const auto duration_us = static_cast<int64_t>(o.seconds * 1e6);
  for (const Line& l : lines) {
    const int64_t t_us = (l.t_ms - first_ms) * 1000;
    if (t_us >= duration_us) break;
    trace.arrivals.push_back({.t_us = t_us, .key = l.key, .cost = l.cost});
  }
  return trace;
}

void SpreadOverInstances(Trace& trace, uint32_t instances, Spread spread) {
  instances = std::max<uint32_t>(1, instances);
  std::vector<uint32_t> by_key;
  if (spread == Spread::kHash) {
    by_key.reserve(trace.keys.size());
    for (const std::string& key : trace.keys) {
      by_key.push_back(static_cast<uint32_t>(StableHash(key) % instances));
    }
  }
  for (size_t i = 0; i < trace.arrivals.size(); ++i) {
    Arrival& a = trace.arrivals[i];
    a.instance = spread == Spread::kHash ? by_key[a.key] : static_cast<uint32_t>(i % instances);
  }
}

}  // namespace sluice::sim
