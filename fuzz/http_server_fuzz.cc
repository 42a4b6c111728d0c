// libFuzzer target for the whole HTTP request path: bytes in on a real loopback connection, then
// the real Beast parser, the server's limits (431, 413, 400), the router, every handler of the
// data plane (/v1/check, /json, forward-auth, the reverse proxy) and of the admin API, with the
// in-memory engine and a config that has http: routes, plans and an upstream — and bytes out.
//
// One server (one worker thread) runs for the whole fuzzing session; each input is one
// connection. Its first byte picks the listener (even: data, odd: admin), the rest is sent as it
// is, then the connection is half-closed and everything the server answers is read to the end.
// The upstream of the proxy routes is a closed loopback port, so proxied requests answer 502.
// No limit of the proxied routes shapes (leaky_bucket): a shaped request whose client half-closes
// during its delay is taken as abandoned (as nginx takes it), which would read as a 500 here.
//
// Contracts checked (any breach aborts, which libFuzzer reports with the input):
//   - the server closes the connection within a bound after the client half-closed (no hang);
//   - what it wrote is a sequence of complete HTTP/1.x responses (Beast's response parser reads
//     all of it; an answer to HEAD has no body);
//   - no answer is a 500 (a handler that failed or lost its Responder).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/memory/memory_store.h"
#include "cli/rls_json_endpoint.h"
#include "engine/engine.h"
#include "http/service.h"
#include "http/transport/server.h"
#include "rules/config_manager.h"
#include "sluice/clock.h"

namespace {

namespace beast_http = boost::beast::http;
using namespace sluice;

constexpr std::string_view kConfig = R"yaml(domain: web
plans:
  free:
    limits:
      - {requests: 3, window: 1s, algorithm: token_bucket, burst: 3}
      - {requests: 50, window: 1d}
  pro:
    limits:
      - {requests: 20, window: 1s, algorithm: sliding_window}
default_plan: free
http:
  deny_status: 429
  trusted_proxies: [127.0.0.1]
  upstream: http://127.0.0.1:1
  refund_on: [5xx, connect_error]
  routes:
    - match: {prefix: /api/}
      rate_limits:
        - actions: [{remote_address: {}}]
        - actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: api_key}}]
    - match: {path: /login, methods: [POST]}
      rate_limits:
        - actions: [{remote_address: {}}, {generic_key: {descriptor_value: login}}]
descriptors:
  - key: remote_address
    rate_limit: {requests: 5, window: 1s, algorithm: token_bucket, burst: 2}
    descriptors:
      - key: generic_key
        value: login
        rate_limit: {name: login, requests: 2, window: 1m, algorithm: sliding_log}
  - key: api_key
    plan_from: plan
  - key: generic_key
    rate_limit: {requests: 4, window: 10s}
)yaml";

// The listeners' bound on reading a connection: the server must close well within it.
constexpr auto kReadBound = std::chrono::seconds(5);

