#include "backend/backend.h"

#include <cstring>
#include <memory>
#include <vector>

namespace sluice::backend {

std::string StateKey(const Item& item) {
  std::string key(sizeof item.limit_id + item.key.size(), '\0');
  std::memcpy(key.data(), &item.limit_id, sizeof item.limit_id);
  std::memcpy(key.data() + sizeof item.limit_id, item.key.data(), item.key.size());
  return key;
}

void Wrapper::ResetThenForget(std::span<const Item> items, ResetDone done,
                              std::function<void(std::span<const std::string> keys)> forget) {
  // The reset completes later: the states' keys are kept, not the items.
  std::vector<std::string> keys;
  keys.reserve(items.size());
  for (const Item& item : items) keys.push_back(StateKey(item));
  inner_->Reset(items, [keys = std::move(keys), forget = std::move(forget),
                        done = std::move(done)](absl::StatusOr<size_t> reset) {
    forget(keys);
    done(std::move(reset));
  });
}

Outcome Backend::DecideNow(std::span<const Item> items, int64_t now_us, std::span<Decision> out) {
  Outcome outcome;
  Decide(items, now_us, out, [&outcome](const Outcome& decided) { outcome = decided; });
  return outcome;
}

void Backend::Peek(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                   Done done) {
  // The copies live until `done` has run, as Decide requires.
  auto looks = std::make_shared<std::vector<Item>>(items.begin(), items.end());
  for (Item& item : *looks) item.cost = 0;
  Decide(*looks, now_us, out,
         [looks, done = std::move(done)](const Outcome& outcome) { done(outcome); });
}

}  // namespace sluice::backend
