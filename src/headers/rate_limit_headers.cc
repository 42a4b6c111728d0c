#include "headers/rate_limit_headers.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "fmt/compile.h"
#include "fmt/format.h"
#include "sluice/limit.h"

namespace sluice::render {
namespace {

constexpr int64_t kSecondUs = 1000000;

int64_t ClampField(int64_t value) { return std::clamp<int64_t>(value, 0, kMaxFieldInteger); }

int64_t ClampField(uint64_t value) {
  return static_cast<int64_t>(std::min<uint64_t>(value, kMaxFieldInteger));
}

// Whole seconds, rounded up (1 µs -> 1, 1000000 µs -> 1, 1000001 µs -> 2); 0 for <= 0.
int64_t CeilSeconds(int64_t us) {
  if (us <= 0) return 0;
  return us / kSecondUs + (us % kSecondUs != 0 ? 1 : 0);
}

// The `t` of one limit (see the header): the wait when it denied, else the time to reset.
int64_t TSeconds(const Decision& decision) {
  if (decision.allowed) return ClampField(CeilSeconds(decision.reset_after_us));
  if (decision.retry_after_us == Decision::kNever) return kNeverRetryAfterSeconds;
  return ClampField(CeilSeconds(decision.retry_after_us));
}

// RFC 9651 §3.3.3: an sf-string holds printable ASCII only.
char Printable(char c) { return c >= 0x20 && c <= 0x7E ? c : '?'; }

// Whether `text` goes into an sf-string as it is: no '"' or '\\' to escape, nothing outside
// printable ASCII to replace.
bool SfStringAsIs(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return c != '"' && c != '\\' && Printable(c) == c; });
}

bool SameFieldName(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Printable(a[i]) != Printable(b[i])) return false;
  }
  return true;
}

// Writes a field value into room the caller sized beforehand (an upper bound of what it will
// write, see ForEachRateLimitHeader): no capacity check per piece, which matters because this
// runs for every answer.
class FieldWriter {
 public:
  explicit FieldWriter(char* room) : begin_(room), end_(room) {}
  void Put(char c) { *end_++ = c; }
  void Put(std::string_view text) {
    std::memcpy(end_, text.data(), text.size());
    end_ += text.size();
  }
  // `prefix` (a literal: its size is known here, so the copy is inlined) and the decimal
  // `value`, written in place, e.g. ";q=100".
  template <size_t N>
  void PutParameter(const char (&prefix)[N], int64_t value) {
    std::memcpy(end_, prefix, N - 1);
    end_ = fmt::format_to(end_ + N - 1, FMT_COMPILE("{}"), value);
  }
  // An sf-string (RFC 9651 §3.3.3): quoted, '"' and '\\' escaped, other bytes outside printable
  // ASCII replaced by '?'.
  void PutSfString(std::string_view text) {
    Put('"');
    // Names rarely need escaping or replacing: then one copy rather than a byte at a time.
    if (SfStringAsIs(text)) {
      Put(text);
    } else {
      for (const char c : text) {
        if (c == '"' || c == '\\') Put('\\');
        Put(Printable(c));
      }
    }
    Put('"');
  }
  bool empty() const { return end_ == begin_; }
  void clear() { end_ = begin_; }
  std::string_view text() const {
    return std::string_view(begin_, static_cast<size_t>(end_ - begin_));
  }

 private:
  char* const begin_;
  char* end_;
};

// The most bytes an sf-string of `text` takes, and a ";x=" parameter.
constexpr size_t kParameterBytes = 3 + 20;  // ";q=" and an int64
size_t SfStringBytes(std::string_view text) { return 2 + 2 * text.size(); }

// One applied limit on its way into the IETF lists.
struct Item {
  const engine::AppliedLimit* applied = nullptr;
  size_t index = 0;  // position in the response: the last tie-breaker, for a stable order
  bool headline = false;
  bool enforced_deny = false;  // denied and not shadow: it is why the response is a deny
  int64_t t = 0;
  bool duplicate = false;  // an earlier (more constrained) item has the same name
  // "<N>-per-<window>" for an unnamed limit.
  char derived_name[64];
  size_t derived_size = 0;

  std::string_view Name() const {
    return applied->name.empty() ? std::string_view(derived_name, derived_size)
                                 : std::string_view(applied->name);
  }
};