struct Harness {
  ManualClock clock{1'700'000'000'000'000};
  rules::ConfigManager manager{{}, std::string(kConfig)};
  store::MemoryStore store{{.max_entries = 4096, .shards = 4}, &clock};
  engine::Engine engine{&store};
  http::Service service{&manager, &engine, &clock, {{"admin", "secret"}}};
  http::HttpServer server{{.threads = 1,
                           .max_header_bytes = 4096,
                           .max_body_bytes = 16384,
                           .header_timeout = std::chrono::milliseconds(1000),
                           .idle_timeout = std::chrono::milliseconds(1000),
                           .max_connections = 64,
                           .shutdown_timeout = std::chrono::milliseconds(1000)}};
  int data_port = 0;
  int admin_port = 0;
  std::thread runner;

  Harness() {
    if (auto outcome = manager.Reload(); !outcome.applied) {
      std::fprintf(stderr, "fuzz_http_server: the fuzzing config does not load\n");
      std::abort();
    }
    service.SetJsonEndpoint(cli::RlsJsonEndpoint());  // /json, as `sluice serve` has it
    auto data = server.Listen(
        "127.0.0.1:0",
        [this](http::HttpRequest& req, const std::string& peer, http::HttpResponse& res,
               http::Deferral& deferral) { service.HandleData(req, peer, res, deferral); },
        0, [this](const http::HttpRequest& header) { return service.StreamsBody(header); });
    auto admin = server.Listen(
        "127.0.0.1:0",
        [this](http::HttpRequest& req, const std::string& peer, http::HttpResponse& res,
               http::Deferral& deferral) { service.HandleAdmin(req, peer, res, deferral); });
    if (!data.ok() || !admin.ok()) {
      std::fprintf(stderr, "fuzz_http_server: cannot listen on loopback\n");
      std::abort();
    }
    data_port = *data;
    admin_port = *admin;
    runner = std::thread([this] { server.Run(); });
  }
};

// Never destroyed: the server serves until the process exits.
Harness& GetHarness() {
  static Harness* harness = new Harness();
  return *harness;
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) std::abort();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    // Interrupted (libFuzzer's timer signal): the connection goes on; wait for its outcome.
    int error = errno;
    if (error == EINTR || error == EINPROGRESS || error == EALREADY) {
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      while (poll(&p, 1, 1000) < 0 && errno == EINTR) {
      }
      socklen_t len = sizeof error;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    }
    if (error != 0) {
      std::fprintf(stderr, "fuzz_http_server: connect: %d\n", error);
      std::abort();
    }
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{.tv_sec = 1, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends `bytes` (as much as the server takes: it may close early, e.g. after a 431), half-closes,
// and returns everything the server writes until it closes. Aborts if it does not close in time.
std::string Exchange(int port, std::string_view bytes) {
  const int fd = Connect(port);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed or stopped reading: what it answers is still read
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + kReadBound;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || errno == ECONNRESET) break;
    if ((errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) &&
        std::chrono::steady_clock::now() < deadline) {
      continue;
    }
    std::fprintf(stderr, "fuzz_http_server: the server did not close the connection (errno %d)\n",
                 errno);
    std::abort();
  }
  close(fd);
  return out;
}

// Parses one response at the start of `out`; `header_only` for an answer to HEAD (its
// Content-Length announces a body that is not sent). Returns the bytes it takes, or 0.
size_t ParseOne(std::string_view out, bool header_only, unsigned* status) {
  beast_http::response_parser<beast_http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  parser.header_limit(1024 * 1024);
  parser.eager(true);
  parser.skip(header_only);
  boost::beast::error_code ec;
  size_t used = parser.put(boost::asio::buffer(out.data(), out.size()), ec);
  if (!ec && !parser.is_done() && used == out.size()) {
    parser.put_eof(ec);  // a body delimited by the connection's close
  }
  if (ec || !parser.is_done() || used == 0) return 0;
  *status = parser.get().result_int();
  return used;
}

// Whether `out` from `at` on is a sequence of complete HTTP/1.x responses with no 500 among
// them. An answer may be to HEAD (without its body) or not; both readings are tried, with the
// offsets already known not to parse remembered, so the search stays linear.
bool Responses(std::string_view out, size_t at, bool may_be_head, std::vector<bool>& failed) {
  if (at == out.size()) return true;
  if (failed[at]) return false;
  for (const bool header_only : {false, true}) {
    if (header_only && !may_be_head) break;
    unsigned status = 0;
    const size_t used = ParseOne(out.substr(at), header_only, &status);
    if (used == 0) continue;
    if (status == 500) {
      std::fprintf(stderr, "fuzz_http_server: a 500 answer: %.*s\n",
                   static_cast<int>(std::min<size_t>(out.size() - at, 400)), out.data() + at);
      std::abort();
    }
    if (Responses(out, at + used, may_be_head, failed)) return true;
  }
  failed[at] = true;
  return false;
}

void CheckResponses(std::string_view request, std::string_view out) {
  std::vector<bool> failed(out.size() + 1);
  if (!Responses(out, 0, request.find("HEAD") != std::string_view::npos, failed)) {
    std::fprintf(stderr, "fuzz_http_server: not a sequence of complete HTTP responses: %.*s\n",
                 static_cast<int>(std::min<size_t>(out.size(), 600)), out.data());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Harness& h = GetHarness();
  h.clock.Advance(1000);  // 1 ms per input, so windows and buckets move on
  const int port = (data[0] & 1) ? h.admin_port : h.data_port;
  const std::string_view request(reinterpret_cast<const char*>(data) + 1, size - 1);
  CheckResponses(request, Exchange(port, request));
  return 0;
}
