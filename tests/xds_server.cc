// xds_server: the xDS management server of the end-to-end tests (tests/xds_e2e.sh), the test
// server of src/xds/xds_testing.h as a process. It serves the state of the world written in a
// file, a DiscoveryResponse in protobuf's JSON form (versionInfo and resources, each with its
// "@type"), read at start and again on SIGHUP, when it goes to every open stream. Every request
// that comes (subscriptions, ACKs, NACKs) is printed as one line:
//   request node=ID version=V nonce=N [error=CODE:MESSAGE]
//
// Usage: xds_server --port PORT --snapshot FILE [--cert PEM --key PEM [--client-ca PEM]]
// (PORT 0: one the kernel picks). Prints "xds_server: listening on 127.0.0.1:PORT" once up;
// SIGTERM stops it (every stream ends at once).

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "xds/xds_testing.h"

namespace {

using sluice::xds::testing::TestAdsServer;

bool Publish(TestAdsServer& server, const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  if (!in || !(text << in.rdbuf())) {
    std::cerr << "xds_server: cannot read " << path << "\n";
    return false;
  }
  // (Named here so that a static link keeps its descriptor, which "@type" is looked up in.)
  (void)ratelimit::config::ratelimit::v3::RateLimitConfig::descriptor();
  envoy::service::discovery::v3::DiscoveryResponse snapshot;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(text.str(), &snapshot, options);
  if (!status.ok()) {
    std::cerr << "xds_server: " << path << ": " << status.ToString() << "\n";
    return false;
  }
  std::vector<google::protobuf::Any> resources(snapshot.resources().begin(),
                                               snapshot.resources().end());
  server.Publish(snapshot.version_info(), {}, std::move(resources));
  std::cout << "xds_server: publishing version " << snapshot.version_info() << " ("
            << snapshot.resources_size() << " resources)" << std::endl;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  TestAdsServer::Options options;
  std::string snapshot;
  int port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--port") {
      port = std::stoi(value);
    } else if (flag == "--snapshot") {
      snapshot = value;
    } else if (flag == "--cert") {
      options.cert_file = value;
    } else if (flag == "--key") {
      options.key_file = value;
    } else if (flag == "--client-ca") {
      options.client_ca_file = value;
    } else {
      std::cerr << "xds_server: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (snapshot.empty()) {
    std::cerr << "usage: xds_server --port PORT --snapshot FILE [--cert PEM --key PEM "
                 "[--client-ca PEM]]\n";
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before gRPC's threads start

  options.address = "127.0.0.1:" + std::to_string(port);
  auto server = TestAdsServer::Start(options);
  if (server == nullptr) {
    std::cerr << "xds_server: cannot listen on " << options.address << "\n";
    return 1;
  }
  Publish(*server, snapshot);
  std::cout << "xds_server: listening on 127.0.0.1:" << server->port() << std::endl;
  size_t printed = 0;
  for (;;) {
    const timespec slice{0, 20 * 1000 * 1000};
    const int signal = sigtimedwait(&signals, nullptr, &slice);
    const auto requests = server->requests();
    for (; printed < requests.size(); ++printed) {
      const auto& r = requests[printed];
      std::cout << "request node=" << r.node().id() << " version=" << r.version_info()
                << " nonce=" << r.response_nonce();
      if (r.has_error_detail()) {
        std::cout << " error=" << r.error_detail().code() << ":" << r.error_detail().message();
      }
      std::cout << std::endl;
    }
    if (signal == SIGHUP) Publish(*server, snapshot);
    if (signal == SIGTERM || signal == SIGINT) break;
  }
  server->Shutdown();
  return 0;
}