// Most constrained first, in the engine's own order, with the headline itself always first.
bool MoreConstrained(const Item& a, const Item& b) {
  if (a.headline != b.headline) return a.headline;
  if (engine::MoreRestrictive(*a.applied, *b.applied)) return true;
  if (engine::MoreRestrictive(*b.applied, *a.applied)) return false;
  return a.index < b.index;
}

// Where the fields go (Render's Sink): a callback per field, or text lines appended to a string.
class CallbackSink {
 public:
  explicit CallbackSink(absl::FunctionRef<void(std::string_view, std::string_view)> emit)
      : emit_(emit) {}
  void Text(std::string_view name, std::string_view value) { emit_(name, value); }
  void Integer(std::string_view name, int64_t value) {
    const fmt::format_int text(value);
    emit_(name, std::string_view(text.data(), text.size()));
  }

 private:
  absl::FunctionRef<void(std::string_view, std::string_view)> emit_;
};

// "Name: value\r\n" per field, appended to a string (the usual single-limit answer takes the
// faster AppendSingleLimitLines instead).
class LineSink {
 public:
  explicit LineSink(std::string* out) : out_(out) {}
  void Text(std::string_view name, std::string_view value) {
    out_->append(name).append(": ", 2).append(value).append("\r\n", 2);
  }
  void Integer(std::string_view name, int64_t value) {
    const fmt::format_int text(value);
    Text(name, std::string_view(text.data(), text.size()));
  }

 private:
  std::string* const out_;
};

}  // namespace

absl::StatusOr<HeaderStyles> ParseHeaderStyles(std::span<const std::string> names) {
  HeaderStyles styles{.x_ratelimit = false, .ietf = false};
  bool none = false;
  for (const std::string& name : names) {
    if (name == "x_ratelimit") {
      styles.x_ratelimit = true;
    } else if (name == "ietf") {
      styles.ietf = true;
    } else if (name == "none") {
      none = true;
    } else {
      return absl::InvalidArgumentError(
          fmt::format("unknown header style '{}' (x_ratelimit, ietf, none)", name));
    }
  }
  if (none && (styles.x_ratelimit || styles.ietf)) {
    return absl::InvalidArgumentError("header style 'none' cannot be combined with another style");
  }
  return styles;
}

namespace {

// The fields of `response` in `styles`, given one by one to `sink` (see ForEachRateLimitHeader).
template <typename Sink>
void Render(const engine::Response& response, const HeaderStyles& styles, Sink& sink) {
  const engine::AppliedLimit* headline = response.Headline();
  absl::InlinedVector<Item, 8> items;
  for (const engine::DescriptorResult& descriptor : response.descriptors) {
    for (const engine::AppliedLimit& applied : descriptor.limits) {
      Item& item = items.emplace_back();
      item.applied = &applied;
      item.index = items.size() - 1;
      item.headline = &applied == headline;
      item.enforced_deny = !applied.decision.allowed && !applied.shadow;
      item.t = TSeconds(applied.decision);
    }
  }
  if (items.empty()) return;  // no limit applied: nothing to say (no finite policy, no field)

  if (styles.x_ratelimit && headline != nullptr) {
    sink.Integer("X-RateLimit-Limit", ClampField(engine::ReportedLimit(headline->limit)));
    sink.Integer("X-RateLimit-Remaining", ClampField(response.remaining));
    sink.Integer("X-RateLimit-Reset", TSeconds(headline->decision));
  }

  if (styles.ietf) {
    for (Item& item : items) {
      if (!item.applied->name.empty()) continue;
      const Limit& limit = item.applied->limit;
      const auto result = fmt::format_to_n(item.derived_name, sizeof item.derived_name, "{}-per-{}",
                                           limit.requests, FormatDuration(limit.window_us));
      item.derived_size = std::min(result.size, sizeof item.derived_name);
    }
    std::sort(items.begin(), items.end(), MoreConstrained);
    for (size_t i = 0; i < items.size(); ++i) {
      for (size_t j = 0; j < i && !items[i].duplicate; ++j) {
        items[i].duplicate = !items[j].duplicate && SameFieldName(items[i].Name(), items[j].Name());
      }
    }

    // Room for the longer of the two lists, on the stack unless the names are very long.
    size_t room_bytes = 0;
    for (const Item& item : items) {
      if (!item.duplicate) room_bytes += 2 + SfStringBytes(item.Name()) + 2 * kParameterBytes;
    }
    char stack_room[512];
    std::unique_ptr<char[]> heap_room;
    if (room_bytes > sizeof stack_room) heap_room = std::make_unique<char[]>(room_bytes);
    FieldWriter field(heap_room != nullptr ? heap_room.get() : stack_room);
    const auto append_list = [&](auto append_params) {
      field.clear();
      for (const Item& item : items) {
        if (item.duplicate) continue;
        if (!field.empty()) field.Put(", ");
        field.PutSfString(item.Name());
        append_params(item);
      }
    };
    // Parameters written piece by piece: this runs for every answer, and a format string would
    // be parsed each time.
    append_list([&](const Item& item) {
      const Limit& limit = item.applied->limit;
      field.PutParameter(";q=", ClampField(engine::ReportedLimit(limit)));
      field.PutParameter(";w=", std::max<int64_t>(1, ClampField(CeilSeconds(limit.window_us))));
    });
    sink.Text("RateLimit-Policy", field.text());
    append_list([&](const Item& item) {
      field.PutParameter(";r=", ClampField(item.applied->decision.remaining));
      field.PutParameter(";t=", item.t);
    });
    sink.Text("RateLimit", field.text());
  }

  if (!response.allowed) {
    int64_t retry_after = 1;
    for (const Item& item : items) {
      if (item.enforced_deny) retry_after = std::max(retry_after, item.t);
    }
    sink.Integer("Retry-After", retry_after);
  }
}

}  // namespace

