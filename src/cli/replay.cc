#include "cli/replay.h"

#include <string>
#include <string_view>

#include "fmt/format.h"
#include "sluice/clock.h"
#include "sluice/limiter.h"
#include "util/millis.h"
#include "util/trace_line.h"

namespace sluice::cli {

int ReplayTrace(std::istream& in, std::ostream& out, std::ostream& err,
                const TraceDecider& decide) {
  fmt::memory_buffer buf;
  const auto flush = [&] {
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    buf.clear();
  };
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    std::string_view text = util::StripTraceLine(line);
    if (text.empty() || text[0] == '#') continue;
    TraceRequest req;
    std::string why = util::ParseTraceLine(text, kMaxTimeUs / 1000, &req);
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
