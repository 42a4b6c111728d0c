#include "cli/replay.h"

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "sluice/clock.h"
#include "sluice/limiter.h"
#include "util/millis.h"

namespace sluice::cli {
namespace {

// Splits on runs of spaces and tabs.
std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

// The line without leading and trailing white space (including a CR from CRLF files).
std::string_view Strip(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

enum class NumberError { kNone, kNegative, kOutOfRange, kNotInteger };

// Parses a whole token as a non-negative decimal integer.
template <typename T>
NumberError ParseNumber(std::string_view token, T* value) {
  if (!token.empty() && token[0] == '-') return NumberError::kNegative;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), *value);
  if (ec == std::errc::result_out_of_range) return NumberError::kOutOfRange;
  if (ec != std::errc() || ptr != token.data() + token.size()) return NumberError::kNotInteger;
  return NumberError::kNone;
}

// Returns an empty reason when the line is a request (filled into *out).
std::string ParseLine(std::string_view line, TraceRequest* out) {
  std::vector<std::string_view> fields = SplitFields(line);
  if (fields.size() < 2) return "missing key (expected: T_MS KEY [COST])";
  if (fields.size() > 3) return "too many fields (expected: T_MS KEY [COST])";
  out->t_ms_text = fields[0];
  switch (ParseNumber(fields[0], &out->t_ms)) {
    case NumberError::kNone:
      break;
    case NumberError::kNegative:
      return "negative time";
    case NumberError::kOutOfRange:
      return "time out of range";
    case NumberError::kNotInteger:
      return "time is not an integer";
  }
  if (out->t_ms > kMaxTimeUs / 1000) return "time out of range";
  out->key = fields[1];
  out->cost = 1;
  if (fields.size() == 3) {
    switch (ParseNumber(fields[2], &out->cost)) {
      case NumberError::kNone:
        break;
      case NumberError::kNegative:
        return "negative cost (cost is a positive integer)";
      case NumberError::kOutOfRange:
        return "cost too large";
      case NumberError::kNotInteger:
        return "cost is not an integer";
    }
    if (out->cost == 0) return "cost must be positive";
  }
  return {};
}

}  // namespace

int ReplayTrace(std::istream& in, std::ostream& out, std::ostream& err,
                const TraceDecider& decide) {
  fmt::memory_buffer buf;
  const auto flush = [&] {
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    buf.clear();
  };
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    std::string_view text = Strip(line);
    if (text.empty() || text[0] == '#') continue;
    TraceRequest req;
    std::string why = ParseLine(text, &req);
    std::optional<Decision> d;
    if (why.empty()) d = decide(req, &why);
    if (!d) {
      flush();
      out.flush();
      err << "line " << line_no << ": " << why << "\n";
      return 2;
    }
    fmt::format_to(std::back_inserter(buf), "{}\t{}\t{}\t{}\t{}\t{}\t{}\n", req.t_ms_text, req.key,
                   d->allowed ? "allow" : "deny", d->remaining, CeilMillis(d->retry_after_us),
                   CeilMillis(d->reset_after_us), CeilMillis(d->delay_us));
    if (buf.size() > (1 << 16)) flush();
  }
  flush();
  out.flush();
  if (in.bad()) {
    err << "replay: error reading the trace\n";
    return 2;
  }
  if (!out) {
    err << "replay: error writing the output\n";
    return 2;
  }
  return 0;
}

int RunReplay(const Limit& limit, std::istream& in, std::ostream& out, std::ostream& err) {
  ManualClock clock;  // decisions use the trace's times, never the machine's
  // The library's limiter, sized as the server's store is by default.
  auto limiter =
      Limiter::Create(limit, {.clock = &clock, .max_keys = size_t{1} << 24, .shards = 64});
  if (!limiter.ok()) {
    err << "replay: " << limiter.status().message() << "\n";
    return 2;
  }
  return ReplayTrace(in, out, err, [&](const TraceRequest& req, std::string*) {
    return std::optional<Decision>((*limiter)->DecideAt(req.key, req.cost, req.t_ms * 1000));
  });
}

}  // namespace sluice::cli
