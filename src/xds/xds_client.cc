#include "xds/xds_client.h"

#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "fmt/format.h"
#include "util/log.h"
#include "util/pem_file.h"
#include "xds/rate_limit_config.h"

namespace sluice::xds {
namespace {

namespace discovery = envoy::service::discovery::v3;

constexpr int kInvalidArgument = 3;  // google.rpc.Code
// Longest single wait for a connection, so that Stop() is never held up for long.
constexpr int64_t kConnectSliceUs = 200000;

// The channel to the management server, with TLS from the settings' files when asked for.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const rules::XdsSettings& s) {
  grpc::ChannelArguments args;
  // gRPC's own reconnection follows connect_retry_interval (not its 1 s doubling to 120 s).
  const int retry_ms = static_cast<int>(std::max<int64_t>(1, s.connect_retry_interval_us / 1000));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, retry_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, retry_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, retry_ms);
  if (s.max_message_bytes > 0) {
    args.SetMaxReceiveMessageSize(
        static_cast<int>(std::min<size_t>(s.max_message_bytes, INT32_MAX)));
  }
  if (!s.tls)
    return grpc::CreateCustomChannel(s.server_url, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions tls;
  if (!s.ca_file.empty()) {
    auto ca = util::ReadPemFile(s.ca_file, "server CA file");
    if (!ca.ok()) return ca.status();
    tls.pem_root_certs = *std::move(ca);
  }
  if (!s.cert_file.empty()) {
    auto cert = util::ReadPemFile(s.cert_file, "client certificate file");
    if (!cert.ok()) return cert.status();
    auto key = util::ReadPemFile(s.key_file, "client key file");
    if (!key.ok()) return key.status();
    tls.pem_cert_chain = *std::move(cert);
    tls.pem_private_key = *std::move(key);
  }
  if (!s.server_name.empty()) args.SetSslTargetNameOverride(s.server_name);
  return grpc::CreateCustomChannel(s.server_url, grpc::SslCredentials(tls), args);
}

discovery::DiscoveryRequest Request(const rules::XdsSettings& s, const std::string& version,
                                    const std::string& nonce) {
  discovery::DiscoveryRequest request;
  request.set_version_info(version);
  request.set_response_nonce(nonce);
  request.set_type_url(kRateLimitConfigType);
  envoy::config::core::v3::Node* node = request.mutable_node();
  node->set_id(s.node_id);
  node->set_user_agent_name("sluice");
  auto* fields = node->mutable_metadata()->mutable_fields();
  for (const auto& [key, value] : s.node_metadata) (*fields)[key].set_string_value(value);
  return request;
}

std::string JoinErrors(const std::vector<std::string>& errors) {
  std::string out;
  for (const std::string& e : errors) out += (out.empty() ? "" : "; ") + e;
  return out;
}

}  // namespace

int64_t BackoffMicros(const rules::XdsSettings& s, int attempt, double unit) {
  const double min = static_cast<double>(s.backoff_initial_us);
  const double max = static_cast<double>(s.backoff_max_us);
  if (min >= max) return s.backoff_max_us;
  const double factor = s.backoff_factor <= 0 ? 2 : s.backoff_factor;
  double wait = min * std::pow(factor, attempt);
  if (s.backoff_jitter) wait = unit * (wait - min) + min;
  return static_cast<int64_t>(std::clamp(wait, min, max));
}

XdsClient::XdsClient(rules::XdsSettings settings, rules::ConfigManager* rules)
    : settings_(std::move(settings)), rules_(rules), random_(std::random_device{}()) {
  rules_->ExpectRemote();
}

XdsClient::~XdsClient() { Stop(); }

