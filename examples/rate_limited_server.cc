// An HTTP server on loopback that rate-limits each client with sluice::RateLimiter: two limits
// at once (5 per minute AND 20 per day), 429 with Retry-After when either refuses.
//
//   rate_limited_server --port 8080 [--redis redis://127.0.0.1:6379]
//
// A client is its X-Client-Id header, or its address without one. Paths:
//   GET /       200 while the client's limits admit it, else 429 + Retry-After (seconds).
//   GET /fail   admitted like /, but the work "fails": 500, and what the request consumed is
//               given back (Refund), so failures do not use up the client's quota.
//   GET /quota  what the client has left, without consuming (Peek).
//
// Plain POSIX sockets, one request per connection, one at a time: the point is the library.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/rate_limiter.h"

namespace {

constexpr int64_t kSecond = 1000000;

struct Request {
  std::string path;
  std::string client;  // X-Client-Id, if any
};

// Reads one request's head (at most 8 KiB, 2 s); false on anything else.
bool ReadRequest(int fd, Request& request) {
  std::string head;
  char buffer[1024];
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > 8192) return false;
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return false;
    head.append(buffer, static_cast<size_t>(n));
  }
  const size_t method_end = head.find(' ');
  const size_t path_end = head.find(' ', method_end + 1);
  if (method_end == std::string::npos || path_end == std::string::npos) return false;
  request.path = head.substr(method_end + 1, path_end - method_end - 1);
  for (size_t line = head.find("\r\n"); line != std::string::npos && line + 2 < head.size();) {
    const size_t end = head.find("\r\n", line + 2);
    const std::string_view header(head.data() + line + 2, end - line - 2);
    constexpr std::string_view kName = "x-client-id:";
    if (header.size() > kName.size() &&
        strncasecmp(header.data(), kName.data(), kName.size()) == 0) {
      std::string_view value = header.substr(kName.size());
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      request.client = std::string(value);
    }
    line = end;
  }
  return true;
}

void Reply(int fd, int status, std::string_view reason, const std::string& headers,
           const std::string& body) {
  const std::string response =
      "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
      "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n" + headers + "\r\n" + body;
  send(fd, response.data(), response.size(), MSG_NOSIGNAL);
}

void Serve(sluice::RateLimiter& limiter, int fd, const std::string& address) {
  Request request;
  if (!ReadRequest(fd, request)) return;
  const std::string client = request.client.empty() ? address : request.client;

  if (request.path == "/quota") {
    absl::StatusOr<sluice::Verdict> peek = limiter.Peek(client);
    if (!peek.ok()) return Reply(fd, 503, "Service Unavailable", "", peek.status().ToString());
    return Reply(fd, 200, "OK", "", "remaining " + std::to_string(peek->remaining) + "\n");
  }

  absl::StatusOr<sluice::Verdict> verdict = limiter.Decide(client);
  if (!verdict.ok()) return Reply(fd, 503, "Service Unavailable", "", verdict.status().ToString());
  const std::string remaining =
      "RateLimit-Remaining: " + std::to_string(verdict->remaining) + "\r\n";
  if (!verdict->allowed) {
    std::string headers = remaining;
    if (verdict->retry_after_us != sluice::Decision::kNever) {
      // Whole seconds, rounded up: a client that waits that long is admitted.
      const int64_t seconds = (verdict->retry_after_us + kSecond - 1) / kSecond;
      headers += "Retry-After: " + std::to_string(seconds) + "\r\n";
    }
    return Reply(fd, 429, "Too Many Requests", headers, "slow down\n");
  }
  if (request.path == "/fail") {
    // The work failed: the client gets its quota back.
    const absl::Status refunded = limiter.Refund(verdict->consumption);
    return Reply(fd, 500, "Internal Server Error", "",
                 refunded.ok() ? "failed (not counted)\n" : "failed\n");
  }
  Reply(fd, 200, "OK", remaining, "hello " + client + "\n");
}

}  // namespace

int main(int argc, char** argv) {
  int port = 8080;
  std::string redis_url;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--port") {
      port = std::atoi(argv[i + 1]);
    } else if (flag == "--redis") {
      redis_url = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--port N] [--redis URL]\n", argv[0]);
      return 2;
    }
  }

  sluice::RateLimiter::Options options;
  options.name = "example";
  if (!redis_url.empty()) {
    options.redis.emplace();
    options.redis->url = redis_url;
  }
  const sluice::Limit per_minute = {
      .algorithm = sluice::Algorithm::kTokenBucket, .requests = 5, .window_us = 60 * kSecond};
  const sluice::Limit per_day = {
      .algorithm = sluice::Algorithm::kFixedWindow, .requests = 20, .window_us = 86400 * kSecond};
  auto limiter = sluice::RateLimiter::Create({per_minute, per_day}, options);
  if (!limiter.ok()) {
    std::fprintf(stderr, "rate limiter: %s\n", limiter.status().ToString().c_str());
    return 1;
  }

  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, 64) != 0) {
    std::perror("listen");
    return 1;
  }
  socklen_t length = sizeof address;
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  std::printf("listening on 127.0.0.1:%d, limits on %s\n", ntohs(address.sin_port),
              (*limiter)->where().c_str());
  std::fflush(stdout);

  for (;;) {
    sockaddr_in peer{};
    socklen_t peer_length = sizeof peer;
    const int fd = accept(listener, reinterpret_cast<sockaddr*>(&peer), &peer_length);
    if (fd < 0) continue;
    const timeval timeout = {.tv_sec = 2, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    char ip[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
    Serve(**limiter, fd, ip);
    close(fd);
  }
}
