// For tests of RedisStore's per-node batches on a Redis Cluster: keys of one node in slots of
// their own, and moving a slot to another node behind a client's back (so that a batch sent to
// the old node is refused and split).

#ifndef SLUICE_TESTS_SUPPORT_REDIS_STORE_CLUSTER_BATCH_H_
#define SLUICE_TESTS_SUPPORT_REDIS_STORE_CLUSTER_BATCH_H_

#include <set>
#include <sstream>
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

// The id of the master that serves `slot`, as `admin`'s node sees it (CLUSTER NODES: "ID
// HOST:PORT@BUS FLAGS MASTER PING PONG EPOCH LINK SLOT-RANGE..."); empty if none does.
inline std::string SlotOwnerId(redis::Client& admin, uint16_t slot) {
  std::istringstream nodes(RedisCommand(admin, {"CLUSTER", "NODES"})->str);
  for (std::string line; std::getline(nodes, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string field; fields >> field;) f.push_back(field);
    for (size_t i = 8; i < f.size(); ++i) {
      if (f[i].starts_with("[")) continue;  // a slot being migrated or imported
      const size_t dash = f[i].find('-');
      const int from = std::stoi(f[i].substr(0, dash));
      const int to = dash == std::string::npos ? from : std::stoi(f[i].substr(dash + 1));
      if (from <= slot && slot <= to) return f[0];
    }
  }
  return "";
}

// Gives the slot of `redis_key` to node `to` ("host:port") on every master of `cluster` (CLUSTER
// SETSLOT ... NODE), with no key of it moved: the clients learn it from the next refusal. As
// Redis's resharding does: the target first marks the slot as importing, so that taking it
// gives the target a new configuration epoch, which the old owner's gossip cannot overrule (with
// the old epoch the target could be put back to "the old owner has it" while the old owner,
// told next, says "the target has it": each then sends a client to the other, until its redirect
// limit, as seen in make test); then the old owner and the others are told.
inline void MoveSlot(RedisCluster& cluster, const std::string& redis_key, const std::string& to) {
  auto target = OpenRedis({"redis://" + to}, false);
  const std::string id = RedisCommand(*target, {"CLUSTER", "MYID"})->str;
  const uint16_t slot_number = redis::KeySlot(redis_key);
  const std::string slot = std::to_string(slot_number);
  const std::string owner = SlotOwnerId(*target, slot_number);
  ASSERT_FALSE(owner.empty()) << "no master serves slot " << slot;
  ASSERT_NE(owner, id) << "slot " << slot << " is already on " << to;
  ASSERT_EQ(RedisCommand(*target, {"CLUSTER", "SETSLOT", slot, "IMPORTING", owner})->str, "OK");
  ASSERT_EQ(RedisCommand(*target, {"CLUSTER", "SETSLOT", slot, "NODE", id})->str, "OK");
  for (size_t i = 0; i < cluster.size(); ++i) {
    if (to.ends_with(":" + std::to_string(cluster.port(i)))) continue;  // (told first)
    auto master = OpenRedis({cluster.url(i)}, false);
    ASSERT_EQ(RedisCommand(*master, {"CLUSTER", "SETSLOT", slot, "NODE", id})->str, "OK");
  }
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_REDIS_STORE_CLUSTER_BATCH_H_
