// A loopback TCP relay for tests that holds the server's replies back: bytes from a client go
// to the target at once, bytes from the target reach the client `reply_delay` after they came.
// So a command runs on time while its reply is late, as over a slow or congested way back.
// One thread, poll(); header-only.

#ifndef SLUICE_TESTS_SUPPORT_DELAY_RELAY_H_
#define SLUICE_TESTS_SUPPORT_DELAY_RELAY_H_

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <vector>

namespace sluice::testing {

class DelayRelay {
 public:
  explicit DelayRelay(int target_port) : target_port_(target_port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        listen(listener_, 16) == 0 &&
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~DelayRelay() {
    stop_ = true;
    thread_.join();
    for (Pair& p : pairs_) {
      close(p.client);
      close(p.server);
    }
    close(listener_);
  }
  DelayRelay(const DelayRelay&) = delete;
  DelayRelay& operator=(const DelayRelay&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // Applies to bytes that come from the target from now on.
  void set_reply_delay(std::chrono::milliseconds delay) { delay_ms_ = delay.count(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Held {
    Clock::time_point due;
    std::string bytes;
  };
  struct Pair {
    int client = -1;
    int server = -1;
    std::deque<Held> held;  // the target's bytes on their way to the client
    bool done = false;
  };

  int Connect() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  static bool SendAll(int fd, const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  void Run() {
    char buffer[16384];
    while (!stop_) {
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      for (const Pair& p : pairs_) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.server, POLLIN, 0});
      }
      poll(fds.data(), fds.size(), 2);  // wakes often: held bytes fall due, stop_ is seen
      if ((fds[0].revents & POLLIN) != 0) {
        const int client = accept(listener_, nullptr, nullptr);
        const int server = client < 0 ? -1 : Connect();
        if (server < 0) {
          if (client >= 0) close(client);
        } else {
          pairs_.push_back({client, server, {}, false});
        }
      }
      const auto now = Clock::now();
      for (size_t i = 0; i + 1 < fds.size(); i += 2) {
        Pair& p = pairs_[i / 2];
        if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          const ssize_t n = recv(p.client, buffer, sizeof buffer, 0);
          if (n <= 0 || !SendAll(p.server, buffer, static_cast<size_t>(n))) p.done = true;
        }
        if ((fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          const ssize_t n = recv(p.server, buffer, sizeof buffer, 0);
          if (n <= 0) {
            p.done = true;
          } else {
            p.held.push_back({now + std::chrono::milliseconds(delay_ms_.load()),
                              std::string(buffer, static_cast<size_t>(n))});
          }
        }
      }
      for (Pair& p : pairs_) {
        while (!p.held.empty() && p.held.front().due <= Clock::now()) {
          if (!SendAll(p.client, p.held.front().bytes.data(), p.held.front().bytes.size())) {
            p.done = true;
          }
          p.held.pop_front();
        }
      }
      for (size_t i = 0; i < pairs_.size();) {
        if (!pairs_[i].done) {
          ++i;
          continue;
        }
        close(pairs_[i].client);
        close(pairs_[i].server);
        pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> delay_ms_{0};
  std::vector<Pair> pairs_;  // the relay thread's
  std::thread thread_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_DELAY_RELAY_H_
