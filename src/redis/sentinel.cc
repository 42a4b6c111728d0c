#include "redis/sentinel.h"

#include <atomic>
#include <boost/asio.hpp>
#include <charconv>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "redis/node_connections.h"
#include "redis/paced.h"
#include "spdlog/spdlog.h"
#include "util/log.h"

namespace sluice::redis {

std::string MasterAddress::Address() const {
  Endpoint e;
  e.host = host;
  e.port = port;
  return e.Address();
}

namespace {

bool ParsePort(std::string_view text, int* port) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *port);
  return ec == std::errc() && end == text.data() + text.size() && *port >= 1 && *port <= 65535;
}

}  // namespace

absl::StatusOr<Endpoint> ParseSentinelAddress(std::string_view address) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        fmt::format("bad sentinel address '{}': {} (host:port)", address, why));
  };
  Endpoint e;
  e.port = 26379;
  std::string_view host = address;
  std::string_view port;
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) return bad("no ']' after the IPv6 address");
    host = address.substr(1, close - 1);
    const std::string_view rest = address.substr(close + 1);
    if (!rest.empty()) {
      if (!rest.starts_with(':')) return bad("':port' must follow ']'");
      port = rest.substr(1);
    }
  } else if (const size_t colon = address.rfind(':'); colon != std::string_view::npos) {
    if (address.find(':') != colon) return bad("an IPv6 address goes in brackets");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (host.empty()) return bad("no host");
  if (host.find_first_of("/@ ") != std::string_view::npos) return bad("not a host name");
  if (!port.empty() || address.ends_with(':')) {
    if (!ParsePort(port, &e.port)) return bad("the port must be 1 to 65535");
  }
  e.host = std::string(host);
  return e;
}

absl::StatusOr<std::optional<MasterAddress>> ParseMasterAddr(const Reply& reply) {
  if (reply.type == Reply::Type::kNil) return std::nullopt;
  if (reply.IsError()) return absl::InvalidArgumentError(reply.str);
  MasterAddress out;
  if (reply.type != Reply::Type::kArray || reply.elements.size() != 2 ||
      reply.elements[0].type != Reply::Type::kString || reply.elements[0].str.empty() ||
      reply.elements[1].type != Reply::Type::kString ||
      !ParsePort(reply.elements[1].str, &out.port)) {
    return absl::InvalidArgumentError("not a [host, port] reply");
  }
  out.host = reply.elements[0].str;
  return out;
}

std::optional<MasterAddress> ParseSwitchMaster(std::string_view payload) {
  std::vector<std::string_view> words;
  while (!payload.empty()) {
    const size_t space = payload.find(' ');
    if (space != 0) words.push_back(payload.substr(0, space));
    if (space == std::string_view::npos) break;
    payload.remove_prefix(space + 1);
  }
  MasterAddress out;
  if (words.size() != 5 || !ParsePort(words[4], &out.port)) return std::nullopt;
  out.master = std::string(words[0]);
  out.host = std::string(words[3]);
  return out;
}

bool IsReadOnlyError(const Reply& reply) {
  // A script's write on a replica: "READONLY You can't write against a read only replica.
  // script: ..." (or, from older servers, inside an "ERR Error running script" message).
  return reply.IsError() && (reply.str.starts_with("READONLY ") ||
                             reply.str.find("READONLY You can't write") != std::string::npos);
}

namespace {

namespace asio = boost::asio;

constexpr std::chrono::milliseconds kUrgentInterval{100};

class SentinelClient : public Client {
 public:
  explicit SentinelClient(Options options)
      : options_(std::move(options)),
        sentinel_(*options_.sentinel),
        guard_(asio::make_work_guard(io_)) {
    // The sentinels are asked rarely and may be slower than the master: their own timeout.
    const auto query_timeout =
        std::max<std::chrono::microseconds>(options_.connection.timeout, std::chrono::seconds(1));
    for (const Endpoint& e : sentinel_.sentinels) {
      Connection::Options o = SentinelConnectionOptions(e, query_timeout);
      queries_.push_back(Connection::Create(io_, o));
    }
    thread_ = std::thread([this] { io_.run(); });
    asio::post(io_, [this] {
      Subscribe();
      Discover();
      Tick();
    });
  }

