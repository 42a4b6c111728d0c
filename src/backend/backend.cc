#include "backend/backend.h"

#include <cstring>
#include <memory>
#include <string>
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

void Backend::RecordPastLimits(std::span<const Item> items, int64_t now_us, RefundDone done) {
  // Copies (limits without their penalty, keys, count_denied items) that live until `done`.
  struct Copies {
    std::vector<Limit> limits;
    std::vector<std::string> keys;
    std::vector<Item> items;
    std::vector<Decision> decisions;
  };
  auto c = std::make_shared<Copies>();
  c->limits.reserve(items.size());
  c->keys.reserve(items.size());
  for (const Item& item : items) {
    c->limits.push_back(*item.limit);
    c->limits.back().penalty.reset();
    c->keys.emplace_back(item.key);
  }
  c->items.assign(items.begin(), items.end());
  for (size_t i = 0; i < c->items.size(); ++i) {  // (the lists are complete: no more moves)
    c->items[i].limit = &c->limits[i];
    c->items[i].key = c->keys[i];
    c->items[i].count_denied = true;
  }
  c->decisions.resize(c->items.size());
  Copies& copies = *c;
  Decide(copies.items, now_us, copies.decisions,
         [c, done = std::move(done)](const Outcome& outcome) {
           done(outcome.fell_back && outcome.status.ok()
                    ? absl::UnavailableError("the backend failed: not recorded")
                    : outcome.status);
         });
}

}  // namespace sluice::backend
