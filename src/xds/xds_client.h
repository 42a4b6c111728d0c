// XdsClient: the rules over xDS, as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW takes them.
//
// One ADS stream (envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources)
// to the management server, asking for every RateLimitConfig (state of the world) as the node
// `node_id` with `node_metadata`. Each response is one whole rule set: it goes to the
// ConfigManager's Apply (the loader and reload path that files take) and then
//   - ACKed: version_info = the response's version, response_nonce = its nonce; or
//   - NACKed when it does not decode or does not load: version_info = the last version ACKed,
//     response_nonce = the rejected response's nonce, error_detail = {3 (INVALID_ARGUMENT), the
//     loader's errors}; the rules in force stay.
// A stream that ends (server gone, restart) is opened again after a backoff (upstream's
// XDS_CLIENT_BACKOFF_*), and resumes: its first request carries the last version ACKed and that
// response's nonce. While no connection can be made, one is tried every
// connect_retry_interval. TLS or mutual TLS to the server from files read on every connection
// attempt (so renewed certificates are picked up on the next one).
//
// Everything runs on one thread of the client's own; Stop() ends it within a fraction of a second
// (the stream is cancelled).

#ifndef SLUICE_XDS_XDS_CLIENT_H_
#define SLUICE_XDS_XDS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "metrics/registry.h"
#include "rules/config.h"
#include "rules/config_manager.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace sluice::xds {

// How long to wait before opening a stream again after `attempt` (0, 1, ...) streams in a row
// ended without a response: initial × factor^attempt within [initial, max]; with jitter, a
// uniform draw between initial and that (`unit` in [0, 1)). Upstream's formula (jpillora/backoff),
// so its defaults (factor 0.5) wait `initial` every time.
int64_t BackoffMicros(const rules::XdsSettings& settings, int attempt, double unit);

class XdsClient {
 public:
  // Applies each rule set through `rules` (not owned; must outlive the client), which from now on
  // awaits its first one (ConfigManager::ExpectRemote: not ready until then).
  XdsClient(rules::XdsSettings settings, rules::ConfigManager* rules);
  ~XdsClient();
  XdsClient(const XdsClient&) = delete;
  XdsClient& operator=(const XdsClient&) = delete;

  void Start();
  void Stop();

  struct Stats {
    bool connected = false;
    std::string version;  // the last version ACKed ("" before the first)
    uint64_t applied = 0;
    uint64_t rejected = 0;
    uint64_t streams = 0;  // streams opened
  };
  Stats stats() const;

  // sluice_xds_connected, sluice_xds_config_version_info{version}, sluice_xds_updates_total{result}
  // and sluice_xds_streams_total on `registry`, read from this client (which must outlive it).
  absl::Status RegisterMetrics(metrics::Registry& registry);

 private:
  void Run();
  // One connection and stream, until it ends or Stop(); whether a response came on it.
  bool RunStream();
  // Waits up to `us` or until Stop(); false once stopping.
  bool Sleep(int64_t us);

  const rules::XdsSettings settings_;
  rules::ConfigManager* const rules_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mt19937_64 random_;  // backoff jitter (client thread only)

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // the open stream's, to cancel
  // What the next stream resumes from (client thread writes, stats() reads).
  std::string acked_version_ ABSL_GUARDED_BY(mu_);
  std::string acked_nonce_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> applied_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> streams_{0};
};

}  // namespace sluice::xds

#endif  // SLUICE_XDS_XDS_CLIENT_H_