  ~SentinelClient() override {
    // On the I/O thread, so that no master is made after this (UseMaster checks stopping_).
    asio::post(io_, [this] {
      stopping_ = true;
      tick_timer_.cancel();
      discover_.Cancel();
      if (subscriber_) subscriber_->Close();
      if (std::shared_ptr<Master> master = CurrentMaster()) {
        for (auto& c : master->connections) c->Close();
      }
    });
    for (auto& c : queries_) c->Close();
    guard_.reset();
    asio::post(io_, [this] { io_.stop(); });
    thread_.join();
    // What the closes' callbacks sent after the stop fails at once on closed connections here,
    // so that every call is answered.
    io_.restart();
    while (io_.poll() > 0) continue;
  }

  void Send(std::string_view /*key*/, std::string command, Callback done,
            Deadline deadline) override {
    std::shared_ptr<Master> master = CurrentMaster();
    if (master == nullptr) {
      RequestDiscover();
      return done(absl::UnavailableError(
          fmt::format("redis sentinel: no master for '{}' ({})", sentinel_.master, last_error())));
    }
    master->Pick()->Send(
        std::move(command),
        [this, weak = std::weak_ptr<Master>(master),
         done = std::move(done)](absl::StatusOr<Reply> reply) {
          if (!reply.ok()) {
            if (reply.status().code() == absl::StatusCode::kUnavailable) RequestDiscover();
            return done(std::move(reply));
          }
          if (IsReadOnlyError(*reply)) {
            std::string address;
            if (auto m = weak.lock()) {
              address = m->address;
              Demoted(std::move(m));
            }
            return done(absl::UnavailableError(
                fmt::format("redis sentinel: {} is no longer the master of '{}' ({})", address,
                            sentinel_.master, reply->str)));
          }
          done(std::move(reply));
        },
        1, std::move(deadline));
  }

  std::chrono::microseconds timeout() const override { return options_.connection.timeout; }
  const Clock& clock() const override { return *options_.connection.clock; }

  bool Ready() const override {
    std::shared_ptr<Master> master = CurrentMaster();
    return master != nullptr && master->HasReadyConnection();
  }

  std::string last_error() const override {
    std::shared_ptr<Master> master = CurrentMaster();
    if (master == nullptr) {
      absl::MutexLock lock(&mu_);
      return discovery_error_.empty()
                 ? fmt::format("asking the sentinels for master '{}'", sentinel_.master)
                 : discovery_error_;
    }
    for (const auto& c : master->connections) {
      if (std::string e = c->last_error(); !e.empty()) {
        return fmt::format("master '{}' at {}: {}", sentinel_.master, master->address, e);
      }
    }
    return "";
  }

  std::string NodeFor(std::string_view /*key*/) const override {
    std::shared_ptr<Master> master = CurrentMaster();
    return master == nullptr ? "" : master->address;
  }

  bool cluster() const override { return false; }
  uint64_t redirects() const override { return 0; }
  // The master's changes of address.
  uint64_t map_refreshes() const override { return switches_.load(); }

 private:
  using Master = NodeConnections;

  Connection::Options SentinelConnectionOptions(const Endpoint& e,
                                                std::chrono::microseconds timeout) const {
    Connection::Options o = options_.connection;
    o.endpoint = e;
    o.endpoint.db = 0;
    o.timeout = timeout;
    o.read_server_time = false;  // a sentinel serves no TIME
    o.tls = e.tls ? options_.connection.tls : nullptr;
    return o;
  }

  std::shared_ptr<Master> CurrentMaster() const {
    absl::MutexLock lock(&mu_);
    return master_;
  }

  void SetDiscoveryError(std::string error) {
    absl::MutexLock lock(&mu_);
    discovery_error_ = std::move(error);
  }

  // --- finding the master (I/O thread)

  // Asks soon: at most one round in flight, at most one round per 100 ms.
  void RequestDiscover() { discover_.Request(); }

  // One round: the sentinels in turn, from the last one that answered, until one names the
  // master. One that names the master already in use while it cannot be reached may not have
  // heard of a failover yet (sentinels learn of one from each other within seconds): then the
  // round goes on, and keeps that master unless another sentinel names a new one.
  void Discover() {
    if (discovering_ || stopping_) return;
    discovering_ = true;
    discover_.Started();
    stale_.reset();
    Ask(0, "", /*named_unreachable=*/false);
  }

