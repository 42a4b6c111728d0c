#include "http/check_json.h"

#include <simdjson.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <string_view>
#include <utility>

#include "fmt/format.h"
#include "rules/loader.h"
#include "sluice/limit.h"
#include "util/millis.h"

namespace sluice::http {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// Client text quoted in an error message is cut to this many bytes.
constexpr size_t kMaxEchoBytes = 64;
// Bodies up to this size are parsed by a thread-local parser that keeps its buffers.
constexpr size_t kRetainedParserBytes = 64 << 10;
// cost, hits_addend and requests_per_unit are uint32 in RLS; kMaxRequests is the same bound.
constexpr uint64_t kMaxCount = kMaxRequests;

std::string_view TypeName(element_type type) {
  switch (type) {
    case element_type::ARRAY:
      return "an array";
    case element_type::OBJECT:
      return "an object";
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE:
      return "a number";
    case element_type::STRING:
      return "a string";
    case element_type::BOOL:
      return "a boolean";
    case element_type::NULL_VALUE:
      return "null";
  }
  return "a value";
}

// Client text for an error message: at most kMaxEchoBytes, cut before a UTF-8 continuation byte.
std::string Echo(std::string_view text) {
  if (text.size() <= kMaxEchoBytes) return std::string(text);
  size_t cut = kMaxEchoBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  std::string echo(text.substr(0, cut));
  echo += "...";
  return echo;
}

// Where a value sits in the body: a chain of steps on the stack, spelled out
// ("descriptors[1].entries[0].key") only when a problem is reported, so a good body costs no
// string building.
struct Where {
  const Where* parent = nullptr;
  std::string_view field;   // ".field" (no dot at the top), or
  size_t index = SIZE_MAX;  // "[index]"

  Where Field(std::string_view name) const { return Where{this, name, SIZE_MAX}; }
  Where Index(size_t i) const { return Where{this, {}, i}; }

