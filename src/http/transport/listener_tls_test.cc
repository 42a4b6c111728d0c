// TLS on a listener: the files refused with the one at fault named; a reload that takes settled
// changes only and keeps the context in use when the new files cannot be used; and HttpServer
// over TLS: keep-alive requests answered to a client with a certificate, refused without one,
// and a new connection after a reload served the new certificate while an open one goes on; a
// silent TLS connection is idle (the first closed for room at the cap).

#include "http/transport/listener_tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "http/transport/server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tls_certs.h"

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using ::testing::HasSubstr;

// Puts a copy of `from` at `to` by a rename, as a secret's update replaces a file.
void Replace(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to + ".new", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(to + ".new", to);
}

class ListenerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok()) << certs_.make_log();
    Replace(certs_.Cert("server"), cert_);
    Replace(certs_.Key("server"), key_);
  }
  ListenerTlsFiles Files(bool mutual) const {
    return {.cert_file = cert_, .key_file = key_, .client_ca_file = mutual ? certs_.ca() : ""};
  }

  testing::TlsCerts certs_;
  testing::TempDir dir_;
  const std::string cert_ = dir_.Path("tls.crt");
  const std::string key_ = dir_.Path("tls.key");
};

TEST_F(ListenerTlsTest, FilesThatCannotBeUsedAreRefusedNamingTheOneAtFault) {
  std::string field;
  Replace(certs_.Key("client"), key_);
  auto mismatched = ListenerTls::Load(Files(false), &field);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(field, "key_file");
  EXPECT_THAT(std::string(mismatched.status().message()),
              HasSubstr(key_ + " is not the key of the certificate " + cert_));
  auto missing = ListenerTls::Load({.cert_file = dir_.Path("none.pem"), .key_file = key_}, &field);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(field, "cert_file");
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("cannot read it"));
  Replace(certs_.Key("server"), key_);
  auto no_ca = ListenerTls::Load(
      {.cert_file = cert_, .key_file = key_, .client_ca_file = certs_.Key("client")}, &field);
  ASSERT_FALSE(no_ca.ok());
  EXPECT_EQ(field, "client_ca_file");
  auto fine = ListenerTls::Load(Files(true));
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_TRUE((*fine)->mutual());
  EXPECT_GT((*fine)->not_after(), 0);
}

TEST_F(ListenerTlsTest, AReloadTakesSettledChangesAndKeepsTheOldContextOnFailure) {
  auto loaded = ListenerTls::Load(Files(false));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ListenerTls& tls = **loaded;
  const auto first = tls.context();
  using Outcome = ListenerTls::Outcome;
  EXPECT_EQ(tls.ReloadIfChanged(false).outcome, Outcome::kUnchanged);

  // A new pair: taken at the look after the one that saw it change.
  Replace(certs_.Cert("elsewhere"), cert_);
  Replace(certs_.Key("elsewhere"), key_);
  EXPECT_EQ(tls.ReloadIfChanged(false).outcome, Outcome::kUnchanged);
  EXPECT_EQ(tls.context(), first);
  EXPECT_EQ(tls.ReloadIfChanged(false).outcome, Outcome::kApplied);
  const auto second = tls.context();
  EXPECT_NE(second, first);
  EXPECT_THAT(tls.pem().cert, HasSubstr("BEGIN CERTIFICATE"));

  // A key that is not the certificate's: refused once, the context in use kept, not retried
  // until the files change again (or forced).
  Replace(certs_.Key("server"), key_);
  EXPECT_EQ(tls.ReloadIfChanged(false).outcome, Outcome::kUnchanged);
  const ListenerTls::Reload failed = tls.ReloadIfChanged(false);
  EXPECT_EQ(failed.outcome, Outcome::kFailed);
  EXPECT_THAT(failed.error, HasSubstr("is not the key of the certificate"));
  EXPECT_EQ(tls.context(), second);
  EXPECT_EQ(tls.ReloadIfChanged(false).outcome, Outcome::kUnchanged);
  EXPECT_EQ(tls.ReloadIfChanged(true).outcome, Outcome::kFailed);

  // Mended: taken.
  Replace(certs_.Cert("server"), cert_);
  tls.ReloadIfChanged(false);
  EXPECT_EQ(tls.ReloadIfChanged(false).outcome, Outcome::kApplied);
  EXPECT_NE(tls.context(), second);
  // Forced with nothing changed: read again.
  EXPECT_EQ(tls.ReloadIfChanged(true).outcome, Outcome::kApplied);
}