  void Ask(size_t tried, std::string errors, bool named_unreachable) {
    if (stopping_) {
      discovering_ = false;
      return;
    }
    if (tried == queries_.size()) {
      discovering_ = false;
      if (stale_) {
        // Every sentinel that answered names the demoted master still: theirs is the last word.
        const MasterAddress address = *std::exchange(stale_, std::nullopt);
        return UseMaster(address, "sentinels, again");
      }
      if (!named_unreachable) {
        SetDiscoveryError(
            fmt::format("no sentinel named master '{}': {}", sentinel_.master, errors));
      }
      return;
    }
    const size_t i = (first_ + tried) % queries_.size();
    std::string command;
    AppendCommand(&command, {"SENTINEL", "get-master-addr-by-name", sentinel_.master});
    queries_[i]->Send(std::move(command), [this, i, tried, errors = std::move(errors),
                                           named_unreachable](absl::StatusOr<Reply> reply) mutable {
      const std::string sentinel = sentinel_.sentinels[i].Address();
      absl::StatusOr<std::optional<MasterAddress>> address =
          reply.ok() ? ParseMasterAddr(*reply) : reply.status();
      if (address.ok() && address->has_value()) {
        const std::string named = (*address)->Address();
        std::shared_ptr<Master> current = CurrentMaster();
        const bool unreachable =
            current != nullptr && current->address == named && !current->HasReadyConnection();
        if ((unreachable || named == demoted_) && tried + 1 < queries_.size()) {
          if (!errors.empty()) errors += "; ";
          errors += fmt::format("{} names {}, {}", sentinel, named,
                                unreachable ? "unreachable" : "which answered READONLY");
          if (named == demoted_) stale_ = **address;
          return Ask(tried + 1, std::move(errors), /*named_unreachable=*/true);
        }
        discovering_ = false;
        first_ = i;
        SetDiscoveryError("");
        return UseMaster(**address, fmt::format("sentinel {}", sentinel));
      }
      if (!errors.empty()) errors += "; ";
      errors += address.ok()
                    ? fmt::format("{} does not know it", sentinel)
                    : fmt::format("{}: {}", sentinel, std::string(address.status().message()));
      Ask(tried + 1, std::move(errors), named_unreachable);
    });
  }

  // Sends commands to `address` from now on (nothing changes when it is the master already).
  void UseMaster(const MasterAddress& address, std::string_view source) {
    if (stopping_) return;
    const std::string where = address.Address();
    std::shared_ptr<Master> old;
    {
      absl::MutexLock lock(&mu_);
      if (master_ != nullptr && master_->address == where) return;
      old = master_;
    }
    auto master = std::make_shared<Master>();
    master->address = where;
    Connection::Options o = options_.connection;
    o.endpoint = options_.seeds.front();
    o.endpoint.host = address.host;
    o.endpoint.port = address.port;
    if (!o.endpoint.tls) o.tls = nullptr;
    for (int i = 0; i < std::max(1, options_.connections_per_node); ++i) {
      master->connections.push_back(Connection::Create(io_, o));
    }
    {
      absl::MutexLock lock(&mu_);
      master_ = master;
    }
    if (where != demoted_) demoted_.clear();
    if (old != nullptr) {
      for (auto& c : old->connections) c->Close();
      switches_.fetch_add(1, std::memory_order_relaxed);
      util::Log().warn("redis sentinel: master '{}' moved from {} to {} ({})", sentinel_.master,
                       old->address, where, source);
    } else {
      util::Log().info("redis sentinel: master '{}' is at {} ({})", sentinel_.master, where,
                       source);
    }
  }

  // `master` answered -READONLY: a replica now. Its connections close, and no command goes
  // anywhere until the sentinels name the master again.
  void Demoted(std::shared_ptr<Master> master) {
    asio::post(io_, [this, master = std::move(master)] {
      {
        absl::MutexLock lock(&mu_);
        if (master_ != master) return;
        master_ = nullptr;
        discovery_error_ = fmt::format(
            "{} answered READONLY: no longer the master; asking the sentinels", master->address);
      }
      util::Log().warn("redis sentinel: {} answered READONLY; asking the sentinels for '{}'",
                       master->address, sentinel_.master);
      demoted_ = master->address;
      for (auto& c : master->connections) c->Close();
      Discover();
    });
  }