  void AppendTo(std::string* out) const {
    if (parent != nullptr) parent->AppendTo(out);
    if (index != SIZE_MAX) {
      fmt::format_to(std::back_inserter(*out), "[{}]", index);
    } else {
      if (!out->empty()) *out += '.';
      *out += field;
    }
  }
};

absl::Status Problem(const Where& where, std::string_view problem) {
  std::string message;
  where.AppendTo(&message);
  message += ": ";
  message += problem;
  return absl::InvalidArgumentError(message);
}

// The fields of one JSON object, by position in a fixed list of known names. Unknown and
// repeated fields are errors.
template <size_t N>
absl::Status ReadFields(simdjson::dom::object object, const Where& where,
                        const std::array<std::string_view, N>& known,
                        std::array<std::optional<element>, N>* fields) {
  for (const simdjson::dom::key_value_pair field : object) {
    size_t i = 0;
    while (i < N && known[i] != field.key) ++i;
    if (i == N) {
      std::string list(known[0]);
      for (size_t k = 1; k < N; ++k) {
        list += ", ";
        list += known[k];
      }
      const std::string name = Echo(field.key);
      return Problem(where.Field(name), fmt::format("unknown field (known: {})", list));
    }
    if ((*fields)[i].has_value()) return Problem(where.Field(known[i]), "given twice");
    (*fields)[i] = field.value;
  }
  return absl::OkStatus();
}

absl::StatusOr<simdjson::dom::object> AsObject(element value, const Where& where) {
  simdjson::dom::object object;
  if (value.get(object) != simdjson::SUCCESS) {
    return Problem(where, fmt::format("expected an object, got {}", TypeName(value.type())));
  }
  return object;
}

absl::StatusOr<simdjson::dom::array> AsArray(element value, const Where& where) {
  simdjson::dom::array array;
  if (value.get(array) != simdjson::SUCCESS) {
    return Problem(where, fmt::format("expected an array, got {}", TypeName(value.type())));
  }
  return array;
}

// A string of at most `max_bytes` bytes (decoded), non-empty unless `may_be_empty`.
absl::StatusOr<std::string_view> AsString(element value, const Where& where, size_t max_bytes,
                                          bool may_be_empty) {
  std::string_view text;
  if (value.get(text) != simdjson::SUCCESS) {
    return Problem(where, fmt::format("expected a string, got {}", TypeName(value.type())));
  }
  if (text.empty() && !may_be_empty) return Problem(where, "empty");
  if (text.size() > max_bytes) {
    return Problem(where,
                   fmt::format("{} bytes, longer than the maximum of {} (http.max_key_bytes)",
                               text.size(), max_bytes));
  }
  return text;
}

// An integer in 0 .. kMaxCount.
absl::StatusOr<uint64_t> AsCount(element value, const Where& where) {
  switch (value.type()) {
    case element_type::INT64: {
      const int64_t n = value.get_int64().value_unsafe();
      if (n < 0) return Problem(where, fmt::format("must not be negative, got {}", n));
      if (static_cast<uint64_t>(n) > kMaxCount) {
        return Problem(where, fmt::format("{} is above the maximum of {}", n, kMaxCount));
      }
      return static_cast<uint64_t>(n);
    }
    case element_type::UINT64:  // only values above INT64_MAX are typed UINT64
      return Problem(where, fmt::format("{} is above the maximum of {}",
                                        value.get_uint64().value_unsafe(), kMaxCount));
    case element_type::DOUBLE:
      return Problem(where, "expected an integer, got a number with a fraction or an exponent");
    default:
      return Problem(where, fmt::format("expected an integer, got {}", TypeName(value.type())));
  }
}

// Present and not null: optional fields given as null are absent.
bool IsGiven(const std::optional<element>& value) { return value.has_value() && !value->is_null(); }

absl::StatusOr<engine::LimitOverride> ParseLimit(element value, const Where& where) {
  auto object = AsObject(value, where);
  if (!object.ok()) return object.status();
  static constexpr std::array<std::string_view, 2> kFields = {"requests_per_unit", "unit"};
  std::array<std::optional<element>, 2> fields;
  if (absl::Status s = ReadFields(*object, where, kFields, &fields); !s.ok()) return s;
  engine::LimitOverride limit;

  const Where requests_where = where.Field(kFields[0]);
  if (!fields[0].has_value()) return Problem(requests_where, "missing");
  auto requests = AsCount(*fields[0], requests_where);
  if (!requests.ok()) return requests.status();
  limit.requests_per_unit = *requests;

  const Where unit_where = where.Field(kFields[1]);
  if (!fields[1].has_value()) return Problem(unit_where, "missing");
  std::string_view unit;
  if (fields[1]->get(unit) != simdjson::SUCCESS) {
    return Problem(unit_where,
                   fmt::format("expected a string, got {}", TypeName(fields[1]->type())));
  }
  limit.window_us = rules::UnitMicros(unit);
  if (limit.window_us == 0) {
    static constexpr std::string_view kUnits =
        "second, minute, hour, day, week, month (30 days), year (365 days)";
    std::string hint;
    if (unit.size() <= 16) {  // Suggest is quadratic; a long word is no typo of a unit anyway
      const std::string suggestion =
          rules::Suggest(unit, {"second", "minute", "hour", "day", "week", "month", "year"});
      if (!suggestion.empty()) hint = fmt::format("; did you mean '{}'?", suggestion);
    }
    return Problem(unit_where,
                   fmt::format("unknown unit '{}' (known: {}){}", Echo(unit), kUnits, hint));
  }
  limit.unit = std::string(unit);
  return limit;
}

absl::StatusOr<rules::Entry> ParseEntry(element value, const Where& where, size_t max_key_bytes) {
  auto object = AsObject(value, where);
  if (!object.ok()) return object.status();
  static constexpr std::array<std::string_view, 2> kFields = {"key", "value"};
  std::array<std::optional<element>, 2> fields;
  if (absl::Status s = ReadFields(*object, where, kFields, &fields); !s.ok()) return s;
  rules::Entry entry;
  for (size_t i = 0; i < 2; ++i) {
    const Where field_where = where.Field(kFields[i]);
    if (!fields[i].has_value()) return Problem(field_where, "missing");
    auto text = AsString(*fields[i], field_where, max_key_bytes, /*may_be_empty=*/i == 1);
    if (!text.ok()) return text.status();
    (i == 0 ? entry.key : entry.value) = std::string(*text);
  }
  return entry;
}

absl::StatusOr<engine::Descriptor> ParseDescriptor(element value, const Where& where,
                                                   size_t max_key_bytes) {
  auto object = AsObject(value, where);
  if (!object.ok()) return object.status();
  static constexpr std::array<std::string_view, 3> kFields = {"entries", "limit", "hits_addend"};
  std::array<std::optional<element>, 3> fields;
  if (absl::Status s = ReadFields(*object, where, kFields, &fields); !s.ok()) return s;
  engine::Descriptor descriptor;

  const Where entries_where = where.Field(kFields[0]);
  if (!fields[0].has_value()) return Problem(entries_where, "missing");
  auto entries = AsArray(*fields[0], entries_where);
  if (!entries.ok()) return entries.status();
  if (entries->size() == 0) return Problem(entries_where, "empty (a descriptor needs an entry)");
  if (entries->size() > engine::kMaxDescriptorEntries) {
    return Problem(entries_where, fmt::format("{} entries, more than the maximum of {}",
                                              entries->size(), engine::kMaxDescriptorEntries));
  }
  descriptor.entries.reserve(entries->size());
  size_t index = 0;
  for (const element e : *entries) {
    auto entry = ParseEntry(e, entries_where.Index(index++), max_key_bytes);
    if (!entry.ok()) return entry.status();
    descriptor.entries.push_back(*std::move(entry));
  }

  if (IsGiven(fields[1])) {
    auto limit = ParseLimit(*fields[1], where.Field(kFields[1]));
    if (!limit.ok()) return limit.status();
    descriptor.limit = *std::move(limit);
  }
  if (IsGiven(fields[2])) {
    auto hits = AsCount(*fields[2], where.Field(kFields[2]));
    if (!hits.ok()) return hits.status();
    descriptor.hits_addend = *hits;
  }
  return descriptor;
}

// Short pieces gathered on the stack and appended to a string in one go (when full, and at the
// end): a status is a dozen small pieces, and each std::string append checks capacity and length
// on its own. Every /v1/check answer and forward-auth denial is written through one.
class PieceWriter {
 public:
  explicit PieceWriter(std::string* out) : out_(out) {}
  PieceWriter(const PieceWriter&) = delete;
  PieceWriter& operator=(const PieceWriter&) = delete;
  ~PieceWriter() { Flush(); }

