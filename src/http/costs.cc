#include "http/costs.h"

#include <simdjson.h>

#include <charconv>
#include <optional>

namespace sluice::http {
namespace {

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<uint64_t> JsonCount(std::string_view json, const std::string& pointer) {
  if (json.empty() || json.size() > UsageMeter::kMaxBytes) return std::nullopt;
  // Small documents (an event, a request's body) on a parser each thread keeps; a large one on
  // its own, so that no thread keeps a large parser's buffers.
  thread_local simdjson::dom::parser small_parser;
  std::optional<simdjson::dom::parser> large_parser;
  simdjson::dom::parser& parser =
      json.size() <= (size_t{64} << 10) ? small_parser : large_parser.emplace();
  simdjson::dom::element doc;
  if (parser.parse(json.data(), json.size(), /*realloc_if_needed=*/true).get(doc) !=
      simdjson::SUCCESS) {
    return std::nullopt;
  }
  uint64_t value = 0;
  if (doc.at_pointer(pointer).get_uint64().get(value) != simdjson::SUCCESS) return std::nullopt;
  return value;
}

namespace {

// A cost read from a message, if it is one: at most kMaxRequests (what a request may cost).
std::optional<uint64_t> Bounded(std::optional<uint64_t> value) {
  if (value && *value > kMaxRequests) return std::nullopt;
  return value;
}

std::optional<uint64_t> ReadUnbounded(const rules::CostSource& source,
                                      std::optional<std::string_view> header,
                                      std::string_view body) {
  switch (source.kind) {
    case rules::CostSource::Kind::kFixed:
      return source.fixed;
    case rules::CostSource::Kind::kHeader: {
      if (!header) return std::nullopt;
      const std::string_view text = TrimBlanks(*header);
      uint64_t value = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || ec != std::errc() || end != text.data() + text.size())
        return std::nullopt;
      return value;
    }
    case rules::CostSource::Kind::kJson:
      return JsonCount(body, source.pointer);
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> ReadCost(const rules::CostSource& source,
                                 std::optional<std::string_view> header, std::string_view body) {
  return Bounded(ReadUnbounded(source, header, body));
}

void UsageMeter::Feed(std::string_view piece) {
  if (gave_up_) return;
  if (!event_stream_) {
    if (held_.size() + piece.size() > kMaxBytes) {
      gave_up_ = true;
      held_.clear();
      return;
    }
    held_.append(piece);
    return;
  }
  // Lines end with \n (a \r before it is trimmed); an event's data lines are read one by one.
  while (!piece.empty()) {
    const size_t newline = piece.find('\n');
    if (newline == std::string_view::npos) {
      if (held_.size() + piece.size() > kMaxBytes) {
        held_.clear();  // a line too long for a usage: skipped up to its end
        skipping_ = true;
      } else if (!skipping_) {
        held_.append(piece);
      }
      return;
    }
    if (!skipping_) {
      held_.append(piece.substr(0, newline));
      Line(held_);
    }
    held_.clear();
    skipping_ = false;
    piece.remove_prefix(newline + 1);
  }
}

void UsageMeter::Line(std::string_view line) {
  line = TrimBlanks(line);
  if (!line.starts_with("data:")) return;
  line = TrimBlanks(line.substr(5));
  if (line.empty() || line.front() != '{') return;  // "[DONE]" and the like
  for (size_t i = 0; i < pointers_.size(); ++i) {
    // Most events are pieces of text: only one that names the field is parsed.
    const std::string_view field =
        std::string_view(pointers_[i]).substr(pointers_[i].rfind('/') + 1);
    if (line.find(field) == std::string_view::npos) continue;
    if (auto value = Bounded(JsonCount(line, pointers_[i]))) found_[i] = value;
  }
}

std::vector<std::optional<uint64_t>> UsageMeter::End() {
  if (event_stream_) {
    if (!held_.empty() && !skipping_) Line(held_);  // a last line without its newline
  } else if (!gave_up_) {
    for (size_t i = 0; i < pointers_.size(); ++i)
      found_[i] = Bounded(JsonCount(held_, pointers_[i]));
  }
  held_.clear();
  return found_;
}

}  // namespace sluice::http