void ForEachRateLimitHeader(const engine::Response& response, const HeaderStyles& styles,
                            absl::FunctionRef<void(std::string_view, std::string_view)> emit) {
  CallbackSink sink(emit);
  Render(response, styles, sink);
}

namespace {

// AppendRateLimitFieldLines for the usual answer, a single applied limit whose name needs no
// escaping: every line written on the stack with no sorting, deduplicating or sizing, then
// appended at once. False (and nothing written) for any other answer. Must give exactly what
// Render gives (the header tests compare the two on every response they build).
bool AppendSingleLimitLines(const engine::Response& response, const HeaderStyles& styles,
                            std::string* out) {
  const engine::AppliedLimit* only = response.Headline();
  if (only == nullptr || only->name.empty() || only->name.size() > 64) return false;
  size_t applied = 0;
  for (const engine::DescriptorResult& descriptor : response.descriptors) {
    applied += descriptor.limits.size();
  }
  if (applied != 1) return false;
  const std::string_view name = only->name;
  if (!SfStringAsIs(name)) return false;
  char line[512];  // at most 64 bytes of name, 7 numbers of 20 digits and the fixed text
  char* end = line;
  const auto put = [&end](std::string_view text) {
    std::memcpy(end, text.data(), text.size());
    end += text.size();
  };
  const auto number = [&end](int64_t value) {
    end = fmt::format_to(end, FMT_COMPILE("{}"), value);
  };
  const Limit& limit = only->limit;
  const int64_t t = TSeconds(only->decision);
  if (styles.x_ratelimit) {
    put("X-RateLimit-Limit: ");
    number(ClampField(engine::ReportedLimit(limit)));
    put("\r\nX-RateLimit-Remaining: ");
    number(ClampField(response.remaining));
    put("\r\nX-RateLimit-Reset: ");
    number(t);
    put("\r\n");
  }
  if (styles.ietf) {
    put("RateLimit-Policy: \"");
    put(name);
    put("\";q=");
    number(ClampField(engine::ReportedLimit(limit)));
    put(";w=");
    number(std::max<int64_t>(1, ClampField(CeilSeconds(limit.window_us))));
    put("\r\nRateLimit: \"");
    put(name);
    put("\";r=");
    number(ClampField(only->decision.remaining));
    put(";t=");
    number(t);
    put("\r\n");
  }
  if (!response.allowed) {
    const bool enforced_deny = !only->decision.allowed && !only->shadow;
    put("Retry-After: ");
    number(enforced_deny ? std::max<int64_t>(1, t) : 1);
    put("\r\n");
  }
  out->append(line, static_cast<size_t>(end - line));
  return true;
}

}  // namespace

void AppendRateLimitFieldLines(const engine::Response& response, const HeaderStyles& styles,
                               std::string* out) {
  if (AppendSingleLimitLines(response, styles, out)) return;
  LineSink sink(out);
  Render(response, styles, sink);
}

void AppendRateLimitHeaders(const engine::Response& response, const HeaderStyles& styles,
                            std::vector<Header>* out) {
  ForEachRateLimitHeader(response, styles, [out](std::string_view name, std::string_view value) {
    out->push_back(Header{std::string(name), std::string(value)});
  });
}

}  // namespace sluice::render
