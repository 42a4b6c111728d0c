// Synchronous calls on redis::Client and redis::RedisStore for tests. Each waits up to 10 s for
// its answer; without one it returns Internal ("no answer in 10 s"), which tests may count as a
// hang. The callbacks own their promise, so a late answer after such a return is harmless.

#ifndef SLUICE_TESTS_SUPPORT_REDIS_STORE_REDIS_CALLS_H_
#define SLUICE_TESTS_SUPPORT_REDIS_STORE_REDIS_CALLS_H_

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backend/redis/redis_store.h"
#include "gtest/gtest.h"
#include "redis/client.h"
#include "redis/tls.h"

namespace sluice::testing {

// A client of `urls` (one server, or a cluster's seeds), waited for until ready (up to 5 s).
// `tls`: for rediss:// URLs.
inline std::unique_ptr<redis::Client> OpenRedis(
    const std::vector<std::string>& urls, bool cluster,
    std::chrono::microseconds timeout = std::chrono::seconds(2),
    const Clock* clock = SystemClock::Get(), std::optional<redis::TlsOptions> tls = std::nullopt) {
  redis::Client::Options o;
  for (const auto& u : urls) o.seeds.push_back(*redis::ParseUrl(u));
  o.cluster = cluster;
  o.tls = std::move(tls);
  o.connection.timeout = timeout;
  o.connection.clock = clock;
  o.connection.max_backoff = std::chrono::milliseconds(100);
  auto client = redis::Client::Create(o);
  EXPECT_TRUE(client.ok());
  for (int i = 0; i < 500 && !(*client)->Ready(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::move(*client);
}

// One command, sent to the node that serves `key`.
inline absl::StatusOr<redis::Reply> RedisCommand(redis::Client& client,
                                                 const std::vector<std::string>& args,
                                                 std::string_view key = "x") {
  std::vector<std::string_view> views(args.begin(), args.end());
  std::string command;
  redis::AppendCommand(&command, views);
  auto promise = std::make_shared<std::promise<absl::StatusOr<redis::Reply>>>();
  auto future = promise->get_future();
  client.Send(key, std::move(command),
              [promise](absl::StatusOr<redis::Reply> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return absl::InternalError("no answer in 10 s");
  }
  return future.get();
}

// Blocks the server of `url` with DEBUG SLEEP `seconds` (sent on `admin`, whose timeout must
// outlast it) and returns once it is seen blocked: a PING of a client of its own has had no answer
// within 50 ms (at most 5 s of tries). The future holds DEBUG SLEEP's answer. (A fixed wait after
// sending it was not enough on a loaded machine: the calls a test sent next were answered first.)
inline std::future<absl::StatusOr<redis::Reply>> BlockRedis(redis::Client& admin,
                                                            const std::string& url,
                                                            double seconds) {
  auto probe = OpenRedis({url}, false, std::chrono::milliseconds(50));  // (ready before it sleeps)
  auto sleeping = std::async(std::launch::async, [&admin, seconds] {
    return RedisCommand(admin, {"DEBUG", "SLEEP", std::to_string(seconds)});
  });
  for (int i = 0; i < 100 && RedisCommand(*probe, {"PING"}).ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return sleeping;
}

inline absl::StatusOr<redis::DecideResult> DecideNow(redis::RedisStore& store,
                                                     const std::vector<backend::Item>& items) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<redis::DecideResult>>>();
  auto future = promise->get_future();
  store.DecideAll(items, [promise](absl::StatusOr<redis::DecideResult> r) {
    promise->set_value(std::move(r));
  });
  if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return absl::InternalError("no answer in 10 s");
  }
  return future.get();
}

// A lease by RedisStore::Lease: up to `want` units of `item`'s state, for at most life_us.
inline absl::StatusOr<backend::LeaseSource::Grant> TakeLease(redis::RedisStore& store,
                                                             const backend::Item& item,
                                                             uint64_t want, int64_t life_us) {
  using Grant = backend::LeaseSource::Grant;
  auto promise = std::make_shared<std::promise<absl::StatusOr<Grant>>>();
  auto future = promise->get_future();
  store.Lease(item, want, life_us,
              [promise](absl::StatusOr<Grant> grant) { promise->set_value(std::move(grant)); });
  if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return absl::InternalError("no answer in 10 s");
  }
  return future.get();
}

// What `item`'s state has left, read by a decision of cost 0; -1 (and a test failure) when the
// decision fails.
inline int64_t Remaining(redis::RedisStore& store, backend::Item item) {
  item.cost = 0;
  auto result = DecideNow(store, {item});
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->decisions[0].remaining : -1;
}

// Makes `count` calls at once, without waiting between them (start(i, done) makes call i, which
// answers through `done`), then waits for every answer (at most 20 s): the answers by index,
// Internal ("no answer") for those that did not come. (The answers outlive a wait that gave up.)
template <typename T, typename Start>
std::vector<absl::StatusOr<T>> AllAtOnce(size_t count, Start start) {
  struct Answers {
    explicit Answers(size_t n) : results(n, absl::InternalError("no answer")) {}
    bool All() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == results.size(); }
    absl::Mutex mu;
    std::vector<absl::StatusOr<T>> results ABSL_GUARDED_BY(mu);
    size_t answered ABSL_GUARDED_BY(mu) = 0;
  };
  auto answers = std::make_shared<Answers>(count);
  for (size_t i = 0; i < count; ++i) {
    start(i, [answers, i](absl::StatusOr<T> r) {
      absl::MutexLock lock(&answers->mu);
      answers->results[i] = std::move(r);
      ++answers->answered;
    });
  }
  absl::MutexLock lock(&answers->mu);
  answers->mu.AwaitWithTimeout(absl::Condition(answers.get(), &Answers::All), absl::Seconds(20));
  return answers->results;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_REDIS_STORE_REDIS_CALLS_H_
