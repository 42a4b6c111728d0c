// Certificates for TLS tests, made at construction by the `openssl` command (OpenSSL 3) in a
// temp dir of their own: a CA and, signed by it, a server certificate for localhost and
// 127.0.0.1 and a client certificate (mutual TLS); and the wrong ones: another CA, a server
// certificate that has expired, and one for another name (elsewhere.test). EC P-256 keys,
// unencrypted PEM. RedisArgs gives a redis-server the arguments to serve TLS alone with them.
// Header-only; the files are removed with the object.

#ifndef SLUICE_TESTS_SUPPORT_TLS_CERTS_H_
#define SLUICE_TESTS_SUPPORT_TLS_CERTS_H_

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace sluice::testing {

class TlsCerts {
 public:
  TlsCerts() {
    // One shell script: the CAs, then each leaf from a request signed by the CA (`-days -1`
    // makes one whose validity ended a day before it began: expired from the start).
    const std::string d = dir_.Path("");
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    std::string script = "set -e; cd '" + d + "'\n";
    for (const char* ca : {"ca", "other-ca"}) {
      script += "openssl req -x509 " + key + " -keyout " + ca + ".key -out " + ca +
                ".pem -days 30 -subj /CN=sluice-test-" + ca +
                " -addext basicConstraints=critical,CA:TRUE"
                " -addext keyUsage=critical,keyCertSign,cRLSign\n";
    }
    const auto leaf = [&](const std::string& name, const std::string& cn, const std::string& san,
                          int days) {
      script += "printf '" + (san.empty() ? std::string() : "subjectAltName=" + san) + "\\n' >" +
                name + ".ext\n";
      script += "openssl req " + key + " -keyout " + name + ".key -out " + name +
                ".csr -subj /CN=" + cn + "\n";
      script += "openssl x509 -req -in " + name + ".csr -CA ca.pem -CAkey ca.key -CAcreateserial" +
                " -days " + std::to_string(days) + " -extfile " + name + ".ext -out " + name +
                ".pem\n";
    };
    leaf("server", "localhost", "DNS:localhost,IP:127.0.0.1", 30);
    leaf("client", "sluice-test-client", "", 30);
    leaf("expired", "localhost", "DNS:localhost,IP:127.0.0.1", -1);
    leaf("elsewhere", "elsewhere.test", "DNS:elsewhere.test", 30);
    // The expired one must say so, or the test that uses it would test nothing.
    script += "! openssl x509 -in expired.pem -noout -checkend 0 >/dev/null\n";
    dir_.Write("make.sh", script);
    const std::string run =
        "bash '" + dir_.Path("make.sh") + "' >'" + dir_.Path("make.log") + "' 2>&1";
    ok_ = !d.empty() && std::system(run.c_str()) == 0;
  }

  // Whether every file was made (else make_log() says why).
  bool ok() const { return ok_; }
  std::string make_log() const { return dir_.Path("make.log"); }

  // PEM files by name: "ca", "other-ca", "server", "client", "expired", "elsewhere".
  std::string Cert(const std::string& name) const { return dir_.Path(name + ".pem"); }
  std::string Key(const std::string& name) const { return dir_.Path(name + ".key"); }
  std::string ca() const { return Cert("ca"); }

  // redis-server arguments: TLS alone on `port` (no plain port) with the certificate `server`
  // ("server", "expired", "elsewhere"), clients verified by the CA and, when `auth_clients`,
  // required to show a certificate. For a cluster node, `cluster` adds TLS on its bus too.
  std::vector<std::string> RedisArgs(int port, const std::string& server = "server",
                                     bool auth_clients = true, bool cluster = false) const {
    std::vector<std::string> args = {"--port",
                                     "0",
                                     "--tls-port",
                                     std::to_string(port),
                                     "--tls-cert-file",
                                     Cert(server),
                                     "--tls-key-file",
                                     Key(server),
                                     "--tls-ca-cert-file",
                                     ca(),
                                     "--tls-auth-clients",
                                     auth_clients ? "yes" : "no"};
    if (cluster) {
      args.insert(args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
    }
    return args;
  }

  // redis-cli's arguments to reach such a server with the client certificate.
  std::string RedisCliArgs() const {
    return "--tls --cacert '" + ca() + "' --cert '" + Cert("client") + "' --key '" + Key("client") +
           "'";
  }

 private:
  TempDir dir_;
  bool ok_ = false;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_TLS_CERTS_H_
