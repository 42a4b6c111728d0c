#include "stack/stack.h"

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "backend/failover.h"
#include "backend/hybrid/eventual.h"
#include "backend/hybrid/leases.h"
#include "backend/hybrid/over_limit_cache.h"
#include "backend/memory/local_leases.h"
#include "backend/memory/local_over_limit_cache.h"
#include "backend/memory/memory_holds.h"
#include "backend/memory/memory_reservations.h"
#include "backend/memory/memory_store.h"
#include "backend/redis/eviction_policy.h"
#include "backend/redis/redis_holds.h"
#include "backend/redis/redis_reservations.h"
#include "backend/redis/redis_store.h"
#include "backend/ticker.h"
#include "fmt/format.h"
#include "redis/client.h"
#include "redis/sentinel.h"
#include "spdlog/spdlog.h"
#include "stack/redis_connect.h"
#include "stack/redis_overrides.h"
#include "stack/redis_tls.h"
#include "util/log.h"

namespace sluice::stack {

// The parts, in the order they may go: the client last declared, so first destroyed (its
// destructor fails the calls still in flight, whose callbacks use the Redis store, the failover
// and the memory store, which must still be there).
struct Stack::Parts {
  std::unique_ptr<store::MemoryStore> memory;
  // In front of the memory store when it is the top (no Redis): a key over its limit is denied
  // from each thread's kept denials, and a hot state of a domain that chose leases (`consistency:
  // leased`, `hot_keys: lease`) is admitted from each thread's leases, without the store's lock.
  std::unique_ptr<store::LocalOverLimitCache> local_over_limit_cache;
  std::unique_ptr<store::LocalLeases> local_leases;
  std::unique_ptr<redis::RedisStore> redis;
  std::unique_ptr<backend::OverLimitCache> over_limit_cache;  // in front of redis; may be null
  std::unique_ptr<backend::Leases> leases;                    // in front of that
  std::unique_ptr<backend::Eventual> eventual;                // in front of that
  std::unique_ptr<backend::Failover> failover;
  // Every lease interval: ends the leases that are over (an idle instance's too), and gives back
  // every lease when the config generation moved (ReturnLeasesOnChange).
  std::unique_ptr<backend::Ticker> lease_ticker;
  absl::Mutex generation_mu;
  std::function<uint64_t()> generation ABSL_GUARDED_BY(generation_mu);
  uint64_t seen_generation ABSL_GUARDED_BY(generation_mu) = 0;
  std::unique_ptr<redis::Client> client;
  // The concurrency limits' holds: on Redis with Redis (after `client`: destroyed before it),
  // else in this process.
  std::unique_ptr<backend::Holds> holds;
  // Reservations of costs to settle later: as the holds.
  std::unique_ptr<backend::Reservations> reservations;

