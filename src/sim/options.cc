// sim's options: the --limit spec's parsing, the checks RunSim makes before it starts, and the
// trace the options name.
#include <charconv>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/redis/scripts.h"
#include "fmt/format.h"
#include "sim/sim.h"
#include "sim/sim_internal.h"

namespace sluice::sim {
namespace {

constexpr int kMaxInstances = 64;

}  // namespace

absl::StatusOr<Limit> ParseLimitSpec(std::string_view text) {
  const auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        fmt::format("--limit '{}': {} (expected ALGORITHM:N/WINDOW[:burst=B], e.g. "
                    "fixed_window:100/1s)",
                    text, why));
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return fail("no ':'");
  auto algorithm = ParseAlgorithm(text.substr(0, colon));
  if (!algorithm.ok()) return fail(std::string(algorithm.status().message()));
  std::string_view rest = text.substr(colon + 1);
  std::string_view burst;
  if (const size_t c = rest.find(':'); c != std::string_view::npos) {
    burst = rest.substr(c + 1);
    rest = rest.substr(0, c);
    if (!burst.starts_with("burst=")) return fail("the third part must be burst=B");
    burst.remove_prefix(6);
  }
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return fail("no '/' between N and WINDOW");
  Limit limit;
  limit.algorithm = *algorithm;
  const std::string_view n = rest.substr(0, slash);
  if (auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), limit.requests);
      ec != std::errc() || p != n.data() + n.size()) {
    return fail("N is not a non-negative integer");
  }
  auto window = ParseDuration(rest.substr(slash + 1));
  if (!window.ok()) return fail(std::string(window.status().message()));
  limit.window_us = *window;
  if (!burst.empty() || text.ends_with("burst=")) {
    uint64_t b = 0;
    if (auto [p, ec] = std::from_chars(burst.data(), burst.data() + burst.size(), b);
        ec != std::errc() || p != burst.data() + burst.size()) {
      return fail("B is not a non-negative integer");
    }
    limit.burst = b;
  }
  if (absl::Status s = ValidateLimit(limit); !s.ok()) return fail(std::string(s.message()));
  return limit;
}

// The options RunSim cannot run with: 2 (a message on `err`), else 0.
int CheckSimOptions(const SimOptions& o, std::ostream& err) {
  if (o.instances < 1 || o.instances > kMaxInstances) {
    err << "sim: --instances must be 1.." << kMaxInstances << "\n";
    return 2;
  }
  if (o.instance.redis_urls.empty()) {
    err << "sim: --redis URL is required\n";
    return 2;
  }
  if (auto s = redis::CheckExactRange(o.limit); !s.ok()) {
    err << "sim: --limit: " << s.message() << "\n";
    return 2;
  }
  if (o.warmup_seconds < 0 || (o.warmup_seconds > 0 && o.warmup_seconds >= o.trace.seconds)) {
    err << "sim: --warmup must be at least 0 and less than --seconds\n";
    return 2;
  }
  return 0;
}

// The trace the options name, for a run starting at `start_us` (the backend's clock).
absl::StatusOr<Trace> MakeTrace(const SimOptions& o, int64_t start_us) {
  TraceOptions trace_options = o.trace;
  trace_options.window_us = o.limit.window_us;
  trace_options.window_phase_us = start_us % o.limit.window_us;
  absl::StatusOr<Trace> trace;
  if (trace_options.kind == TraceKind::kFile) {
    std::ifstream file(o.trace_name);
    if (!file || std::filesystem::is_directory(o.trace_name)) {
      return absl::InvalidArgumentError(fmt::format("--trace: cannot read {}", o.trace_name));
    }
    trace = ReadTrace(file, trace_options);
  } else {
    trace = GenerateTrace(trace_options);
  }
  if (trace.ok()) SpreadOverInstances(*trace, static_cast<uint32_t>(o.instances), o.spread);
  return trace;
}

}  // namespace sluice::sim