// A TLS client of the server on 127.0.0.1:`port`, verifying it against `ca`, with a client
// certificate when `name` is not empty.
class TlsClient {
 public:
  TlsClient(int port, const std::string& ca, const testing::TlsCerts& certs,
            const std::string& name)
      : context_(ssl::context::tls_client) {
    context_.load_verify_file(ca);
    context_.set_verify_mode(ssl::verify_peer);
    if (!name.empty()) {
      context_.use_certificate_chain_file(certs.Cert(name));
      context_.use_private_key_file(certs.Key(name), ssl::context::pem);
    }
    stream_.emplace(io_, context_);  // (a stream takes its context's settings when made)
    stream_->lowest_layer().connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  }

  // Handshakes (once), asks GET / and reads one answer; its status line, or the error.
  std::string Get() {
    boost::system::error_code ec;
    if (!shaken_) {
      stream_->handshake(ssl::stream_base::client, ec);
      if (ec) return "handshake: " + ec.message();
      shaken_ = true;
    }
    const std::string request = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    asio::write(*stream_, asio::buffer(request), ec);
    if (ec) return "write: " + ec.message();
    std::string answer;
    while (answer.find("\r\n\r\nok") == std::string::npos) {
      char buf[1024];
      const size_t n = stream_->read_some(asio::buffer(buf), ec);
      if (ec) return "read: " + ec.message();
      answer.append(buf, n);
    }
    return answer.substr(0, answer.find("\r\n"));
  }

  // The CN of the certificate the server presented.
  std::string ServerName() {
    X509* cert = SSL_get1_peer_certificate(stream_->native_handle());
    if (cert == nullptr) return "";
    char cn[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    X509_free(cert);
    return cn;
  }

 private:
  asio::io_context io_;
  ssl::context context_;
  std::optional<ssl::stream<tcp::socket>> stream_;
  bool shaken_ = false;
};

TEST_F(ListenerTlsTest, TheServerSpeaksTlsToClientsWithACertificateAndReloadsForNewOnes) {
  auto tls = ListenerTls::Load(Files(true));
  ASSERT_TRUE(tls.ok()) << tls.status();
  HttpServer server(ServerOptions{.threads = 2});
  auto port = server.Listen(
      "127.0.0.1:0",
      [](HttpRequest&, const std::string&, HttpResponse& response, Deferral&) {
        response.body() = "ok";
      },
      0, nullptr, nullptr, *tls);
  ASSERT_TRUE(port.ok()) << port.status();
  std::thread thread([&server] { server.Run(); });

  TlsClient open(*port, certs_.ca(), certs_, "client");
  EXPECT_EQ(open.Get(), "HTTP/1.1 200 OK");
  EXPECT_EQ(open.Get(), "HTTP/1.1 200 OK");  // keep-alive
  EXPECT_EQ(open.ServerName(), "localhost");
  TlsClient anonymous(*port, certs_.ca(), certs_, "");
  EXPECT_THAT(anonymous.Get(), ::testing::Not(HasSubstr("200")));

  // A new certificate for new connections; the open one goes on.
  Replace(certs_.Cert("elsewhere"), cert_);
  Replace(certs_.Key("elsewhere"), key_);
  ASSERT_EQ((*tls)->ReloadIfChanged(true).outcome, ListenerTls::Outcome::kApplied);
  EXPECT_EQ(open.Get(), "HTTP/1.1 200 OK");
  // (It names elsewhere.test: verified against the CA, its name is not checked here.)
  TlsClient fresh(*port, certs_.ca(), certs_, "client");
  EXPECT_EQ(fresh.Get(), "HTTP/1.1 200 OK");
  EXPECT_EQ(fresh.ServerName(), "elsewhere.test");

  server.Stop();
  thread.join();
}

// A TLS connection that sent nothing yet is idle, as a plaintext one is: at the listener's cap,
// a client that does handshake takes its place.
TEST_F(ListenerTlsTest, ASilentTlsConnectionMakesRoomAtTheCap) {
  auto tls = ListenerTls::Load(Files(true));
  ASSERT_TRUE(tls.ok()) << tls.status();
  HttpServer server(ServerOptions{.threads = 1});
  auto port = server.Listen(
      "127.0.0.1:0",
      [](HttpRequest&, const std::string&, HttpResponse& response, Deferral&) {
        response.body() = "ok";
      },
      /*max_connections=*/1, nullptr, nullptr, *tls);
  ASSERT_TRUE(port.ok()) << port.status();
  std::thread thread([&server] { server.Run(); });

  asio::io_context io;
  tcp::socket silent(io);
  silent.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(*port)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted, waiting
  TlsClient client(*port, certs_.ca(), certs_, "client");
  EXPECT_EQ(client.Get(), "HTTP/1.1 200 OK");
  EXPECT_EQ(server.stats().connections_rejected.load(), 0u);

  server.Stop();
  thread.join();
}

}  // namespace
}  // namespace sluice::http
