// TLS to Redis: the context of a client's connections and their errors in words (tls.h,
// tls_stream.h).

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "redis/tls_stream.h"

namespace sluice::redis {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

// OpenSSL's reason alone ("no certificate or crl found"), without the library's name that
// Asio's message adds.
std::string Reason(const boost::system::error_code& ec) {
  if (ec.category() == asio::error::get_ssl_category()) {
    if (const char* reason = ERR_reason_error_string(static_cast<unsigned long>(ec.value()))) {
      return reason;
    }
  }
  return ec.message();
}

// OK if `path` can be opened for reading; else why not, naming it as `what`.
absl::Status Readable(const std::string& path, std::string_view what) {
  std::error_code fs_ec;
  if (std::filesystem::is_directory(path, fs_ec)) {
    return absl::InvalidArgumentError(
        fmt::format("TLS {} {}: is a directory, not a PEM file", what, path));
  }
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        fmt::format("TLS {} {}: cannot read it: {}", what, path, std::strerror(errno)));
  }
  return absl::OkStatus();
}

// A refusal the server sends about the client's certificate, as an alert.
bool IsClientCertificateAlert(int reason) {
  switch (reason) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
      return true;
    default:
      return false;
  }
}

}  // namespace

TlsContext::TlsContext(TlsOptions options)
    : options_(std::move(options)), context_(ssl::context::tls_client) {
  SSL_CTX_set_min_proto_version(context_.native_handle(), TLS1_2_VERSION);
  context_.set_verify_mode(ssl::verify_peer);
}

absl::StatusOr<std::shared_ptr<const TlsContext>> MakeTlsContext(const TlsOptions& options,
                                                                 std::string* field) {
  std::string unused;
  std::string& at = field != nullptr ? *field : unused;
  const auto refuse = [&](const char* option, const std::string& message) {
    at = option;
    return absl::InvalidArgumentError(message);
  };
  if (options.cert_file.empty() != options.key_file.empty()) {
    return options.key_file.empty()
               ? refuse("cert_file",
                        fmt::format("TLS client certificate {} without its key", options.cert_file))
               : refuse("key_file",
                        fmt::format("TLS client key {} without its certificate", options.key_file));
  }
  auto context = std::make_shared<TlsContext>(options);
  ssl::context& native = context->native();
  boost::system::error_code ec;
  if (options.ca_file.empty()) {
    native.set_default_verify_paths(ec);
    if (ec) {
      return refuse("ca_file",
                    fmt::format("TLS: cannot use the system's CA certificates: {}", Reason(ec)));
    }
  } else {
    if (auto s = Readable(options.ca_file, "CA file"); !s.ok()) {
      return refuse("ca_file", std::string(s.message()));
    }
    native.load_verify_file(options.ca_file, ec);
    if (ec) {
      return refuse("ca_file", fmt::format("TLS CA file {}: no CA certificate in it (PEM): {}",
                                           options.ca_file, Reason(ec)));
    }
  }
  if (!options.cert_file.empty()) {
    if (auto s = Readable(options.cert_file, "client certificate"); !s.ok()) {
      return refuse("cert_file", std::string(s.message()));
    }
    native.use_certificate_chain_file(options.cert_file, ec);
    if (ec) {
      return refuse("cert_file", fmt::format("TLS client certificate {}: not a certificate "
                                             "(PEM): {}",
                                             options.cert_file, Reason(ec)));
    }
    if (auto s = Readable(options.key_file, "client key"); !s.ok()) {
      return refuse("key_file", std::string(s.message()));
    }
    native.use_private_key_file(options.key_file, ssl::context::pem, ec);
    if (ec) {
      return refuse("key_file",
                    fmt::format("TLS client key {}: not the private key (PEM, unencrypted) of "
                                "{}: {}",
                                options.key_file, options.cert_file, Reason(ec)));
    }
    if (SSL_CTX_check_private_key(native.native_handle()) != 1) {
      ERR_clear_error();
      return refuse("key_file", fmt::format("TLS client key {} is not the key of {}",
                                            options.key_file, options.cert_file));
    }
  }
  return std::shared_ptr<const TlsContext>(std::move(context));
}

void PrepareTlsStream(TlsStream& stream, const TlsContext& context, const std::string& host) {
  const TlsOptions& o = context.options();
  const std::string& name = o.server_name.empty() ? host : o.server_name;
  SSL* ssl = stream.native_handle();
  boost::system::error_code not_ip;
  asio::ip::make_address(name, not_ip);
  // SNI carries host names only (RFC 6066).
  if (not_ip) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (!o.verify_hostname || name.empty()) return;
  // OpenSSL checks the name while it verifies the chain, so that a mismatch is its verification
  // result ("hostname mismatch", "IP address mismatch") like any other refusal.
  if (not_ip) {
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    SSL_set1_host(ssl, name.c_str());
  } else {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
  }
}

std::string TlsHandshakeError(const boost::system::error_code& ec, TlsStream& stream) {
  const long verified = SSL_get_verify_result(stream.native_handle());
  if (verified != X509_V_OK) {
    return fmt::format("certificate verify failed: {}", X509_verify_cert_error_string(verified));
  }
  return TlsIoError(ec);
}

std::string TlsIoError(const boost::system::error_code& ec) {
  if (ec == asio::error::eof || ec == ssl::error::stream_truncated) return "closed by the server";
  if (ec.category() == asio::error::get_ssl_category()) {
    const auto code = static_cast<unsigned long>(ec.value());
    std::string reason = Reason(ec);
    if (ERR_GET_LIB(code) == ERR_LIB_SSL && IsClientCertificateAlert(ERR_GET_REASON(code))) {
      return fmt::format("the server refused the client's certificate (mutual TLS): {}", reason);
    }
    return reason;
  }
  return ec.message();
}

}  // namespace sluice::redis
