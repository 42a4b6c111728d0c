// For tests of RedisStore's per-node batches on a Redis Cluster: keys of one node in slots of
// their own, and moving a slot to another node behind a client's back (so that a batch sent to
// the old node is refused and split).

#ifndef SLUICE_TESTS_SUPPORT_REDIS_STORE_CLUSTER_BATCH_H_
#define SLUICE_TESTS_SUPPORT_REDIS_STORE_CLUSTER_BATCH_H_

#include <set>
#include <string>
#include <vector>

#include "backend/redis/redis_store.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "redis/client.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_store/redis_calls.h"

namespace sluice::testing {

// `count` descriptor keys ("k<i>") whose states (limit id 1) `client` places on one node, each in
// a slot of its own; that node and another one ("host:port").
struct KeysOnOneNode {
  std::vector<std::string> keys;
  std::string node;
  std::string other;
};
inline KeysOnOneNode FindKeysOnOneNode(const redis::Client& client, const redis::RedisStore& store,
                                       size_t count) {
  KeysOnOneNode out;
  out.node = client.NodeFor(store.RedisKey(1, "k0"));
  std::set<uint16_t> slots;
  for (int i = 0; out.keys.size() < count && i < 100000; ++i) {
    std::string key = fmt::format("k{}", i);
    const std::string redis_key = store.RedisKey(1, key);
    if (client.NodeFor(redis_key) == out.node && slots.insert(redis::KeySlot(redis_key)).second) {
      out.keys.push_back(key);
    }
  }
  for (int i = 0; out.other.empty() && i < 1000; ++i) {
    const std::string n = client.NodeFor(store.RedisKey(1, fmt::format("o{}", i)));
    if (n != out.node) out.other = n;
  }
  return out;
}

// Gives the slot of `redis_key` to node `to` ("host:port") on every master of `cluster` (CLUSTER
// SETSLOT ... NODE), with no key of it moved: the clients learn it from the next refusal. The
// target is told first: told after the old owner, it would send a client that the old owner sent
// to it (MOVED) back again, and the client's call would go back and forth until its redirect
// limit (seen in make test).
inline void MoveSlot(RedisCluster& cluster, const std::string& redis_key, const std::string& to) {
  auto target = OpenRedis({"redis://" + to}, false);
  const std::string id = RedisCommand(*target, {"CLUSTER", "MYID"})->str;
  const std::string slot = std::to_string(redis::KeySlot(redis_key));
  ASSERT_EQ(RedisCommand(*target, {"CLUSTER", "SETSLOT", slot, "NODE", id})->str, "OK");
  for (size_t i = 0; i < cluster.size(); ++i) {
    if (to.ends_with(":" + std::to_string(cluster.port(i)))) continue;  // (told first)
    auto master = OpenRedis({cluster.url(i)}, false);
    ASSERT_EQ(RedisCommand(*master, {"CLUSTER", "SETSLOT", slot, "NODE", id})->str, "OK");
  }
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_REDIS_STORE_CLUSTER_BATCH_H_