  // --- +switch-master (I/O thread)

  // A subscriber on one sentinel; on each (re)connection it subscribes again, then asks.
  void Subscribe() {
    if (stopping_) return;
    if (subscriber_) subscriber_->Close();
    const size_t index = subscriber_index_ % sentinel_.sentinels.size();
    const uint64_t id = ++subscriber_id_;
    Connection::Options o = SentinelConnectionOptions(
        sentinel_.sentinels[index],
        std::max<std::chrono::microseconds>(options_.connection.timeout, std::chrono::seconds(1)));
    o.on_ready = [this, id] { OnSubscriberReady(id); };
    o.on_push = [this, id](Reply message) {
      if (id == subscriber_id_) OnMessage(message);
    };
    subscriber_ = Connection::Create(io_, o);
    subscriber_down_for_ = {};
  }

  void OnSubscriberReady(uint64_t id) {
    if (id != subscriber_id_ || stopping_) return;
    std::string command;
    AppendCommand(&command, {"SUBSCRIBE", "+switch-master"});
    subscriber_->Send(std::move(command), [this, id](absl::StatusOr<Reply> reply) {
      if (id != subscriber_id_ || stopping_) return;
      if (!reply.ok() || reply->IsError()) {
        util::Log().warn(
            "redis sentinel: cannot subscribe to +switch-master on {}: {}",
            sentinel_.sentinels[subscriber_index_ % sentinel_.sentinels.size()].Address(),
            reply.ok() ? reply->str : std::string(reply.status().message()));
        return;
      }
      // A switch may have happened while there was no subscription.
      Discover();
    });
  }

  void OnMessage(const Reply& message) {
    // ["message", "+switch-master", "NAME OLD-HOST OLD-PORT NEW-HOST NEW-PORT"]
    if (message.elements.size() != 3 || message.elements[0].str != "message" ||
        message.elements[1].str != "+switch-master") {
      return;
    }
    const std::optional<MasterAddress> address = ParseSwitchMaster(message.elements[2].str);
    if (!address || address->master != sentinel_.master) return;
    UseMaster(*address, "+switch-master");
  }

  // --- every check_interval: ask anyway (every 100 ms while the master cannot take commands:
  // the calls that would ask fail at once at the breaker above); a subscriber down for about
  // three seconds moves on to the next sentinel.
  void Tick() {
    if (stopping_) return;
    Discover();
    const bool ready = Ready();
    const auto interval =
        ready ? sentinel_.check_interval
              : std::min<std::chrono::milliseconds>(sentinel_.check_interval, kUrgentInterval);
    if (subscriber_->state() == Connection::State::kReady) {
      subscriber_down_for_ = {};
    } else if ((subscriber_down_for_ += interval) >= std::chrono::seconds(3) &&
               sentinel_.sentinels.size() > 1) {
      ++subscriber_index_;
      Subscribe();
    }
    tick_timer_.expires_after(interval);
    tick_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) Tick();
    });
  }

  const Options options_;
  const SentinelOptions& sentinel_;  // *options_.sentinel
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::vector<std::shared_ptr<Connection>> queries_;  // one per sentinel, in the given order

  mutable absl::Mutex mu_;
  std::shared_ptr<Master> master_ ABSL_GUARDED_BY(mu_);
  std::string discovery_error_ ABSL_GUARDED_BY(mu_);

  // I/O thread only.
  asio::steady_timer tick_timer_{io_};
  bool discovering_ = false;
  bool stopping_ = false;
  Paced discover_{io_, clock(), std::chrono::milliseconds(100),
                  [this] { return discovering_ || stopping_; }, [this] { Discover(); }};
  size_t first_ = 0;  // the sentinel asked first: the last that answered
  std::shared_ptr<Connection> subscriber_;
  size_t subscriber_index_ = 0;
  uint64_t subscriber_id_ = 0;
  std::chrono::milliseconds subscriber_down_for_{};
  std::string demoted_;                 // the last master that answered READONLY
  std::optional<MasterAddress> stale_;  // this round: a sentinel named demoted_

  std::atomic<uint64_t> switches_{0};
};

}  // namespace

std::unique_ptr<Client> MakeSentinelClient(Client::Options options) {
  return std::make_unique<SentinelClient>(std::move(options));
}

}  // namespace sluice::redis
