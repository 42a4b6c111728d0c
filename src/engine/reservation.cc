#include "engine/reservation.h"

#include <charconv>
#include <random>
#include <sstream>

#include "fmt/format.h"

namespace sluice::engine {

namespace {

constexpr std::string_view kVersion = "sluice-reservation 1";

std::string Hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) fmt::format_to(std::back_inserter(out), "{:02x}", c);
  return out;
}

std::optional<std::string> Unhex(std::string_view hex) {
  if (hex == "-") return std::string();
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned v = 0;
    const char* first = hex.data() + 2 * i;
    auto [end, ec] = std::from_chars(first, first + 2, v, 16);
    if (ec != std::errc() || end != first + 2) return std::nullopt;
    out[i] = static_cast<char>(v);
  }
  return out;
}

template <typename T>
bool Number(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
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
  if (!Number(id, item.limit_id) || !Number(algorithm, algo) ||
      algo > static_cast<unsigned>(Algorithm::kSlidingWindow) ||
      !Number(requests, item.limit.requests) || !Number(window, item.limit.window_us) ||
      !Number(cost, item.cost)) {
    return std::nullopt;
  }
  item.limit.algorithm = static_cast<Algorithm>(algo);
  if (burst != "-") {
    uint64_t b = 0;
    if (!Number(burst, b)) return std::nullopt;
    item.limit.burst = b;
  }
  if (unit != "-") {
    auto calendar = Calendar::Make(unit, zone);
    if (!calendar.ok()) return std::nullopt;
    item.limit.calendar = *calendar;
  }
  auto bytes = Unhex(key);
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
                   item.key.empty() ? "-" : Hex(item.key));
  }
  return out;
}

std::optional<Refundable> DecodeReservation(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line) || !line.starts_with(kVersion) || line.size() <= kVersion.size())
    return std::nullopt;
  Refundable taken;
  if (!Number(std::string_view(line).substr(kVersion.size() + 1), taken.decided_at_us))
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
