// UpstreamClient's pool of idle keep-alive connections, per io_context and target: taken newest
// first (expired ones closed), returned up to max_idle_per_target, closed all at once.

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "http/transport/upstream_client.h"
#include "http/transport/upstream_connection.h"

namespace sluice::http {

namespace beast = boost::beast;

std::unique_ptr<UpstreamClient::Connection> UpstreamClient::TakeIdle(const PoolKey& key) {
  std::unique_ptr<Connection> connection;
  std::vector<std::unique_ptr<Connection>> expired;
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(key);
    if (it == idle_.end()) return nullptr;
    const MonoTime oldest = MonotonicNow(*options_.clock) - options_.max_idle_age;
    auto& list = it->second;
    // Newest last: the most recently used connection is the least likely to be stale.
    while (!list.empty() && connection == nullptr) {
      std::unique_ptr<Connection> c = std::move(list.back());
      list.pop_back();
      if (c->idle_since >= oldest) {
        connection = std::move(c);
      } else {
        expired.push_back(std::move(c));
      }
    }
    if (list.empty()) idle_.erase(it);
  }
  for (auto& c : expired) {
    beast::error_code ignored;
    c->stream.socket().close(ignored);
  }
  return connection;
}

void UpstreamClient::ReturnIdle(const PoolKey& key, std::unique_ptr<Connection> connection) {
  connection->idle_since = MonotonicNow(*options_.clock);
  connection->buffer.shrink_to_fit();  // empty while idle
  std::unique_ptr<Connection> dropped;
  {
    absl::MutexLock lock(&mu_);
    auto& list = idle_[key];
    if (list.size() >= options_.max_idle_per_target) {
      dropped = std::move(list.front());  // the oldest goes
      list.erase(list.begin());
    }
    list.push_back(std::move(connection));
  }
  if (dropped != nullptr) {
    beast::error_code ignored;
    dropped->stream.socket().close(ignored);
  }
}

void UpstreamClient::CloseIdle() {
  std::map<PoolKey, std::vector<std::unique_ptr<Connection>>> idle;
  {
    absl::MutexLock lock(&mu_);
    idle.swap(idle_);
  }
  for (auto& [key, list] : idle) {
    for (auto& c : list) {
      beast::error_code ignored;
      c->stream.socket().close(ignored);
    }
  }
}

uint64_t UpstreamClient::connections_opened() const {
  absl::MutexLock lock(&mu_);
  return opened_;
}

size_t UpstreamClient::idle_connections() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, list] : idle_) n += list.size();
  return n;
}

}  // namespace sluice::http
