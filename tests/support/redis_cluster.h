// A throwaway Redis Cluster for tests: N masters, each with R replicas (none by default), on free
// loopback ports, each node in its own temp directory, joined with `redis-cli --cluster create
// --cluster-replicas R`; stopped by pid. With TlsCerts, every node serves TLS alone (mutual, its
// cluster bus and replication too: TlsCerts::RedisArgs), and redis-cli joins them over TLS.

#ifndef SLUICE_TESTS_SUPPORT_REDIS_CLUSTER_H_
#define SLUICE_TESTS_SUPPORT_REDIS_CLUSTER_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/redis_server.h"
#include "tests/support/tls_certs.h"

namespace sluice::testing {

class RedisCluster {
 public:
  explicit RedisCluster(int masters = 3, int replicas_per_master = 0, const TlsCerts* tls = nullptr)
      : tls_(tls != nullptr) {
    char dir_template[] = "/tmp/sluice-cluster-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return;
    dir_ = dir_template;
    const std::string cli = tls != nullptr ? "redis-cli " + tls->RedisCliArgs() : "redis-cli";
    std::string create = cli + " --cluster create";
    for (int i = 0; i < masters * (1 + replicas_per_master); ++i) {
      const int port = RedisServer::FreeClusterPort();
      const std::string node_dir = dir_ + "/" + std::to_string(port);
      std::filesystem::create_directories(node_dir);
      std::vector<std::string> args = {"--cluster-enabled",
                                       "yes",
                                       "--cluster-config-file",
                                       "nodes.conf",
                                       "--cluster-node-timeout",
                                       "2000",
                                       "--dir",
                                       node_dir};
      if (tls != nullptr) {
        const std::vector<std::string> more = tls->RedisArgs(port, "server", true, true);
        args.insert(args.end(), more.begin(), more.end());
      }
      nodes_.push_back(std::make_unique<RedisServer>(args, port));
      create += " 127.0.0.1:" + std::to_string(port);
    }
    create += " --cluster-replicas " + std::to_string(replicas_per_master) + " --cluster-yes >" +
              dir_ + "/create.log 2>&1";
    created_ = std::system(create.c_str()) == 0;
    // Then wait (up to 10 s) until every node agrees that the cluster is up.
    for (size_t i = 0; created_ && i < nodes_.size(); ++i) {
      // With replicas, also until each replica has finished its first sync with its master.
      const std::string port = std::to_string(nodes_[i]->port());
      const std::string check = cli + " -p " + port +
                                " cluster info 2>/dev/null | grep -q cluster_state:ok && " + "! " +
                                cli + " -p " + port + " info replication 2>/dev/null | grep -q " +
                                "'master_link_status:down\\|master_sync_in_progress:1'";
      bool ok = false;
      for (int attempt = 0; attempt < 200 && !ok; ++attempt) {
        ok = std::system(check.c_str()) == 0;
        if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      created_ = ok;
    }
  }
  ~RedisCluster() {
    nodes_.clear();  // stops every server
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  bool created() const { return created_; }
  int port(size_t i) const { return nodes_[i]->port(); }
  // Every node, masters and replicas (which is which changes with failovers: ask the nodes).
  size_t size() const { return nodes_.size(); }
  std::string url(size_t i) const {
    return tls_ ? "rediss://127.0.0.1:" + std::to_string(nodes_[i]->port()) : nodes_[i]->url();
  }
  RedisServer& node(size_t i) { return *nodes_[i]; }

 private:
  bool tls_;
  std::string dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  bool created_ = false;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_REDIS_CLUSTER_H_
