// The runtime overrides on Redis (redis_overrides.h).

#include "stack/redis_overrides.h"

#include <algorithm>
#include <charconv>
#include <future>
#include <utility>

#include "fmt/format.h"
#include "redis/resp.h"
#include "util/log.h"

namespace sluice::stack {
namespace {

using namespace std::chrono_literals;

// Sets one override (ARGV[1]: its field, ARGV[2]: its JSON) and moves the counter; returns the
// counter.
constexpr std::string_view kPutScript =
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return redis.call('INCR', KEYS[2])";
// Removes one; returns the counter, or -1 when there was none (and the counter stays).
constexpr std::string_view kRemoveScript =
    "if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return -1 end "
    "return redis.call('INCR', KEYS[2])";

// The hash field of an override: its domain and entries.
std::string FieldOf(std::string_view domain, std::span<const rules::Entry> entries) {
  return fmt::format("{}\n{}", domain, rules::OverrideEntriesText(entries));
}

// One command, sent to the node of `key`, its reply awaited up to `wait`.
absl::StatusOr<redis::Reply> Call(redis::Client& client, std::string_view key,
                                  std::initializer_list<std::string_view> args,
                                  std::chrono::milliseconds wait) {
  std::string command;
  redis::AppendCommand(&command, args);
  auto reply = std::make_shared<std::promise<absl::StatusOr<redis::Reply>>>();
  std::future<absl::StatusOr<redis::Reply>> answer = reply->get_future();
  client.Send(key, std::move(command),
              [reply](absl::StatusOr<redis::Reply> r) { reply->set_value(std::move(r)); });
  if (answer.wait_for(wait) != std::future_status::ready) {
    return absl::DeadlineExceededError("redis did not answer in time");
  }
  absl::StatusOr<redis::Reply> r = answer.get();
  if (r.ok() && r->IsError()) return absl::UnavailableError("redis: " + r->str);
  return r;
}

// The script's counter (an integer reply), or why not.
absl::StatusOr<int64_t> Counter(const absl::StatusOr<redis::Reply>& reply) {
  if (!reply.ok()) return reply.status();
  if (reply->type != redis::Reply::Type::kInteger) {
    return absl::UnavailableError("redis: an unexpected reply to the overrides script");
  }
  return reply->integer;
}

}  // namespace

RedisOverrideBook::RedisOverrideBook(redis::Client* client, std::string prefix, std::string where,
                                     std::function<std::shared_ptr<const rules::Config>()> config,
                                     std::function<int64_t()> clock_us,
                                     std::chrono::milliseconds poll)
    : client_(client),
      hash_key_(prefix + "{overrides}"),
      version_key_(prefix + "{overrides}:version"),
      where_(std::move(where)),
      config_(std::move(config)),
      clock_us_(std::move(clock_us)),
      poll_(poll) {
  // A failed read keeps what is in force; the next poll tries again.
  const std::chrono::milliseconds wait = std::max<std::chrono::milliseconds>(
      poll_ * 4, std::chrono::duration_cast<std::chrono::milliseconds>(client_->timeout()));
  poller_ = std::make_unique<backend::Ticker>(absl::FromChrono(poll_),
                                              [this, wait] { (void)Refresh(wait); });
}

absl::Status RedisOverrideBook::ReadNow(std::chrono::milliseconds wait) { return Refresh(wait); }

absl::Status RedisOverrideBook::Refresh(std::chrono::milliseconds wait) {
  const absl::StatusOr<redis::Reply> counter =
      Call(*client_, version_key_, {"GET", version_key_}, wait);
  if (!counter.ok()) return counter.status();
  int64_t version = 0;
  if (counter->type == redis::Reply::Type::kString) {
    std::from_chars(counter->str.data(), counter->str.data() + counter->str.size(), version);
  }
  {
    absl::MutexLock lock(&mu_);
    if (version == version_) return absl::OkStatus();
  }
  const absl::StatusOr<redis::Reply> hash = Call(*client_, hash_key_, {"HGETALL", hash_key_}, wait);
  if (!hash.ok()) return hash.status();
  std::vector<std::string> items, fields;
  for (size_t i = 0; i + 1 < hash->elements.size(); i += 2) {
    fields.push_back(hash->elements[i].str);
    items.push_back(hash->elements[i + 1].str);
  }
  const int64_t now_us = clock_us_();
  std::vector<std::string> skipped;
  std::vector<rules::Override> all =
      rules::ParseStoredOverrides(items, *config_(), now_us, &skipped);
  for (const std::string& why : skipped)
    util::Log().warn("overrides in redis: one skipped: {}", why);
  // The ended ones are removed from the hash (by whichever instance sees them first).
  for (const rules::Override& o : all) {
    if (!o.Expired(now_us)) continue;
    const std::string field = FieldOf(o.domain, o.entries);
    (void)Call(*client_, hash_key_, {"HDEL", hash_key_, field}, wait);
  }
  std::erase_if(all, [now_us](const rules::Override& o) { return o.Expired(now_us); });
  PublishAt(version, std::move(all));
  return absl::OkStatus();
}

void RedisOverrideBook::PublishAt(int64_t version, std::vector<rules::Override> all) {
  absl::MutexLock lock(&mu_);
  // A read that started before this instance's own last change and ended after it is older
  // than what is in force.
  if (version < floor_) return;
  version_ = version;
  all_ = all;
  Publish(std::move(all));
}

void RedisOverrideBook::Put(rules::Override o, Done done) {
  const std::string field = FieldOf(o.domain, o.entries);
  const std::string json = rules::RenderOverride(o);
  const std::chrono::milliseconds wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(client_->timeout()) + 1s;
  const absl::StatusOr<int64_t> version = Counter(Call(
      *client_, hash_key_, {"EVAL", kPutScript, "2", hash_key_, version_key_, field, json}, wait));
  if (!version.ok()) return done(version.status());
  {
    absl::MutexLock lock(&mu_);
    floor_ = std::max(floor_, *version);
    all_ = rules::WithOverride(all_, std::move(o), clock_us_());
    Publish(all_);
  }
  done(absl::OkStatus());
}

void RedisOverrideBook::Remove(std::string domain, std::vector<rules::Entry> entries,
                               RemoveDone done) {
  const std::string field = FieldOf(domain, entries);
  const std::chrono::milliseconds wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(client_->timeout()) + 1s;
  const absl::StatusOr<int64_t> version = Counter(Call(
      *client_, hash_key_, {"EVAL", kRemoveScript, "2", hash_key_, version_key_, field}, wait));
  if (!version.ok()) return done(version.status());
  if (*version < 0) return done(false);
  {
    absl::MutexLock lock(&mu_);
    floor_ = std::max(floor_, *version);
    std::erase_if(
        all_, [&](const rules::Override& o) { return o.domain == domain && o.entries == entries; });
    Publish(all_);
  }
  done(true);
}

}  // namespace sluice::stack
