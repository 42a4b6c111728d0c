#include "engine/reservation.h"

#include <random>
#include <sstream>

#include "fmt/format.h"
#include "util/hex.h"

namespace sluice::engine {

namespace {

constexpr std::string_view kVersion = "sluice-reservation 1";

std::optional<std::string> KeyOf(std::string_view hex) {
  if (hex == "-") return std::string();
  return util::Unhex(hex);
}

template <typename T>
bool Whole(std::string_view text, T& out) {
  const std::optional<T> value = util::ParseWhole<T>(text);
  if (value) out = *value;
  return value.has_value();
}

// One item's line: limit_id algorithm requests window_us burst|- calendar_unit|- zone|- cost
// key (hex, "-" when empty).
std::optional<Refundable::Item> ParseItem(const std::string& line) {
  std::istringstream in(line);
  std::string id, algorithm, requests, window, burst, unit, zone, cost, key;
  if (!(in >> id >> algorithm >> requests >> window >> burst >> unit >> zone >> cost >> key))
    return std::nullopt;
  Refundable::Item item;
  unsigned algo = 0;
  if (!Whole(id, item.limit_id) || !Whole(algorithm, algo) ||
      algo > static_cast<unsigned>(Algorithm::kSlidingWindow) ||
      !Whole(requests, item.limit.requests) || !Whole(window, item.limit.window_us) ||
      !Whole(cost, item.cost)) {
    return std::nullopt;
  }
  item.limit.algorithm = static_cast<Algorithm>(algo);
  if (burst != "-") {
    uint64_t b = 0;
    if (!Whole(burst, b)) return std::nullopt;
    item.limit.burst = b;
  }
  if (unit != "-") {
    auto calendar = Calendar::Make(unit, zone);
    if (!calendar.ok()) return std::nullopt;
    item.limit.calendar = *calendar;
  }
  auto bytes = KeyOf(key);
  if (!bytes || !ValidateLimit(item.limit).ok()) return std::nullopt;
  item.key = *std::move(bytes);
  return item;
}

}  // namespace

std::string EncodeReservation(const Refundable& taken) {
  std::string out = fmt::format("{} {}\n", kVersion, taken.decided_at_us);
  for (const Refundable::Item& item : taken.items) {
    const Limit& l = item.limit;
    fmt::format_to(std::back_inserter(out), "{} {} {} {} {} {} {} {} {}\n", item.limit_id,
                   static_cast<unsigned>(l.algorithm), l.requests, l.window_us,
                   l.burst ? std::to_string(*l.burst) : "-",
                   l.calendar ? std::string(l.calendar->unit_name()) : "-",
                   l.calendar ? l.calendar->time_zone() : "-", item.cost,
                   item.key.empty() ? "-" : util::Hex(item.key));
  }
  return out;
}

std::optional<Refundable> DecodeReservation(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line) || !line.starts_with(kVersion) || line.size() <= kVersion.size())
    return std::nullopt;
  Refundable taken;
  if (!Whole(std::string_view(line).substr(kVersion.size() + 1), taken.decided_at_us))
    return std::nullopt;
  while (std::getline(in, line)) {
    auto item = ParseItem(line);
    if (!item) return std::nullopt;
    taken.items.push_back(*std::move(item));
  }
  return taken;
}

Refundable SettledPart(const Refundable& consumed, std::span<const Request> requests) {
  Refundable out;
  out.decided_at_us = consumed.decided_at_us;
  for (const Refundable::Item& item : consumed.items) {
    if (item.request >= requests.size()) continue;
    const Request& r = requests[item.request];
    if (item.descriptor < r.descriptors.size() &&
        !r.descriptors[item.descriptor].hits_addend.has_value()) {
      out.items.push_back(item);
    }
  }
  return out;
}

std::string NewReservationId() {
  // From the system's random source each time, not a generator seeded once: an id seen must not
  // tell the next (whoever holds an id may settle it).
  thread_local std::random_device random;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", random(), random(), random(), random());
}

}  // namespace sluice::engine