  [[gnu::always_inline]] void Add(std::string_view piece) {
    if (piece.size() > sizeof buffer_ - used_) {
      Flush();
      if (piece.size() > sizeof buffer_) return (void)out_->append(piece);
    }
    std::memcpy(buffer_ + used_, piece.data(), piece.size());
    used_ += piece.size();
  }
  template <typename Int>
  void AddInt(Int value) {
    const fmt::format_int text(value);
    Add(std::string_view(text.data(), text.size()));
  }
  // The string, with everything added so far in it.
  std::string* Flushed() {
    Flush();
    return out_;
  }

 private:
  void Flush() {
    out_->append(buffer_, used_);
    used_ = 0;
  }

  std::string* out_;
  char buffer_[256];
  size_t used_ = 0;
};

void AppendStatus(std::string* out, const engine::DescriptorResult& result) {
  using namespace std::string_view_literals;
  PieceWriter w(out);
  w.Add(R"({"name":)"sv);
  if (result.headline < 0) {
    w.Add(R"("","limit":null,"remaining":-1,"reset_after_ms":0,"retry_after_ms":0})"sv);
    return;
  }
  const engine::AppliedLimit& limit = result.limits[static_cast<size_t>(result.headline)];
  if (const std::string_view name = limit.name;
      !name.empty() && util::PlainJsonRunEnd(name, 0) == name.size()) {
    w.Add("\""sv);
    w.Add(name);
    w.Add("\""sv);
  } else {
    AppendJsonString(w.Flushed(), StatusName(result));
  }
  const Decision& d = limit.decision;
  // A shadow limit reports its deny but never denies: there is nothing to wait for.
  const int64_t retry_after_ms = d.allowed || limit.shadow ? 0 : CeilMillis(d.retry_after_us);
  w.Add(R"(,"limit":)"sv);
  w.AddInt(engine::ReportedLimit(limit.limit));
  w.Add(R"(,"remaining":)"sv);
  w.AddInt(d.remaining);
  w.Add(R"(,"reset_after_ms":)"sv);
  w.AddInt(CeilMillis(d.reset_after_us));
  w.Add(R"(,"retry_after_ms":)"sv);
  w.AddInt(retry_after_ms);
  if (d.penalty) w.Add(R"(,"penalty":true)"sv);  // blocked by the limit's penalty
  w.Add("}"sv);
}

}  // namespace

