// TLS on a listener: the server's certificate chain and key and, for mutual TLS, the CAs that
// must have signed each client's certificate (a client without one is then refused), read from
// PEM files into an OpenSSL context for new connections; and the watcher that reads the files
// again when they change (by path: a symlink swap, as Kubernetes and cert-manager rotate
// secrets, counts) or when asked (SIGHUP), and keeps the old context when the new files cannot
// be used. TLS 1.2 at least.
//
// Thread safety: ListenerTls and TlsWatcher are safe for concurrent use. A connection keeps the
// context it started with; only new connections see a new one.

#ifndef SLUICE_HTTP_TRANSPORT_LISTENER_TLS_H_
#define SLUICE_HTTP_TRANSPORT_LISTENER_TLS_H_

#include <atomic>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace sluice::http {

struct ListenerTlsFiles {
  std::string cert_file;            // the server's certificate, then its intermediates (PEM)
  std::string key_file;             // its private key (PEM, unencrypted)
  std::string client_ca_file = {};  // mutual TLS: the clients' CAs (PEM); empty: none asked for
};

class ListenerTls {
 public:
  // The files' bytes as read and checked (what a context was made of).
  struct Pem {
    std::string cert, key, client_ca;
  };
  enum class Outcome { kUnchanged, kApplied, kFailed };
  struct Reload {
    Outcome outcome = Outcome::kUnchanged;
    std::string error;  // kFailed: the file and the cause
  };

  // Reads and checks the files. InvalidArgument naming the file and the cause when one cannot
  // be read or holds no usable certificate or key, or when the key is not the certificate's;
  // then `field`, when given, is set to the one at fault ("cert_file", "key_file",
  // "client_ca_file").
  static absl::StatusOr<std::shared_ptr<ListenerTls>> Load(ListenerTlsFiles files,
                                                           std::string* field = nullptr);

  // The context for a new connection.
  std::shared_ptr<boost::asio::ssl::context> context() const;
  Pem pem() const;
  const ListenerTlsFiles& files() const { return files_; }
  bool mutual() const { return !files_.client_ca_file.empty(); }
  // The served certificate's notAfter, in seconds since the epoch.
  int64_t not_after() const;

  // Reads the files again, if they changed (by path, size, modification time) since the last
  // look and have not changed since the look before (a rotation that writes the files one by
  // one is taken once it is complete), or always with `force`. A failure keeps the current
  // context and is reported once per set of files.
  Reload ReloadIfChanged(bool force);

 private:
  struct Loaded {
    std::shared_ptr<boost::asio::ssl::context> context;
    Pem pem;
    int64_t not_after = 0;
  };
  ListenerTls(ListenerTlsFiles files, Loaded loaded, std::string fingerprint);
  static absl::StatusOr<Loaded> Make(const ListenerTlsFiles& files, std::string* field);
  std::string Fingerprint() const;

  const ListenerTlsFiles files_;
  mutable absl::Mutex mu_;
  Loaded current_ ABSL_GUARDED_BY(mu_);
  // Used by ReloadIfChanged only (one caller at a time: reload_mu_).
  absl::Mutex reload_mu_;
  std::string loaded_fingerprint_;  // the files' when current_ was read
  std::string seen_fingerprint_;    // at the last look
  std::string failed_fingerprint_;  // of the last files that failed
};

// Polls the listeners' files every `poll` (and at once when triggered) and reloads what
// changed; tells `report` of each reload that applied or failed, from its own thread.
class TlsWatcher {
 public:
  using Report = std::function<void(const std::string& listener, const ListenerTls& tls,
                                    const ListenerTls::Reload& reload)>;
  TlsWatcher(std::chrono::milliseconds poll, Report report);
  ~TlsWatcher();  // stops
  TlsWatcher(const TlsWatcher&) = delete;
  TlsWatcher& operator=(const TlsWatcher&) = delete;

  // Before Start.
  void Add(std::string listener, std::shared_ptr<ListenerTls> tls);
  bool empty() const { return entries_.empty(); }
  void Start();
  void Stop();
  // Rereads every listener's files at the next poll, changed or not. Async-signal-safe.
  void TriggerReload() { forced_.store(true, std::memory_order_relaxed); }

 private:
  struct Entry {
    std::string listener;
    std::shared_ptr<ListenerTls> tls;
  };
  void Loop();

  const std::chrono::milliseconds poll_;
  const Report report_;
  std::vector<Entry> entries_;
  std::atomic<bool> forced_{false};
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_TRANSPORT_LISTENER_TLS_H_
