#include "cli/serve_tls.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "util/log.h"

namespace sluice::cli {
namespace {

// A listener's TLS settings and its name in the settings file.
struct Block {
  const char* name;  // "http", "admin", "grpc"
  const rules::ListenerTlsSettings* tls;
};

std::vector<Block> Blocks(const rules::Settings& settings, bool grpc_on) {
  std::vector<Block> blocks;
  if (settings.http_tls) blocks.push_back({"http", &*settings.http_tls});
  if (settings.admin_tls) blocks.push_back({"admin", &*settings.admin_tls});
  if (settings.grpc_tls && grpc_on) blocks.push_back({"grpc", &*settings.grpc_tls});
  return blocks;
}

// The block's certificates, or the configuration error that refuses them.
absl::StatusOr<std::shared_ptr<http::ListenerTls>> LoadBlock(const Block& block,
                                                             rules::ConfigError* error) {
  const rules::ListenerTlsSettings& t = *block.tls;
  std::string field;
  auto loaded = http::ListenerTls::Load(
      {.cert_file = t.cert_file, .key_file = t.key_file, .client_ca_file = t.client_ca_file},
      &field);
  if (loaded.ok()) return loaded;
  error->position = field == "cert_file"        ? t.cert_file_at
                    : field == "key_file"       ? t.key_file_at
                    : field == "client_ca_file" ? t.client_ca_file_at
                                                : t.at;
  error->message = fmt::format("{}.tls: {}", block.name, std::string(loaded.status().message()));
  return loaded.status();
}

bool GrpcOn(const rules::Settings& settings) {
  return !settings.grpc_listen.empty() && settings.grpc_listen != "0";
}

// Writes `bytes` to `path` through a temporary file renamed over it, readable by this user only.
absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  const std::string temp = path + ".new";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(fmt::format("cannot write {}: {}", temp, std::strerror(errno)));
  }
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      return absl::InternalError(fmt::format("cannot write {}: {}", temp, std::strerror(saved)));
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || std::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcTlsCopies>> GrpcTlsCopies::Create(bool mutual) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string pattern = (base / "sluice-grpc-tls.XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        fmt::format("grpc.tls: cannot make a directory for gRPC's copy of "
                    "the certificates ({}): {}",
                    pattern, std::strerror(errno)));
  }
  return std::unique_ptr<GrpcTlsCopies>(new GrpcTlsCopies(std::move(pattern), mutual));
}

// The key and the certificate chain share one file (OpenSSL's PEM readers pass over the blocks
// of the other kind), so that one rename replaces both: gRPC, which reads the two paths one after
// the other, can never see a new key with an old certificate.
GrpcTlsCopies::GrpcTlsCopies(std::string dir, bool mutual) : dir_(std::move(dir)) {
  files_.cert_file = dir_ + "/identity.pem";
  files_.key_file = files_.cert_file;
  if (mutual) files_.client_ca_file = dir_ + "/client-ca.pem";
}

GrpcTlsCopies::~GrpcTlsCopies() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::Status GrpcTlsCopies::Write(const http::ListenerTls::Pem& pem) {
  std::string identity = pem.key;
  if (!identity.empty() && identity.back() != '\n') identity += '\n';
  identity += pem.cert;
  if (auto s = WriteFile(files_.cert_file, identity); !s.ok()) return s;
  if (!files_.client_ca_file.empty()) return WriteFile(files_.client_ca_file, pem.client_ca);
  return absl::OkStatus();
}

ServeTls::ServeTls()
    : watcher_(
          std::chrono::milliseconds(250),
          [this](const std::string& listener, const http::ListenerTls& tls,
                 const http::ListenerTls::Reload& reload) { Reported(listener, tls, reload); }) {}

ServeTls::~ServeTls() { watcher_.Stop(); }