namespace {

// ParseCheckRequest's work; with `for_us`, a "for" field (a duration) is known too and read there.
absl::StatusOr<engine::Request> ParseRequest(std::string_view body, size_t max_key_bytes,
                                             std::optional<int64_t>* for_us) {
  // A parser keeps buffers of about 15 bytes per byte of the largest document it has parsed:
  // each thread keeps one for ordinary bodies, and a larger body gets a parser of its own.
  thread_local simdjson::dom::parser small_parser;
  std::optional<simdjson::dom::parser> large_parser;
  simdjson::dom::parser& parser =
      body.size() <= kRetainedParserBytes ? small_parser : large_parser.emplace();
  // parse(..., realloc_if_needed = true) copies the body into the parser's own padded buffer, so
  // simdjson never reads past `body`.
  const Where document{nullptr, "body", SIZE_MAX};
  element root;
  if (const simdjson::error_code error =
          parser.parse(body.data(), body.size(), /*realloc_if_needed=*/true).get(root);
      error != simdjson::SUCCESS) {
    if (error == simdjson::EMPTY) return Problem(document, "empty (expected a JSON object)");
    return Problem(document, fmt::format("not valid JSON: {}", simdjson::error_message(error)));
  }
  auto object = AsObject(root, document);
  if (!object.ok()) return object.status();
  static constexpr std::array<std::string_view, 4> kFields = {"domain", "descriptors", "cost",
                                                              "for"};
  std::array<std::optional<element>, 4> fields;
  const Where top;  // the request's fields are named without a prefix
  if (for_us != nullptr) {
    if (absl::Status s = ReadFields(*object, top, kFields, &fields); !s.ok()) return s;
  } else {
    static constexpr std::array<std::string_view, 3> kCheckFields = {"domain", "descriptors",
                                                                     "cost"};
    std::array<std::optional<element>, 3> check;
    if (absl::Status s = ReadFields(*object, top, kCheckFields, &check); !s.ok()) return s;
    std::copy(check.begin(), check.end(), fields.begin());
  }
  if (for_us != nullptr && IsGiven(fields[3])) {
    auto text = AsString(*fields[3], top.Field(kFields[3]), 64, /*may_be_empty=*/false);
    if (!text.ok()) return text.status();
    auto duration = ParseDuration(*text);
    if (!duration.ok())
      return Problem(top.Field(kFields[3]), std::string(duration.status().message()));
    *for_us = *duration;
  }
  engine::Request request;

  const Where domain_where = top.Field(kFields[0]);
  if (!fields[0].has_value()) return Problem(domain_where, "missing");
  auto domain = AsString(*fields[0], domain_where, max_key_bytes, /*may_be_empty=*/false);
  if (!domain.ok()) return domain.status();
  request.domain = std::string(*domain);

  const Where descriptors_where = top.Field(kFields[1]);
  if (!fields[1].has_value()) return Problem(descriptors_where, "missing");
  auto descriptors = AsArray(*fields[1], descriptors_where);
  if (!descriptors.ok()) return descriptors.status();
  if (descriptors->size() == 0) {
    return Problem(descriptors_where, "empty (at least one is needed)");
  }
  if (descriptors->size() > engine::kMaxRequestDescriptors) {
    return Problem(descriptors_where,
                   fmt::format("{} descriptors, more than the maximum of {}", descriptors->size(),
                               engine::kMaxRequestDescriptors));
  }
  request.descriptors.reserve(descriptors->size());
  size_t index = 0;
  for (const element d : *descriptors) {
    auto descriptor = ParseDescriptor(d, descriptors_where.Index(index++), max_key_bytes);
    if (!descriptor.ok()) return descriptor.status();
    request.descriptors.push_back(*std::move(descriptor));
  }

  uint64_t cost = 1;
  if (IsGiven(fields[2])) {
    auto parsed = AsCount(*fields[2], top.Field(kFields[2]));
    if (!parsed.ok()) return parsed.status();
    cost = *parsed;
  }
  // The engine counts a request-level 0 as 1 (RLS); here 0 peeks, so it goes to the descriptors.
  request.hits_addend = cost == 0 ? 1 : cost;
  if (cost == 0) {
    for (engine::Descriptor& d : request.descriptors) {
      if (!d.hits_addend.has_value()) d.hits_addend = 0;
    }
  }
  return request;
}

}  // namespace

absl::StatusOr<engine::Request> ParseCheckRequest(std::string_view body, size_t max_key_bytes) {
  return ParseRequest(body, max_key_bytes, nullptr);
}

absl::StatusOr<engine::Request> ParseReserveRequest(std::string_view body, size_t max_key_bytes,
                                                    std::optional<int64_t>* for_us) {
  return ParseRequest(body, max_key_bytes, for_us);
}

std::string StatusName(const engine::DescriptorResult& result) {
  if (result.headline < 0) return "";
  return engine::LimitName(result.limits[static_cast<size_t>(result.headline)]);
}

std::string RenderCheckResponse(const engine::Response& response) {
  std::string out;
  AppendCheckResponse(&out, response);
  return out;
}

void AppendCheckResponse(std::string* out, const engine::Response& response) {
  out->reserve(out->size() + 32 + 112 * response.descriptors.size());
  *out += response.allowed ? R"({"allowed":true,"statuses":[)" : R"({"allowed":false,"statuses":[)";
  for (size_t i = 0; i < response.descriptors.size(); ++i) {
    if (i > 0) *out += ',';
    AppendStatus(out, response.descriptors[i]);
  }
  *out += "]}";
}

std::string RenderError(std::string_view message) {
  std::string out = R"({"error":)";
  AppendJsonString(&out, message);
  out += '}';
  return out;
}

}  // namespace sluice::http