  void TickLeases() {
    leases->SweepEnded();
    bool changed = false;
    {
      absl::MutexLock lock(&generation_mu);
      if (generation) {
        const uint64_t now = generation();
        changed = now != seen_generation;
        seen_generation = now;
      }
    }
    if (changed) leases->ReturnAll([] {});
  }
};

namespace {

std::unique_ptr<store::MemoryStore> MakeMemory(const rules::Settings& settings,
                                               const Clock* clock) {
  return std::make_unique<store::MemoryStore>(
      store::MemoryStore::Options{
          .max_entries = settings.max_entries, .shards = 64, .on_full = settings.on_full},
      clock);
}

// redis.sentinel as the client's options: each sentinel with the sentinels' login, over TLS as
// `tls` says (unset: as the master, redis.url's scheme).
absl::StatusOr<redis::SentinelOptions> SentinelOptionsOf(const rules::Settings& settings) {
  const rules::RedisSentinelSettings& s = *settings.redis_sentinel;
  redis::SentinelOptions out;
  out.master = s.master;
  const bool tls = s.tls.value_or(settings.redis_url.starts_with("rediss://"));
  for (const std::string& address : s.addresses) {
    auto endpoint = redis::ParseSentinelAddress(address);
    if (!endpoint.ok()) return endpoint.status();
    endpoint->user = s.username;
    endpoint->password = s.password;
    endpoint->tls = tls;
    out.sentinels.push_back(*std::move(endpoint));
  }
  return out;
}

// Connects to Redis as the settings say (`url`, or a cluster's `nodes`), waiting a moment for
// the connection so that a wrong password is a start-up error; an unreachable Redis is not (its
// domains' failure_mode answers until it comes).
absl::Status StartRedis(const rules::Settings& settings, const std::optional<std::string>& url_flag,
                        Stack::Parts& backend, std::string& where) {
  std::vector<std::string> urls;
  std::optional<redis::SentinelOptions> sentinel;
  if (url_flag) {
    urls = {*url_flag};
  } else if (settings.redis_sentinel) {
    auto options = SentinelOptionsOf(settings);
    if (!options.ok()) return options.status();
    sentinel = *std::move(options);
    // The master's login, database and TLS; its address is the sentinels' to say.
    urls = {settings.redis_url.empty() ? "redis://" + sentinel->master : settings.redis_url};
  } else if (!settings.redis_nodes.empty()) {
    urls = settings.redis_nodes;
  } else if (!settings.redis_url.empty()) {
    urls = {settings.redis_url};
  } else {
    return absl::InvalidArgumentError(
        "backend: redis needs redis.url (or redis.nodes with cluster: true), or --redis URL");
  }
  // TLS files that cannot be used are an error here, before any connection (as check-config
  // says); certificates the server refuses are not (see ConnectRedis).
  auto tls = RedisTlsContext(settings);
  if (!tls.ok()) return tls.status();
  auto connection = ConnectRedis(urls, settings.redis_cluster, settings.redis_timeout_us,
                                 std::chrono::seconds(2), *std::move(tls), sentinel);
  if (!connection.ok()) return connection.status();
  backend.client = std::move(connection->client);
  where = std::move(connection->where);
  if (!backend.client->Ready()) {
    util::Log().warn("{} not reachable yet ({}); failure_mode answers until it is", where,
                     backend.client->last_error());
  }
  // Redis's own eviction would drop live states (each a reset limit): warn unless noeviction.
  redis::ReadMaxmemoryPolicy(
      *backend.client, settings.redis_key_prefix, [where](absl::StatusOr<std::string> policy) {
        if (!policy.ok()) {
          util::Log().warn(
              "{}: could not read maxmemory-policy ({}); exact limits need noeviction "
              "(docs/redis.md)",
              where, std::string(policy.status().message()));
        } else if (auto warning = redis::EvictionPolicyWarning(*policy)) {
          util::Log().warn("{}: {}", where, *warning);
        }
      });
  redis::RedisStore::Options store_options;
  store_options.key_prefix = settings.redis_key_prefix;
  store_options.buckets = settings.redis_buckets;
  backend.redis = std::make_unique<redis::RedisStore>(backend.client.get(), store_options);
  backend::Backend* primary = backend.redis.get();
  if (settings.redis_over_limit_cache > 0) {
    backend.over_limit_cache = std::make_unique<backend::OverLimitCache>(
        primary, &backend.client->clock(),
        backend::OverLimitCache::Options{.max_entries = settings.redis_over_limit_cache});
    primary = backend.over_limit_cache.get();
  }
  // consistency: leased items are decided from leases; every other item passes through.
  backend.leases = std::make_unique<backend::Leases>(
      primary, backend.redis.get(), &backend.client->clock(),
      backend::Leases::Options{.life_us = settings.redis_lease_interval_us,
                               .window_life_us = settings.redis_window_lease_life_us > 0
                                                     ? settings.redis_window_lease_life_us
                                                     : 10 * settings.redis_lease_interval_us});
  primary = backend.leases.get();
  backend.lease_ticker = std::make_unique<backend::Ticker>(
      absl::Microseconds(std::min<int64_t>(settings.redis_lease_interval_us, 100000)),
      [&backend] { backend.TickLeases(); });
  // consistency: eventual items are decided on copies merged every sync interval.
  backend.eventual = std::make_unique<backend::Eventual>(
      primary, backend.redis.get(), backend.redis.get(), &backend.client->clock(),
      backend::Eventual::Options{.sync_interval_us = settings.redis_sync_interval_us,
                                 .ticker = true,
                                 .leases = backend.leases.get()});
  primary = backend.eventual.get();
  backend.failover = std::make_unique<backend::Failover>(primary, backend.memory.get());
  return absl::OkStatus();
}

// The over-limit cache's families (none when it is off).
absl::Status RegisterOverLimitCacheMetrics(metrics::Registry& registry,
                                           const backend::OverLimitCache* cache) {
  if (cache == nullptr) return absl::OkStatus();
  if (auto s = registry.AddCallbackCounter(
          "sluice_over_limit_cache_hits_total",
          "requests denied from the over-limit cache, with no backend call",
          [cache] { return static_cast<double>(cache->GetStats().hits); });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackGauge(
          "sluice_over_limit_cache_entries", "denials the over-limit cache holds",
          [cache] { return static_cast<double>(cache->GetStats().entries); });
      !s.ok()) {
    return s;
  }
  return registry.AddCallbackCounter(
      "sluice_over_limit_cache_resets_seen_total",
      "times a reset through any instance (the reset epoch moved) emptied the cache",
      [cache] { return static_cast<double>(cache->GetStats().epoch_changes); });
}

// The leases' families (consistency: leased).
absl::Status RegisterLeaseMetrics(metrics::Registry& registry, const backend::Leases* leases) {
  if (auto s = registry.AddCallbackCounter(
          "sluice_lease_decisions_total",
          "requests decided from leased units, with no backend call",
          [leases] { return static_cast<double>(leases->GetStats().local); });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackCounter(
          "sluice_leases_total", "leases taken from the backend (each one script call)",
          [leases] { return static_cast<double>(leases->GetStats().leases); });
      !s.ok()) {
    return s;
  }
  return registry.AddCallback(
      {.name = "sluice_lease_units_total",
       .help = "leased units: granted, given back unspent, or lost unspent (a bucket's, a reset)",
       .label_names = {"fate"}},
      metrics::MetricType::kCounter, [leases] {
        const backend::Leases::Stats st = leases->GetStats();
        return std::vector<metrics::CallbackSample>{
            {{"granted"}, static_cast<double>(st.units_granted)},
            {{"returned"}, static_cast<double>(st.units_returned)},
            {{"lost"}, static_cast<double>(st.units_lost)}};
      });
}

// The eventual mode's families (consistency: eventual).
absl::Status RegisterEventualMetrics(metrics::Registry& registry,
                                     const backend::Eventual* eventual) {
  if (auto s = registry.AddCallback(
          {.name = "sluice_eventual_decisions_total",
           .help = "consistency: eventual requests, by where they were decided: on this "
                   "instance's copy (local), by the backend (exact: no fresh copy), or from "
                   "leases (leased: a cold key, cold_keys: lease)",
           .label_names = {"where"}},
          metrics::MetricType::kCounter,
          [eventual] {
            const backend::Eventual::Stats st = eventual->GetStats();
            return std::vector<metrics::CallbackSample>{
                {{"local"}, static_cast<double>(st.local)},
                {{"exact"}, static_cast<double>(st.exact)},
                {{"leased"}, static_cast<double>(st.leased)}};
          });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackCounter(
          "sluice_eventual_syncs_total", "merge calls sent to the backend (script calls)",
          [eventual] { return static_cast<double>(eventual->GetStats().syncs); });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackCounter(
          "sluice_eventual_sync_errors_total", "merge calls that failed (their units go again)",
          [eventual] { return static_cast<double>(eventual->GetStats().sync_errors); });
      !s.ok()) {
    return s;
  }
  return registry.AddCallbackCounter(
      "sluice_eventual_states_synced_total", "states the merge calls added to and read back",
      [eventual] { return static_cast<double>(eventual->GetStats().states_synced); });
}

// The hot keys' families (hot_keys: lease): bounded, the kTopHotKeys fastest promoted keys only.
absl::Status RegisterHotKeyMetrics(metrics::Registry& registry, const backend::Leases* leases) {
  constexpr size_t kTopHotKeys = 10;
  if (auto s = registry.AddCallback(
          {.name = "sluice_hot_key_rate",
           .help = "requests per second this instance sees of each of the 10 fastest keys "
                   "promoted to leases (hot_keys: lease)",
           .label_names = {"limit", "key"}},
          metrics::MetricType::kGauge,
          [leases] {
            std::vector<metrics::CallbackSample> samples;
            for (backend::HotKeys::Hot& hot : leases->TopHotKeys(kTopHotKeys)) {
              samples.push_back({{std::move(hot.limit), std::move(hot.key)}, hot.rate});
            }
            return samples;
          });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackGauge(
          "sluice_hot_keys_promoted", "keys decided from leases now because they are hot",
          [leases] { return static_cast<double>(leases->GetHotKeyStats().promoted); });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackCounter(
          "sluice_hot_key_promotions_total", "times a hot key was promoted to leases",
          [leases] { return static_cast<double>(leases->GetHotKeyStats().promotions); });
      !s.ok()) {
    return s;
  }
  return registry.AddCallbackCounter(
      "sluice_hot_key_demotions_total", "times a promoted key cooled down and went back to exact",
      [leases] { return static_cast<double>(leases->GetHotKeyStats().demotions); });
}

// Registers the backend's families on /metrics.
absl::Status RegisterRedisMetrics(metrics::Registry& registry, const Stack::Parts& backend) {
  redis::RedisStore* store = backend.redis.get();
  using Stats = redis::RedisStore::Stats;
  const std::pair<const char*, const char*> counters[] = {
      {"sluice_backend_calls_total", "decisions asked of the backend"},
      {"sluice_backend_script_calls_total", "script calls sent to Redis (a batch counts once)"},
      {"sluice_backend_errors_total", "backend calls that failed (timeouts included)"},
      {"sluice_backend_timeouts_total", "backend calls that timed out"},
      {"sluice_backend_noscript_reloads_total", "NOSCRIPT answers, the script reloaded"},
      {"sluice_backend_refused_total", "calls refused at once by the open circuit breaker"},
      {"sluice_backend_breaker_opened_total", "times the circuit breaker opened"},
      {"sluice_backend_late_refunds_total",
       "requests admitted by a script call whose reply came after they were answered, refunded"}};
  uint64_t Stats::*const fields[] = {
      &Stats::calls,          &Stats::script_calls,     &Stats::errors,
      &Stats::timeouts,       &Stats::noscript_reloads, &Stats::refused,
      &Stats::breaker_opened, &Stats::late_refunds};
  for (size_t i = 0; i < std::size(counters); ++i) {
    auto status = registry.AddCallbackCounter(
        counters[i].first, counters[i].second,
        [store, field = fields[i]] { return static_cast<double>(store->GetStats().*field); });
    if (!status.ok()) return status;
  }
  if (auto s = registry.AddCallbackGauge("sluice_backend_up",
                                         "1 when the backend can decide: connected, breaker "
                                         "closed, no call failed in the last second",
                                         [store] { return store->GetHealth().up ? 1.0 : 0.0; });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackGauge("sluice_backend_breaker_state",
                                         "circuit breaker: 0 closed, 1 open, 2 half-open",
                                         [store] {
                                           switch (store->GetStats().breaker) {
                                             case redis::Breaker::State::kOpen:
                                               return 1.0;
                                             case redis::Breaker::State::kHalfOpen:
                                               return 2.0;
                                             default:
                                               return 0.0;
                                           }
                                         });
      !s.ok()) {
    return s;
  }
  if (auto s = RegisterOverLimitCacheMetrics(registry, backend.over_limit_cache.get()); !s.ok()) {
    return s;
  }
  if (auto s = RegisterLeaseMetrics(registry, backend.leases.get()); !s.ok()) return s;
  if (auto s = RegisterEventualMetrics(registry, backend.eventual.get()); !s.ok()) return s;
  if (auto s = RegisterHotKeyMetrics(registry, backend.leases.get()); !s.ok()) return s;
  backend::Failover* failover = backend.failover.get();
  return registry.AddCallback(
      {.name = "sluice_backend_fallback_requests_total",
       .help = "requests answered by their domain's failure_mode while the backend failed",
       .label_names = {"policy"}},
      metrics::MetricType::kCounter, [failover] {
        using backend::FailureMode;
        return std::vector<metrics::CallbackSample>{
            {{"open"}, static_cast<double>(failover->fallbacks(FailureMode::kOpen))},
            {{"local"}, static_cast<double>(failover->fallbacks(FailureMode::kLocal))},
            {{"closed"}, static_cast<double>(failover->fallbacks(FailureMode::kClosed))}};
      });
}

}  // namespace

Stack::Stack(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {
  if (parts_->failover) {
    top_ = parts_->failover.get();
  } else {
    parts_->local_over_limit_cache =
        std::make_unique<store::LocalOverLimitCache>(parts_->memory.get());
    parts_->local_leases = std::make_unique<store::LocalLeases>(
        parts_->local_over_limit_cache.get(), parts_->memory.get(), store::LocalLeases::Options{});
    top_ = parts_->local_leases.get();
  }
}

Stack::~Stack() {
  // The tickers send calls through the client, which goes first.
  if (parts_->lease_ticker) parts_->lease_ticker->Stop();
  if (parts_->eventual) parts_->eventual->StopTicker();
}

void Stack::ReturnLeasesOnChange(std::function<uint64_t()> generation) {
  absl::MutexLock lock(&parts_->generation_mu);
  parts_->seen_generation = generation();
  parts_->generation = std::move(generation);
}

std::unique_ptr<Stack> Stack::Memory(const rules::Settings& settings, const Clock* clock) {
  auto parts = std::make_unique<Parts>();
  parts->memory = MakeMemory(settings, clock);
  parts->holds = std::make_unique<store::MemoryHolds>(settings.max_entries);
  parts->reservations = std::make_unique<store::MemoryReservations>(settings.max_entries);
  return std::unique_ptr<Stack>(new Stack(std::move(parts)));
}

absl::StatusOr<std::unique_ptr<Stack>> Stack::Build(const rules::Settings& settings,
                                                    const std::optional<std::string>& redis_url,
                                                    const Clock* clock) {
  auto parts = std::make_unique<Parts>();
  parts->memory = MakeMemory(settings, clock);
  std::string where = "memory";
  if (redis_url || settings.backend == "redis") {
    if (auto s = StartRedis(settings, redis_url, *parts, where); !s.ok()) return s;
  }
  if (parts->client != nullptr) {
    parts->holds =
        std::make_unique<redis::RedisHolds>(parts->client.get(), settings.redis_key_prefix);
    parts->reservations =
        std::make_unique<redis::RedisReservations>(parts->client.get(), settings.redis_key_prefix);
  } else {
    parts->holds = std::make_unique<store::MemoryHolds>(settings.max_entries);
    parts->reservations = std::make_unique<store::MemoryReservations>(settings.max_entries);
  }
  auto stack = std::unique_ptr<Stack>(new Stack(std::move(parts)));
  stack->where_ = std::move(where);
  return stack;
}

bool Stack::remote() const { return parts_->redis != nullptr; }

backend::Holds& Stack::holds() const { return *parts_->holds; }

backend::Reservations& Stack::reservations() const { return *parts_->reservations; }

absl::StatusOr<std::unique_ptr<rules::OverrideBook>> Stack::OpenOverrides(
    const rules::Settings& settings, const std::string& state_dir,
    std::function<std::shared_ptr<const rules::Config>()> config, const Clock* clock) const {
  auto clock_us = [clock] { return clock->NowMicros(); };
  if (parts_->client != nullptr) {
    auto book = std::make_unique<RedisOverrideBook>(parts_->client.get(), settings.redis_key_prefix,
                                                    where_, config, clock_us);
    if (absl::Status read = book->ReadNow(
            std::chrono::duration_cast<std::chrono::milliseconds>(parts_->client->timeout() * 4));
        !read.ok()) {
      util::Log().warn("overrides: not read from {} yet ({}); they are read once it answers",
                       where_, std::string(read.message()));
    }
    return book;
  }
  const std::string path = state_dir.empty() ? "" : state_dir + "/overrides.jsonl";
  auto book = rules::FileOverrideBook::Open(path, *config(), clock_us);
  if (!book.ok()) return book.status();
  return std::unique_ptr<rules::OverrideBook>(std::move(*book));
}

void Stack::ReturnLeases(absl::Duration wait) {
  if (parts_->leases == nullptr) return;
  auto returned = std::make_shared<absl::Notification>();
  parts_->leases->ReturnAll([returned] { returned->Notify(); });
  auto merged = std::make_shared<absl::Notification>();
  parts_->eventual->Sync([merged] { merged->Notify(); });
  if (!returned->WaitForNotificationWithTimeout(wait)) {
    util::Log().warn("{}: leases not all given back in time", where_);
  }
  if (!merged->WaitForNotificationWithTimeout(wait)) {
    util::Log().warn("{}: what eventual admitted not merged in time", where_);
  }
}

metrics::ServerMetrics::StoreStats Stack::StoreStats() const {
  const store::MemoryStore::Stats st = parts_->memory->GetStats();
  return {.entries = static_cast<double>(st.entries),
          .memory_bytes = static_cast<double>(st.memory_bytes),
          .reclaimed = static_cast<double>(st.reclaimed),
          .overflow_states = static_cast<double>(st.overflow_states),
          .on_full = std::string(OnFullName(st.on_full)),
          .no_room_allowed = static_cast<double>(st.no_room_allowed),
          .no_room_denied = static_cast<double>(st.no_room_denied)};
}

absl::Status Stack::RegisterBackendMetrics(metrics::Registry& registry) const {
  if (!remote()) return absl::OkStatus();
  return RegisterRedisMetrics(registry, *parts_);
}

Stack::RedisCounters Stack::GetRedisCounters() const {
  RedisCounters out;
  if (parts_->redis) {
    const redis::RedisStore::Stats st = parts_->redis->GetStats();
    out.decide_calls = st.calls;
    out.refused = st.refused;
    out.script_calls = st.script_calls;
  }
  if (parts_->over_limit_cache)
    out.over_limit_cache_hits = parts_->over_limit_cache->GetStats().hits;
  if (parts_->leases) {
    const backend::Leases::Stats st = parts_->leases->GetStats();
    out.lease_local = st.local;
    out.leases = st.leases;
    out.lease_returns = st.returns;
    out.leases_fenced = st.fenced;
    out.leases_empty = st.empty;
  }
  if (parts_->eventual) {
    const backend::Eventual::Stats st = parts_->eventual->GetStats();
    out.eventual_local = st.local;
    out.eventual_leased = st.leased;
    out.eventual_syncs = st.syncs;
    out.eventual_states_synced = st.states_synced;
    out.eventual_max_round_trip_us = st.max_round_trip_us;
  }
  return out;
}

}  // namespace sluice::stack
