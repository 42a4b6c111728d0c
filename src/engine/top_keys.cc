#include "engine/top_keys.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "fmt/format.h"

namespace sluice::engine {
namespace {

constexpr int64_t kMinuteUs = int64_t{60} * 1000000;
constexpr size_t kMaxNames = 4096;

std::atomic<uint64_t> next_serial{1};

// A sketch's key: the limit's identity (8 bytes), then the state key.
void ElementKey(uint64_t limit_id, std::string_view state_key, std::string& out) {
  out.resize(sizeof limit_id);
  std::memcpy(out.data(), &limit_id, sizeof limit_id);
  out.append(state_key);
}

uint64_t ElementLimit(std::string_view element) {
  uint64_t id = 0;
  if (element.size() >= sizeof id) std::memcpy(&id, element.data(), sizeof id);
  return id;
}

// `k=v,k=v`.
std::string EntriesText(const Entries& entries) {
  std::string text;
  for (const Entry& e : entries) {
    if (!text.empty()) text += ',';
    text += e.key;
    text += '=';
    text += e.value;
  }
  return text;
}

}  // namespace

std::optional<Entries> StateKeyEntries(std::string_view state_key) {
  Entries entries;
  std::string_view rest = state_key;
  for (size_t part = 0; !rest.empty(); ++part) {
    size_t length = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), length);
    const size_t digits = static_cast<size_t>(end - rest.data());
    if (ec != std::errc() || digits >= rest.size() || rest[digits] != ':' ||
        length > rest.size() - digits - 1) {
      return std::nullopt;
    }
    const std::string_view text = rest.substr(digits + 1, length);
    if (part % 2 == 0) {
      entries.push_back({.key = std::string(text), .value = ""});
    } else {
      entries.back().value = std::string(text);
    }
    rest.remove_prefix(digits + 1 + length);
  }
  if (entries.empty()) return std::nullopt;
  return entries;
}

std::string StateKeyText(std::string_view state_key) {
  const std::optional<Entries> entries = StateKeyEntries(state_key);
  return entries ? EntriesText(*entries) : std::string(state_key);
}

TopKeys::TopKeys(Options options) : options_(options), serial_(next_serial.fetch_add(1)) {}

TopKeys::Domain* TopKeys::DomainFor(std::string_view domain) {
  // The last domain this thread recorded into, remembered: most threads serve one domain.
  struct Last {
    uint64_t serial = 0;
    std::string domain;
    Domain* found = nullptr;
  };
  thread_local Last last;
  if (last.serial == serial_ && last.domain == domain) return last.found;
  Domain* found = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = domains_.find(std::string(domain));  // (once per thread and domain: DomainFor)
    if (it != domains_.end()) {
      found = it->second.get();
    } else if (domains_.size() < options_.max_domains) {
      found = domains_.emplace(std::string(domain), std::make_unique<Domain>()).first->second.get();
    }
  }
  if (found == nullptr) return nullptr;
  last = {.serial = serial_, .domain = std::string(domain), .found = found};
  return found;
}

const TopKeys::Domain* TopKeys::FindDomain(std::string_view domain) const {
  absl::MutexLock lock(&mu_);
  auto it = domains_.find(std::string(domain));
  return it == domains_.end() ? nullptr : it->second.get();
}

uint32_t TopKeys::NextSkip() const {
  // xorshift32, one state per thread, seeded by the thread's own address space position.
  thread_local uint32_t state = 0;
  if (state == 0) {
    state = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(&state) >> 4) | 1u;
  }
  state ^= state << 13;
  state ^= state >> 17;
  state ^= state << 5;
  return state % (2 * options_.sample - 1);
}

void TopKeys::Record(std::string_view domain, uint64_t limit_id, const AppliedLimit& limit,
                     std::string_view state_key, uint64_t weight, int64_t now_us) {
  Domain* d = DomainFor(domain);
  if (d == nullptr) {
    untracked_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  thread_local std::string element;
  ElementKey(limit_id, state_key, element);
  const int64_t minute = now_us / kMinuteUs;
  absl::MutexLock lock(&d->mu);
  Minute& m = d->minutes[static_cast<size_t>(minute % kMinutes)];
  if (m.minute != minute) {
    if (m.requests == nullptr) {
      m.requests = std::make_unique<util::SpaceSaving>(options_.capacity);
      m.denied = std::make_unique<util::SpaceSaving>(options_.capacity);
    }
    m.requests->Clear();
    m.denied->Clear();
    m.minute = minute;
  }
  m.requests->Add(element, weight);
  if (!limit.decision.allowed && !limit.shadow) m.denied->Add(element, weight);
  if (d->names.size() < kMaxNames && !d->names.contains(limit_id)) {
    d->names.emplace(limit_id, LimitName(limit));
  }
}

std::vector<TopKeys::Row> TopKeys::Top(std::string_view domain, By by, int minutes, size_t n,
                                       int64_t now_us) const {
  const Domain* d = FindDomain(domain);
  if (d == nullptr) return {};
  minutes = std::clamp(minutes, 1, kMinutes);
  const int64_t now_minute = now_us / kMinuteUs;
  absl::MutexLock lock(&d->mu);
  std::vector<const util::SpaceSaving*> sketches;
  for (const Minute& m : d->minutes) {
    if (m.minute > now_minute - minutes && m.minute <= now_minute) {
      sketches.push_back(by == By::kDenied ? m.denied.get() : m.requests.get());
    }
  }
  std::vector<Row> rows;
  for (auto& e : util::JoinedTop(sketches, n)) {
    const uint64_t id = ElementLimit(e.key);
    const std::string_view state_key = std::string_view(e.key).substr(sizeof id);
    std::optional<Entries> entries = StateKeyEntries(state_key);  // decoded once, for both
    std::string key = entries ? EntriesText(*entries) : std::string(state_key);
    auto name = d->names.find(id);
    rows.push_back({.limit = name != d->names.end() ? name->second : fmt::format("#{:x}", id),
                    .key = std::move(key),
                    .entries = std::move(entries).value_or(Entries{}),
                    .count = e.count,
                    .error = e.error});
  }
  return rows;
}

}  // namespace sluice::engine
