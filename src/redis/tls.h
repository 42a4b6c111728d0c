// TLS to Redis (rediss:// URLs): what to trust and how to present sluice, and the OpenSSL context
// a client makes of it once for all its connections (one per node and more for a cluster).
//
// The server's certificate is always verified: its chain up to a trusted CA (TlsOptions::ca_file,
// or the system's store) and its dates; and, unless TlsOptions::verify_hostname is false, the
// name the connection asked for (TlsOptions::server_name, else the endpoint's host: a DNS name
// against the certificate's DNS names, an IP address against its IP addresses). The name also
// goes in SNI (not an IP address, which SNI may not carry). TLS 1.2 at least.
//
// This header names no OpenSSL or Asio type: the context is defined in tls_stream.h, for the
// connections (connection.cc) only.
//
// Thread safety: a TlsContext is immutable once made and may be shared by connections on any
// threads.

#ifndef SLUICE_REDIS_TLS_H_
#define SLUICE_REDIS_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace sluice::redis {

struct TlsOptions {
  // PEM file of the CA certificates that may sign the server's; empty: the system's store.
  std::string ca_file;
  // Mutual TLS: the client's certificate (PEM; intermediates after it) and its private key (PEM,
  // unencrypted). Both or neither.
  std::string cert_file;
  std::string key_file;
  // The name sent as SNI and checked against the server's certificate; empty: each endpoint's
  // host (for a cluster, the name or address each node is announced by).
  std::string server_name;
  // false: the chain and the dates are still verified, the name is not (a certificate made for
  // another name, as some managed Redis services give).
  bool verify_hostname = true;
};

class TlsContext;  // the OpenSSL context of TlsOptions (tls_stream.h)

// The context of `options`, with its files read and checked. InvalidArgument naming the file
// and the cause when a file cannot be read or holds no usable certificate or key, when the key
// is not the certificate's, or when only one of cert_file and key_file is given; then `field`,
// when given, is set to the option at fault ("ca_file", "cert_file", "key_file").
absl::StatusOr<std::shared_ptr<const TlsContext>> MakeTlsContext(const TlsOptions& options,
                                                                 std::string* field = nullptr);

}  // namespace sluice::redis

#endif  // SLUICE_REDIS_TLS_H_
