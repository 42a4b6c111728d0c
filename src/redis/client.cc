#include "redis/client.h"

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "redis/node_connections.h"
#include "redis/paced.h"
#include "redis/sentinel.h"
#include "spdlog/spdlog.h"
#include "util/log.h"

namespace sluice::redis {

uint16_t KeySlot(std::string_view key) {
  // Only the part inside the first {...} is hashed, if that part is not empty.
  if (const size_t open = key.find('{'); open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  uint16_t crc = 0;  // CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0
  for (unsigned char c : key) {
    crc ^= static_cast<uint16_t>(c << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc & 16383;
}

namespace {

namespace asio = boost::asio;
constexpr size_t kSlots = 16384;

// A redirection error: "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381".
struct Redirect {
  bool ask = false;
  int slot = 0;
  std::string address;
};

std::optional<Redirect> ParseRedirect(const Reply& reply) {
  if (!reply.IsError()) return std::nullopt;
  Redirect r;
  std::string_view text = reply.str;
  if (text.starts_with("MOVED ")) {
    text.remove_prefix(6);
  } else if (text.starts_with("ASK ")) {
    r.ask = true;
    text.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  r.slot = std::atoi(std::string(text.substr(0, space)).c_str());
  r.address = std::string(text.substr(space + 1));
  if (r.slot < 0 || r.slot >= static_cast<int>(kSlots) || r.address.empty()) return std::nullopt;
  return r;
}

// A cluster that refused a command before running it, for a moment: "CLUSTERDOWN ..." (a master
// failed and no replica has taken over yet) or "TRYAGAIN ..." (a multi-key command while its slot
// migrates). Sent again shortly, nothing having run.
bool IsClusterBusy(const Reply& reply) {
  return reply.IsError() &&
         (reply.str.starts_with("CLUSTERDOWN ") || reply.str.starts_with("TRYAGAIN "));
}

class ClientImpl : public Client {
 public:
  explicit ClientImpl(Options options)
      : options_(std::move(options)), guard_(asio::make_work_guard(io_)) {
    for (auto& s : slots_) s.store(nullptr, std::memory_order_relaxed);
    for (const Endpoint& seed : options_.seeds) seeds_.push_back(GetNode(seed));
    thread_ = std::thread([this] { io_.run(); });
    if (options_.cluster) asio::post(io_, [this] { Refresh(); });
  }

  ~ClientImpl() override {
    asio::post(io_, [this] {
      stopping_ = true;
      refresh_.Cancel();
    });
    {
      absl::MutexLock lock(&nodes_mu_);
      for (auto& [address, node] : nodes_) {
        for (auto& c : node->connections) c->Close();
      }
    }
    guard_.reset();
    // Let the closes run, then stop.
    asio::post(io_, [this] { io_.stop(); });
    thread_.join();
    // The closes' callbacks may have sent more (a caller's next batch, say), posted after the
    // stop: run those here, where they fail at once on closed connections, so that every call
    // is answered.
    io_.restart();
    while (io_.poll() > 0) continue;
    // A call waiting on a timer (for a node's connection, or after CLUSTERDOWN or TRYAGAIN) is
    // answered "client stopping" when it fires, at most 50 ms from now: wait for those too.
    while (timed_waits_ > 0 && io_.run_one_for(std::chrono::milliseconds(100)) > 0) continue;
  }

  void Send(std::string_view key, std::string command, Callback done, Deadline deadline) override {
    if (!options_.cluster) {
      return seeds_.front()->Pick()->Send(std::move(command), std::move(done), 1,
                                          std::move(deadline));
    }
    const uint16_t slot = KeySlot(key);
    Node* node = slots_[slot].load(std::memory_order_acquire);
    if (node == nullptr) {
      RequestRefresh();
      return done(absl::UnavailableError(
          fmt::format("redis cluster: no node serves slot {} ({})", slot,
                      map_loaded_.load() ? "slot not covered" : "slot map not loaded yet")));
    }
    auto attempt = std::make_shared<Attempt>();
    attempt->slot = slot;
    attempt->command = std::move(command);
    attempt->done = std::move(done);
    attempt->deadline = std::move(deadline);
    Dispatch(std::move(attempt), node, /*asking=*/false);
  }

  std::chrono::microseconds timeout() const override { return options_.connection.timeout; }
  const Clock& clock() const override { return *options_.connection.clock; }

  bool Ready() const override {
    if (!options_.cluster) return seeds_.front()->HasReadyConnection();
    if (!map_loaded_.load(std::memory_order_acquire)) return false;
    // Every node that serves a slot can take commands.
    const Node* last = nullptr;
    for (const auto& slot : slots_) {
      const Node* node = slot.load(std::memory_order_acquire);
      if (node == last) continue;
      if (node == nullptr || !node->HasReadyConnection()) return false;
      last = node;
    }
    return true;
  }

  std::string last_error() const override {
    if (options_.cluster && !map_loaded_.load()) {
      absl::MutexLock lock(&error_mu_);
      return map_error_.empty() ? "loading the cluster slot map" : map_error_;
    }
    for (const auto& c : seeds_.front()->connections) {
      if (std::string e = c->last_error(); !e.empty()) return e;
    }
    return "";
  }

  std::string NodeFor(std::string_view key) const override {
    if (!options_.cluster) return seeds_.front()->address;
    const Node* node = slots_[KeySlot(key)].load(std::memory_order_acquire);
    return node == nullptr ? "" : node->address;
  }

  bool cluster() const override { return options_.cluster; }
  uint64_t redirects() const override { return redirects_.load(); }
  uint64_t map_refreshes() const override { return refreshes_.load(); }

 private:
  using Node = NodeConnections;

  struct Attempt {
    std::string command;
    Callback done;
    uint16_t slot = 0;
    int redirects = 0;
    int busy_retries = 0;
    MonoTime connect_wait_until{};  // set on the first wait
    MonoTime busy_until{};          // set on the first CLUSTERDOWN or TRYAGAIN
    Deadline deadline;              // the caller's, for every node the command goes to
  };

  // The node at `endpoint`, created (and connecting) on first use. Nodes live as long as the
  // client, so slot-map entries may point at them without ownership.
  Node* GetNode(const Endpoint& endpoint) {
    const std::string address = endpoint.Address();
    absl::MutexLock lock(&nodes_mu_);
    auto& slot = nodes_[address];
    if (slot == nullptr) {
      slot = std::make_unique<Node>();
      slot->address = address;
      Connection::Options o = options_.connection;
      o.endpoint = endpoint;
      for (int i = 0; i < std::max(1, options_.connections_per_node); ++i) {
        slot->connections.push_back(Connection::Create(io_, o));
      }
    }
    return slot.get();
  }

  // "host:port" of a MOVED/ASK or of CLUSTER SLOTS, with the seeds' credentials.
  Node* GetNode(const std::string& host, int port) {
    Endpoint e = options_.seeds.front();
    e.host = host;
    e.port = port;
    e.db = 0;  // a cluster has only database 0
    return GetNode(e);
  }

  Node* NodeAt(std::string_view address) {
    const size_t colon = address.rfind(':');
    std::string host(address.substr(0, colon));
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    return GetNode(host, std::atoi(std::string(address.substr(colon + 1)).c_str()));
  }

  void Dispatch(std::shared_ptr<Attempt> attempt, Node* node, bool asking) {
    // A node still connecting gets up to one command timeout (or what is left of the caller's
    // deadline) to finish, polled every ms.
    if (node->StillConnecting()) {
      const auto now = MonotonicNow(clock());
      if (attempt->connect_wait_until == MonoTime{}) {
        attempt->connect_wait_until =
            now + std::chrono::duration_cast<MonoTime::duration>(options_.connection.timeout);
        if (attempt->deadline.at != MonoTime{}) {
          attempt->connect_wait_until = std::min(attempt->connect_wait_until, attempt->deadline.at);
        }
      }
      if (now < attempt->connect_wait_until) {
        return After(std::chrono::milliseconds(1), std::move(attempt),
                     [this, node, asking](std::shared_ptr<Attempt> a) {
                       Dispatch(std::move(a), node, asking);
                     });
      }
    }
    std::string bytes;
    if (asking) AppendCommand(&bytes, {"ASKING"});
    Deadline deadline = attempt->deadline;
    if (deadline.redis_time_at != std::string::npos) deadline.redis_time_at += bytes.size();
    if (asking && deadline.late) {  // a late reply is ASKING's +OK, then the command's
      deadline.late = [late = std::move(deadline.late)](const Reply& reply) {
        if (reply.elements.size() == 2) late(reply.elements[1]);
      };
    }
    bytes += attempt->command;
    node->Pick()->Send(
        std::move(bytes),
        [this, attempt, asking](absl::StatusOr<Reply> result) mutable {
          if (!result.ok()) {
            if (result.status().code() == absl::StatusCode::kUnavailable) RequestRefresh();
            return attempt->done(std::move(result));
          }
          Reply reply = std::move(*result);
          if (asking) {  // ASKING's +OK, then the command's reply
            if (reply.elements.size() != 2) {
              return attempt->done(absl::InternalError("redis cluster: bad reply to ASKING"));
            }
            reply = std::move(reply.elements[1]);
          }
          if (IsClusterBusy(reply)) return RetryBusy(std::move(attempt), std::move(reply));
          const std::optional<Redirect> redirect = ParseRedirect(reply);
          if (!redirect) return attempt->done(std::move(reply));
          redirects_.fetch_add(1, std::memory_order_relaxed);
          if (++attempt->redirects > options_.max_redirects) {
            return attempt->done(absl::UnavailableError(fmt::format(
                "redis cluster: more than {} redirects ({})", options_.max_redirects, reply.str)));
          }
          Node* target = NodeAt(redirect->address);
          if (!redirect->ask) {
            slots_[static_cast<size_t>(redirect->slot)].store(target, std::memory_order_release);
            RequestRefresh();
          }
          Dispatch(std::move(attempt), target, redirect->ask);
        },
        asking ? 2 : 1, deadline);
  }

  // After CLUSTERDOWN or TRYAGAIN: the command again, to its slot's owner as the map then says,
  // after 1, 2, 4 ... 50 ms, for as long as the caller's deadline allows (without one, one
  // command timeout from the first refusal); then the refusal is the answer.
  void RetryBusy(std::shared_ptr<Attempt> attempt, Reply refusal) {
    RequestRefresh();
    const auto now = MonotonicNow(clock());
    if (attempt->busy_until == MonoTime{}) {
      attempt->busy_until =
          attempt->deadline.at != MonoTime{}
              ? attempt->deadline.at
              : now + std::chrono::duration_cast<MonoTime::duration>(options_.connection.timeout);
    }
    const auto wait =
        std::chrono::milliseconds(std::min(50, 1 << std::min(attempt->busy_retries, 6)));
    if (now + wait >= attempt->busy_until) return attempt->done(std::move(refusal));
    ++attempt->busy_retries;
    After(wait, std::move(attempt), [this](std::shared_ptr<Attempt> a) {
      Node* node = slots_[a->slot].load(std::memory_order_acquire);
      if (node == nullptr) {
        return a->done(
            absl::UnavailableError(fmt::format("redis cluster: no node serves slot {}", a->slot)));
      }
      Dispatch(std::move(a), node, /*asking=*/false);
    });
  }

  // Runs then(attempt) on the I/O thread after `wait`; a client stopping by then answers the
  // attempt "client stopping" instead (its destructor waits for these: timed_waits_).
  template <typename Then>
  void After(std::chrono::milliseconds wait, std::shared_ptr<Attempt> attempt, Then then) {
    auto timer = std::make_shared<asio::steady_timer>(io_, wait);
    ++timed_waits_;
    timer->async_wait([this, timer, attempt = std::move(attempt),
                       then = std::move(then)](boost::system::error_code ec) mutable {
      --timed_waits_;
      if (ec || stopping_) {
        return attempt->done(absl::UnavailableError("redis cluster: client stopping"));
      }
      then(std::move(attempt));
    });
  }

  // --- the slot map

  // Asks for a refresh soon: at most one in flight, at most one per 100 ms.
  void RequestRefresh() {
    if (options_.cluster) refresh_.Request();
  }

  // On the I/O thread: CLUSTER SLOTS from a connected node (the known nodes, then the seeds).
  void Refresh() {
    if (refreshing_ || stopping_) return;
    Connection* via = nullptr;
    std::string via_host;
    {
      absl::MutexLock lock(&nodes_mu_);
      for (auto& [address, node] : nodes_) {
        for (auto& c : node->connections) {
          if (c->state() == Connection::State::kReady) {
            via = c.get();
            via_host = address.substr(0, address.rfind(':'));
            break;
          }
        }
        if (via != nullptr) break;
      }
    }
    refresh_.Started();
    if (via == nullptr) {  // nothing connected yet: try again shortly
      SetMapError("no cluster node is reachable");
      return RequestRefresh();
    }
    refreshing_ = true;
    std::string command;
    AppendCommand(&command, {"CLUSTER", "SLOTS"});
    via->Send(std::move(command), [this, via_host](absl::StatusOr<Reply> reply) {
      refreshing_ = false;
      refreshes_.fetch_add(1, std::memory_order_relaxed);
      if (!reply.ok() || reply->type != Reply::Type::kArray) {
        SetMapError(reply.ok() ? fmt::format("CLUSTER SLOTS: {}", reply->str)
                               : std::string(reply.status().message()));
        return RequestRefresh();
      }
      size_t covered = 0;
      for (const Reply& range : reply->elements) {
        if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) continue;
        const Reply& master = range.elements[2];
        std::string host = master.elements[0].str;
        if (host.empty() || host == "?") host = via_host;  // "the node you asked"
        Node* node = GetNode(host, static_cast<int>(master.elements[1].integer));
        const int64_t from = range.elements[0].integer, to = range.elements[1].integer;
        for (int64_t s = std::max<int64_t>(0, from); s <= to && s < static_cast<int64_t>(kSlots);
             ++s) {
          slots_[static_cast<size_t>(s)].store(node, std::memory_order_release);
          ++covered;
        }
      }
      if (covered == kSlots) {
        if (!map_loaded_.exchange(true)) util::Log().info("redis: cluster slot map loaded");
        SetMapError("");
      } else {
        SetMapError(fmt::format("the cluster covers {} of {} slots", covered, kSlots));
        RequestRefresh();
      }
    });
  }

  void SetMapError(std::string error) {
    absl::MutexLock lock(&error_mu_);
    map_error_ = std::move(error);
  }

  const Options options_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::vector<Node*> seeds_;

  mutable absl::Mutex nodes_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Node>> nodes_ ABSL_GUARDED_BY(nodes_mu_);

  std::array<std::atomic<Node*>, kSlots> slots_;
  std::atomic<bool> map_loaded_{false};
  mutable absl::Mutex error_mu_;
  std::string map_error_ ABSL_GUARDED_BY(error_mu_);

  // I/O thread only.
  bool refreshing_ = false;
  bool stopping_ = false;
  // Calls waiting on a timer; on the I/O thread (and in the destructor once it has ended).
  int timed_waits_ = 0;
  Paced refresh_{io_, clock(), std::chrono::milliseconds(100),
                 [this] { return refreshing_ || stopping_; }, [this] { Refresh(); }};

  std::atomic<uint64_t> redirects_{0};
  std::atomic<uint64_t> refreshes_{0};
};

}  // namespace

namespace {

// Client::Create with Sentinel: the master's login (one seed) and the sentinels.
absl::StatusOr<std::unique_ptr<Client>> CreateSentinelClient(Client::Options options) {
  const SentinelOptions& sentinel = *options.sentinel;
  if (options.cluster) {
    return absl::InvalidArgumentError("redis: Sentinel and Cluster are two ways; pick one");
  }
  if (options.seeds.size() != 1) {
    return absl::InvalidArgumentError("redis sentinel: one master login, not several");
  }
  if (sentinel.master.empty()) {
    return absl::InvalidArgumentError("redis sentinel: no master name given");
  }
  if (sentinel.sentinels.empty()) {
    return absl::InvalidArgumentError("redis sentinel: no sentinel address given");
  }
  const bool sentinels_tls = sentinel.sentinels.front().tls;
  for (const Endpoint& e : sentinel.sentinels) {
    if (e.tls != sentinels_tls) {
      return absl::InvalidArgumentError(
          "redis sentinel: the sentinels are all reached over TLS or none of them");
    }
  }
  const bool any_tls = sentinels_tls || options.seeds.front().tls;
  if (!any_tls && options.tls) {
    return absl::InvalidArgumentError(
        "redis sentinel: TLS options, and neither the master (redis://) nor the sentinels use "
        "TLS");
  }
  if (any_tls && !options.connection.tls) {
    auto context = MakeTlsContext(options.tls.value_or(TlsOptions{}));
    if (!context.ok()) return context.status();
    options.connection.tls = *std::move(context);
  }
  return MakeSentinelClient(std::move(options));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(Options options) {
  if (options.seeds.empty()) return absl::InvalidArgumentError("redis: no server given");
  if (options.sentinel) return CreateSentinelClient(std::move(options));
  const bool tls = options.seeds.front().tls;
  for (const Endpoint& seed : options.seeds) {
    if (seed.tls != tls) {
      return absl::InvalidArgumentError(
          "redis: rediss:// (TLS) and redis:// servers mixed; a cluster's nodes are all one or "
          "the other");
    }
  }
  if (!tls && options.tls) {
    return absl::InvalidArgumentError(
        fmt::format("redis: TLS options for redis://{}, which is plain TCP (rediss:// is TLS)",
                    options.seeds.front().Address()));
  }
  if (tls && !options.connection.tls) {
    auto context = MakeTlsContext(options.tls.value_or(TlsOptions{}));
    if (!context.ok()) return context.status();
    options.connection.tls = *std::move(context);
  }
  return std::unique_ptr<Client>(std::make_unique<ClientImpl>(std::move(options)));
}

std::string DescribeRedis(bool cluster, const Endpoint& seed) {
  return fmt::format("redis {}{}{}", cluster ? "cluster via " : "", seed.Address(),
                     seed.tls ? " (TLS)" : "");
}

std::string DescribeRedis(const SentinelOptions& sentinel, const Endpoint& master) {
  return fmt::format("redis sentinel master '{}' via {}{}", sentinel.master,
                     sentinel.sentinels.empty() ? "?" : sentinel.sentinels.front().Address(),
                     master.tls ? " (TLS)" : "");
}

absl::Status AwaitFirstConnection(const Client& client, std::chrono::microseconds wait,
                                  std::string_view where) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!client.Ready() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (client.Ready()) return absl::OkStatus();
  const std::string why = client.last_error();
  if (why.find("login to") != std::string::npos) {
    return absl::PermissionDeniedError(fmt::format("{}: {}", where, why));
  }
  return absl::OkStatus();
}

}  // namespace sluice::redis
