// Costs read from HTTP messages (a rate_limits entry's `cost:`, rules::RouteCost): what a request
// reserves (a header, or a JSON field of its body), and what its answer says it cost (a header,
// or a JSON field of the answer's body: of the whole body, or of the last event of an event
// stream that carries it, as an LLM's streamed completion ends with its usage).

#ifndef SLUICE_HTTP_COSTS_H_
#define SLUICE_HTTP_COSTS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rules/config.h"

namespace sluice::http {

// The count `source` gives: its number (kFixed), `header` (the value of the source's header in
// the message, if it has one: kHeader) or the JSON field in `body` (kJson); a whole number (a
// JSON number without a fraction, or a header of digits) of at most kMaxRequests, else nullopt.
std::optional<uint64_t> ReadCost(const rules::CostSource& source,
                                 std::optional<std::string_view> header, std::string_view body);

// The value of field `name` of a message (request or answer), if it has it.
template <typename Message>
std::optional<std::string_view> FieldOf(const Message& message, const std::string& name) {
  const auto it = message.find(name);
  if (it == message.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

// The whole number at JSON Pointer `pointer` in the JSON text `json`, or nullopt.
std::optional<uint64_t> JsonCount(std::string_view json, const std::string& pointer);

// Watches an answer's body go by for the JSON fields `pointers`: in an event stream
// (text/event-stream), each `data:` line that is a JSON object, the last value of each field
// seen; otherwise the whole body, parsed once it has ended. Holds at most kMaxBytes (a line, or
// the body); past that it gives up (every field unknown). Used on one thread.
class UsageMeter {
 public:
  static constexpr size_t kMaxBytes = size_t{1} << 20;

  UsageMeter(std::vector<std::string> pointers, bool event_stream)
      : pointers_(std::move(pointers)), event_stream_(event_stream), found_(pointers_.size()) {}

  // Whether there is nothing to watch for (no JSON field asked).
  bool empty() const { return pointers_.empty(); }
  void Feed(std::string_view piece);
  // The body ended: each pointer's value (nullopt where none was seen).
  std::vector<std::optional<uint64_t>> End();

 private:
  void Line(std::string_view line);

  const std::vector<std::string> pointers_;
  const bool event_stream_;
  std::vector<std::optional<uint64_t>> found_;
  std::string held_;       // the line so far (event stream), or the body so far
  bool gave_up_ = false;   // the body passed kMaxBytes (not an event stream)
  bool skipping_ = false;  // a line passed kMaxBytes: skipped to its end
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_COSTS_H_