void XdsClient::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void XdsClient::Stop() {
  stopping_.store(true);
  {
    absl::MutexLock lock(&mu_);
    if (context_ != nullptr) context_->TryCancel();
    wake_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

XdsClient::Stats XdsClient::stats() const {
  Stats s;
  s.connected = connected_.load();
  s.applied = applied_.load();
  s.rejected = rejected_.load();
  s.streams = streams_.load();
  absl::MutexLock lock(&mu_);
  s.version = acked_version_;
  return s;
}

bool XdsClient::Sleep(int64_t us) {
  absl::MutexLock lock(&mu_);
  const absl::Time until = absl::Now() + absl::Microseconds(us);
  while (!stopping_.load() && !wake_.WaitWithDeadline(&mu_, until)) {
  }
  return !stopping_.load();
}

void XdsClient::Run() {
  // Decoding and loading a large rule set takes a core for tens of milliseconds. In the idle
  // scheduling class it runs only when the decisions leave a core free, and a decision that wakes
  // up takes the core from it at once: nice 10 left p99 during a stream of 10,000-descriptor
  // updates at 3-4x a quiet run's, nice 19 at 2x, SCHED_IDLE at 1x (bench/xds_update.sh). The cost:
  // with every core saturated an update gets a small share of one and may take seconds.
  sched_param idle{};
  if (sched_setscheduler(0, SCHED_IDLE, &idle) != 0) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
  }
  util::Log().info("xds: rules from {} as node '{}'{}", settings_.server_url, settings_.node_id,
                   settings_.tls ? " (TLS)" : "");
  int attempt = 0;
  std::uniform_real_distribution<double> unit(0, 1);
  while (!stopping_.load()) {
    if (RunStream()) attempt = 0;
    if (stopping_.load()) break;
    const int64_t wait = BackoffMicros(settings_, attempt, unit(random_));
    attempt = std::min(attempt + 1, 64);
    util::Log().info("xds: opening the stream again in {} ms", wait / 1000);
    if (!Sleep(wait)) break;
  }
}

bool XdsClient::RunStream() {
  auto channel = MakeChannel(settings_);
  if (!channel.ok()) {
    util::Log().error("xds: {}", std::string(channel.status().message()));
    return false;
  }
  // A connection first: tried again every connect_retry_interval (the channel's reconnect
  // backoff), waited for in short slices so that Stop() is not held up.
  int64_t waited_us = 0;
  while (!stopping_.load()) {
    const auto deadline =
        std::chrono::system_clock::now() + std::chrono::microseconds(kConnectSliceUs);
    if ((*channel)->WaitForConnected(deadline)) break;
    waited_us += kConnectSliceUs;
    if (waited_us % settings_.connect_retry_interval_us < kConnectSliceUs) {
      util::Log().warn("xds: cannot connect to {} yet", settings_.server_url);
    }
  }
  grpc::ClientContext context;
  for (const auto& [name, value] : settings_.headers) context.AddMetadata(name, value);
  std::string version, nonce;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_.load()) return false;
    context_ = &context;
    version = acked_version_;
    nonce = acked_nonce_;
  }
  auto stub = discovery::AggregatedDiscoveryService::NewStub(*channel);
  auto stream = stub->StreamAggregatedResources(&context);
  streams_.fetch_add(1);
  bool got_response = false;
  // The first request subscribes, resuming from the last version ACKed.
  if (stream->Write(Request(settings_, version, nonce))) {
    connected_.store(true);
    util::Log().info("xds: stream open to {} (version '{}')", settings_.server_url, version);
    discovery::DiscoveryResponse response;
    while (stream->Read(&response)) {
      got_response = true;
      const auto received = std::chrono::steady_clock::now();
      std::vector<std::string> errors;
      if (response.type_url() != kRateLimitConfigType) {
        errors.push_back(fmt::format("type {} was not asked for", response.type_url()));
      } else if (auto domains = RemoteDomainsOf(response); !domains.ok()) {
        errors.emplace_back(domains.status().message());
      } else {
        for (const rules::ConfigError& e : rules_->Apply(*std::move(domains)).errors) {
          errors.push_back(e.ToString());
        }
      }
      discovery::DiscoveryRequest reply;
      if (errors.empty()) {
        applied_.fetch_add(1);
        absl::MutexLock lock(&mu_);
        acked_version_ = response.version_info();
        acked_nonce_ = response.nonce();
        reply = Request(settings_, acked_version_, acked_nonce_);
        const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::steady_clock::now() - received);
        util::Log().info("xds: version '{}' applied ({} rule sets) in {:.1f} ms", acked_version_,
                         response.resources_size(), static_cast<double>(took.count()) / 1000);
      } else {
        rejected_.fetch_add(1);
        const std::string detail = JoinErrors(errors);
        util::Log().error("xds: version '{}' rejected: {}", response.version_info(), detail);
        absl::MutexLock lock(&mu_);
        reply = Request(settings_, acked_version_, response.nonce());
        reply.mutable_error_detail()->set_code(kInvalidArgument);
        reply.mutable_error_detail()->set_message(detail);
      }
      if (!stream->Write(reply)) break;
    }
  }
  connected_.store(false);
  const grpc::Status status = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }
  if (!stopping_.load()) {
    util::Log().warn("xds: stream to {} ended: {} {}", settings_.server_url,
                     static_cast<int>(status.error_code()), status.error_message());
  }
  return got_response;
}

absl::Status XdsClient::RegisterMetrics(metrics::Registry& registry) {
  if (auto s = registry.AddCallbackGauge("sluice_xds_connected",
                                         "1 while the xDS stream to the management server is open.",
                                         [this] { return connected_.load() ? 1.0 : 0.0; });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallbackCounter("sluice_xds_streams_total",
                                           "xDS streams opened to the management server.",
                                           [this] { return static_cast<double>(streams_.load()); });
      !s.ok()) {
    return s;
  }
  if (auto s = registry.AddCallback(
          {.name = "sluice_xds_updates_total",
           .help = "Rule sets received over xDS, by result: applied (ACKed) or rejected (NACKed; "
                   "the rules in force stay).",
           .label_names = {"result"}},
          metrics::MetricType::kCounter,
          [this] {
            return std::vector<metrics::CallbackSample>{
                {{"applied"}, static_cast<double>(applied_.load())},
                {{"rejected"}, static_cast<double>(rejected_.load())}};
          });
      !s.ok()) {
    return s;
  }
  return registry.AddCallback(
      {.name = "sluice_xds_config_version_info",
       .help = "The version of the last rule set applied over xDS, as a label (value 1).",
       .label_names = {"version"}},
      metrics::MetricType::kGauge, [this] {
        std::vector<metrics::CallbackSample> out;
        const std::string version = stats().version;
        if (!version.empty()) out.push_back({{version}, 1.0});
        return out;
      });
}

}  // namespace sluice::xds
