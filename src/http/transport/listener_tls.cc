#include "http/transport/listener_tls.h"

#include <openssl/asn1.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "util/pem_file.h"

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

// OpenSSL's reason alone, without the library's name that Asio's message adds.
std::string Reason(const boost::system::error_code& ec) {
  if (ec.category() == asio::error::get_ssl_category()) {
    if (const char* reason = ERR_reason_error_string(static_cast<unsigned long>(ec.value()))) {
      return reason;
    }
  }
  return ec.message();
}

// The first certificate's notAfter (seconds since the epoch), or 0.
int64_t NotAfter(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return 0;
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) {
    ERR_clear_error();
    return 0;
  }
  int64_t seconds = 0;
  struct tm when {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &when) == 1) seconds = timegm(&when);
  X509_free(cert);
  return seconds;
}

// What identifies a file's version: the file the path leads to now, its size and modification
// time (or that it is missing).
std::string FileFingerprint(const std::string& path) {
  if (path.empty()) return "-";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fmt::format("missing:{}", errno);
  return fmt::format("{}:{}:{}:{}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec);
}

}  // namespace

absl::StatusOr<ListenerTls::Loaded> ListenerTls::Make(const ListenerTlsFiles& files,
                                                      std::string* field) {
  std::string unused;
  std::string& at = field != nullptr ? *field : unused;
  const auto refuse = [&](const char* option, const std::string& message) {
    at = option;
    return absl::InvalidArgumentError(message);
  };
  Loaded loaded;
  auto cert = util::ReadPemFile(files.cert_file, "certificate");
  if (!cert.ok()) return refuse("cert_file", std::string(cert.status().message()));
  auto key = util::ReadPemFile(files.key_file, "key");
  if (!key.ok()) return refuse("key_file", std::string(key.status().message()));
  loaded.pem.cert = *std::move(cert);
  loaded.pem.key = *std::move(key);
  if (!files.client_ca_file.empty()) {
    auto ca = util::ReadPemFile(files.client_ca_file, "client CA file");
    if (!ca.ok()) return refuse("client_ca_file", std::string(ca.status().message()));
    loaded.pem.client_ca = *std::move(ca);
  }

  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  context->set_options(ssl::context::default_workarounds | ssl::context::single_dh_use);
  // The key first: OpenSSL would refuse a key that does not match the certificate in its own
  // words ("key values mismatch"), while a certificate that does not match the key only drops
  // the key, which the check below names.
  boost::system::error_code ec;
  context->use_private_key(asio::buffer(loaded.pem.key), ssl::context::pem, ec);
  if (ec) {
    return refuse("key_file", fmt::format("TLS key {}: not a private key (PEM, unencrypted): {}",
                                          files.key_file, Reason(ec)));
  }
  context->use_certificate_chain(asio::buffer(loaded.pem.cert), ec);
  if (ec) {
    return refuse("cert_file", fmt::format("TLS certificate {}: not a certificate (PEM): {}",
                                           files.cert_file, Reason(ec)));
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    ERR_clear_error();
    return refuse("key_file", fmt::format("TLS key {} is not the key of the certificate {}",
                                          files.key_file, files.cert_file));
  }
  if (!files.client_ca_file.empty()) {
    context->add_certificate_authority(asio::buffer(loaded.pem.client_ca), ec);
    if (ec) {
      return refuse("client_ca_file",
                    fmt::format("TLS client CA file {}: no CA certificate in it (PEM): {}",
                                files.client_ca_file, Reason(ec)));
    }
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    // Resumed sessions are checked against this (OpenSSL refuses them without one).
    static constexpr unsigned char kSessionContext[] = "sluice";
    SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
  }
  loaded.not_after = NotAfter(loaded.pem.cert);
  loaded.context = std::move(context);
  return loaded;
}

ListenerTls::ListenerTls(ListenerTlsFiles files, Loaded loaded, std::string fingerprint)
    : files_(std::move(files)),
      current_(std::move(loaded)),
      loaded_fingerprint_(fingerprint),
      seen_fingerprint_(std::move(fingerprint)) {}

absl::StatusOr<std::shared_ptr<ListenerTls>> ListenerTls::Load(ListenerTlsFiles files,
                                                               std::string* field) {
  const std::string fingerprint = FileFingerprint(files.cert_file) + " " +
                                  FileFingerprint(files.key_file) + " " +
                                  FileFingerprint(files.client_ca_file);
  auto loaded = Make(files, field);
  if (!loaded.ok()) return loaded.status();
  return std::shared_ptr<ListenerTls>(
      new ListenerTls(std::move(files), *std::move(loaded), fingerprint));
}

std::string ListenerTls::Fingerprint() const {
  return FileFingerprint(files_.cert_file) + " " + FileFingerprint(files_.key_file) + " " +
         FileFingerprint(files_.client_ca_file);
}

std::shared_ptr<boost::asio::ssl::context> ListenerTls::context() const {
  absl::MutexLock lock(&mu_);
  return current_.context;
}

ListenerTls::Pem ListenerTls::pem() const {
  absl::MutexLock lock(&mu_);
  return current_.pem;
}

int64_t ListenerTls::not_after() const {
  absl::MutexLock lock(&mu_);
  return current_.not_after;
}

ListenerTls::Reload ListenerTls::ReloadIfChanged(bool force) {
  absl::MutexLock reload_lock(&reload_mu_);
  const std::string now = Fingerprint();
  const bool settled = now == seen_fingerprint_;
  seen_fingerprint_ = now;
  if (!force && (now == loaded_fingerprint_ || !settled || now == failed_fingerprint_)) {
    return {};
  }
  auto loaded = Make(files_, nullptr);
  if (!loaded.ok()) {
    failed_fingerprint_ = now;
    return {.outcome = Outcome::kFailed, .error = std::string(loaded.status().message())};
  }
  loaded_fingerprint_ = now;
  failed_fingerprint_.clear();
  {
    absl::MutexLock lock(&mu_);
    current_ = *std::move(loaded);
  }
  return {.outcome = Outcome::kApplied, .error = {}};
}

TlsWatcher::TlsWatcher(std::chrono::milliseconds poll, Report report)
    : poll_(poll), report_(std::move(report)) {}

TlsWatcher::~TlsWatcher() { Stop(); }

void TlsWatcher::Add(std::string listener, std::shared_ptr<ListenerTls> tls) {
  entries_.push_back({std::move(listener), std::move(tls)});
}

void TlsWatcher::Start() {
  if (entries_.empty() || thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void TlsWatcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TlsWatcher::Loop() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(poll_))) {
    const bool force = forced_.exchange(false, std::memory_order_relaxed);
    mu_.Unlock();
    for (const Entry& e : entries_) {
      const ListenerTls::Reload reload = e.tls->ReloadIfChanged(force);
      if (reload.outcome != ListenerTls::Outcome::kUnchanged && report_) {
        report_(e.listener, *e.tls, reload);
      }
    }
    mu_.Lock();
  }
}

}  // namespace sluice::http
