// TLS on serve's listeners (the settings' http.tls, admin.tls and grpc.tls): their certificates
// loaded at start (files that cannot be used refused, named with their place in the settings
// file), the same check for check-config, and what keeps them current: a TlsWatcher that
// reloads them when their files change and on SIGHUP, keeping the old ones when the new cannot be
// used (logged, and counted in sluice_tls_reloads_total{result="failure"}).
//
// gRPC reads its certificates from files itself (rls::GrpcServer::Options::tls); it is given
// copies that serve writes only from certificates that loaded here, so that a bad new
// certificate never reaches it either.

#ifndef SLUICE_CLI_SERVE_TLS_H_
#define SLUICE_CLI_SERVE_TLS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "http/transport/listener_tls.h"
#include "metrics/registry.h"
#include "rls/grpc_server.h"
#include "rules/config.h"
#include "rules/loader.h"

namespace sluice::cli {

// gRPC's copies of the certificates, in a private temporary directory removed with the object.
class GrpcTlsCopies {
 public:
  static absl::StatusOr<std::unique_ptr<GrpcTlsCopies>> Create(bool mutual);
  ~GrpcTlsCopies();
  // Replaces the copies with `pem`, each file by an atomic rename (the key and the certificate
  // together, in one file).
  absl::Status Write(const http::ListenerTls::Pem& pem);
  const rls::GrpcServer::Options::Tls& files() const { return files_; }

 private:
  explicit GrpcTlsCopies(std::string dir, bool mutual);
  const std::string dir_;
  rls::GrpcServer::Options::Tls files_;
};

class ServeTls {
 public:
  // Loads the TLS of the listeners the settings give one to (grpc.tls only when `grpc_on`).
  // Errors: InvalidArgument naming the file, the cause and its place in the settings file.
  static absl::StatusOr<std::unique_ptr<ServeTls>> Load(const rules::Settings& settings,
                                                        bool grpc_on);
  ~ServeTls();  // stops watching

  const std::shared_ptr<http::ListenerTls>& data() const { return data_; }
  const std::shared_ptr<http::ListenerTls>& admin() const { return admin_; }
  // gRPC's files, when grpc.tls is set.
  std::optional<rls::GrpcServer::Options::Tls> grpc_files() const;

  // sluice_tls_reloads_total{listener,result} and sluice_tls_certificate_expiry_timestamp_seconds
  // {listener}.
  absl::Status RegisterMetrics(metrics::Registry& registry);
  // Polls the files (every 250 ms) from now on.
  void StartWatching();
  // Rereads every certificate at the watcher's next poll. Async-signal-safe.
  void TriggerReload() { watcher_.TriggerReload(); }

 private:
  ServeTls();
  void Reported(const std::string& listener, const http::ListenerTls& tls,
                const http::ListenerTls::Reload& reload);

  struct Counts {
    std::atomic<uint64_t> successes{0}, failures{0};
  };
  std::shared_ptr<http::ListenerTls> data_, admin_, grpc_;
  std::unique_ptr<GrpcTlsCopies> grpc_copies_;
  Counts data_counts_, admin_counts_, grpc_counts_;
  http::TlsWatcher watcher_;
};

// What ServeTls::Load would refuse, as configuration errors (for check-config); gRPC's when its
// port is on in the settings (grpc.listen not empty or "0").
std::vector<rules::ConfigError> CheckListenerTls(const rules::Settings& settings);

}  // namespace sluice::cli

#endif  // SLUICE_CLI_SERVE_TLS_H_
