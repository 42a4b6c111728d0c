#include "backend/backend.h"

#include <memory>
#include <vector>

namespace sluice::backend {

void Backend::Peek(std::span<const Item> items, int64_t now_us, std::span<Decision> out,
                   Done done) {
  // The copies live until `done` has run, as Decide requires.
  auto looks = std::make_shared<std::vector<Item>>(items.begin(), items.end());
  for (Item& item : *looks) item.cost = 0;
  Decide(*looks, now_us, out,
         [looks, done = std::move(done)](const Outcome& outcome) { done(outcome); });
}

}  // namespace sluice::backend