absl::StatusOr<std::unique_ptr<ServeTls>> ServeTls::Load(const rules::Settings& settings,
                                                         bool grpc_on) {
  std::unique_ptr<ServeTls> tls(new ServeTls());
  for (const Block& block : Blocks(settings, grpc_on)) {
    rules::ConfigError error;
    auto loaded = LoadBlock(block, &error);
    if (!loaded.ok()) {
      // (Settings not from a file, --envoy-env's, have no place to name.)
      return absl::InvalidArgumentError(error.position.file.empty() ? error.message
                                                                    : error.ToString());
    }
    const std::string name = block.name;
    (name == "http" ? tls->data_ : name == "admin" ? tls->admin_ : tls->grpc_) = *loaded;
    tls->watcher_.Add(name == "http" ? "data" : name, *std::move(loaded));
  }
  if (tls->grpc_) {
    auto copies = GrpcTlsCopies::Create(tls->grpc_->mutual());
    if (!copies.ok()) return copies.status();
    if (auto s = (*copies)->Write(tls->grpc_->pem()); !s.ok()) return s;
    tls->grpc_copies_ = *std::move(copies);
  }
  return tls;
}

std::optional<rls::GrpcServer::Options::Tls> ServeTls::grpc_files() const {
  if (!grpc_copies_) return std::nullopt;
  return grpc_copies_->files();
}

void ServeTls::StartWatching() { watcher_.Start(); }

void ServeTls::Reported(const std::string& listener, const http::ListenerTls& tls,
                        const http::ListenerTls::Reload& reload) {
  Counts& counts = listener == "data"    ? data_counts_
                   : listener == "admin" ? admin_counts_
                                         : grpc_counts_;
  if (reload.outcome == http::ListenerTls::Outcome::kFailed) {
    counts.failures.fetch_add(1, std::memory_order_relaxed);
    util::Log().error("tls: {} listener: new certificate not used, keeping the current one: {}",
                      listener, reload.error);
    return;
  }
  if (listener == "grpc" && grpc_copies_) {
    if (auto s = grpc_copies_->Write(tls.pem()); !s.ok()) {
      counts.failures.fetch_add(1, std::memory_order_relaxed);
      util::Log().error("tls: grpc listener: new certificate not passed on to gRPC: {}",
                        std::string(s.message()));
      return;
    }
  }
  counts.successes.fetch_add(1, std::memory_order_relaxed);
  util::Log().info("tls: {} listener: certificate reloaded from {}", listener,
                   tls.files().cert_file);
}

absl::Status ServeTls::RegisterMetrics(metrics::Registry& registry) {
  struct Listener {
    const char* name;
    const std::shared_ptr<http::ListenerTls>* tls;
    const Counts* counts;
  };
  const std::vector<Listener> listeners = {{"data", &data_, &data_counts_},
                                           {"admin", &admin_, &admin_counts_},
                                           {"grpc", &grpc_, &grpc_counts_}};
  if (absl::Status s = registry.AddCallback(
          {.name = "sluice_tls_reloads_total",
           .help = "Certificate reloads of a TLS listener (files changed, or SIGHUP), by result; "
                   "a failure keeps the certificate in use.",
           .label_names = {"listener", "result"}},
          metrics::MetricType::kCounter,
          [listeners] {
            std::vector<metrics::CallbackSample> out;
            for (const Listener& l : listeners) {
              if (*l.tls == nullptr) continue;
              out.push_back({{l.name, "failure"}, static_cast<double>(l.counts->failures.load())});
              out.push_back({{l.name, "success"}, static_cast<double>(l.counts->successes.load())});
            }
            return out;
          });
      !s.ok()) {
    return s;
  }
  return registry.AddCallback(
      {.name = "sluice_tls_certificate_expiry_timestamp_seconds",
       .help = "When the certificate a TLS listener serves expires (its notAfter), in seconds "
               "since the epoch.",
       .label_names = {"listener"}},
      metrics::MetricType::kGauge, [listeners] {
        std::vector<metrics::CallbackSample> out;
        for (const Listener& l : listeners) {
          if (*l.tls == nullptr) continue;
          out.push_back({{l.name}, static_cast<double>((*l.tls)->not_after())});
        }
        return out;
      });
}

std::vector<rules::ConfigError> CheckListenerTls(const rules::Settings& settings) {
  std::vector<rules::ConfigError> errors;
  for (const Block& block : Blocks(settings, GrpcOn(settings))) {
    rules::ConfigError error;
    if (!LoadBlock(block, &error).ok()) errors.push_back(std::move(error));
  }
  return errors;
}

}  // namespace sluice::cli
