// A throwaway redis-server for tests: started on a free loopback port with no persistence,
// stopped (TERM, then KILL) by pid. Header-only; used by the Redis client and backend tests.

#ifndef SLUICE_TESTS_SUPPORT_REDIS_SERVER_H_
#define SLUICE_TESTS_SUPPORT_REDIS_SERVER_H_

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace sluice::testing {

class RedisServer {
 public:
  // `extra`: more redis-server arguments, e.g. {"--requirepass", "pw"}. port 0: a free one.
  // `config_file`: read first (a Sentinel's, with "--sentinel" in `extra`).
  explicit RedisServer(std::vector<std::string> extra = {}, int port = 0,
                       std::string config_file = "")
      : extra_(std::move(extra)),
        port_(port == 0 ? FreePort() : port),
        config_file_(std::move(config_file)) {
    Start();
  }
  ~RedisServer() { Stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  bool running() const { return pid_ > 0; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Starts it (again, on the same port). True once it accepts connections (within 5 s).
  bool Start() {
    if (pid_ > 0) return true;
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no",
                                     "--loglevel",
                                     "warning",
                                     "--logfile",
                                     ""};
    if (!config_file_.empty()) args.insert(args.begin() + 1, config_file_);
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // fork + exec rather than posix_spawn, to ask for SIGKILL when the test process dies: a
    // crashed test leaves no server behind (nor a pipe held open under ctest). Between fork and
    // exec the child only makes async-signal-safe calls.
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent is already gone
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    pid_ = pid;
    for (int i = 0; i < 500; ++i) {
      if (Accepts()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // SIGKILL: the server dies as in a crash.
  void Kill() { Signal(SIGKILL); }
  // SIGTERM, then SIGKILL after 5 s.
  void Stop() {
    Resume();
    Signal(SIGTERM);
  }

  // SIGSTOP: the server hangs with its connections open, as a stuck process does. True once the
  // kernel says it is stopped (within 2 s).
  bool Pause() {
    if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0) return false;
    for (int i = 0; i < 200; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG | WUNTRACED) == pid_ && WIFSTOPPED(status)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // SIGCONT: it goes on with whatever it was sent meanwhile.
  void Resume() {
    if (pid_ > 0) kill(pid_, SIGCONT);
  }

  // A port for a cluster node: free, and so is its cluster bus port (port + 10000, which must
  // stay below 65536, so the kernel's ephemeral range will not do).
  static int FreeClusterPort() {
    static unsigned seed = static_cast<unsigned>(getpid());
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const int port = 20000 + static_cast<int>(rand_r(&seed) % 20000);
      if (Bindable(port) && Bindable(port + 10000)) return port;
    }
    return 0;
  }

  static bool Bindable(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(port);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  }

  // Any port nobody listens on now (bind to port 0, read it, close).
  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(0);
    socklen_t len = sizeof a;
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
  }

 private:
  // 127.0.0.1:port.
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    return a;
  }

  bool Accepts() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(port_);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  }

  void Signal(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    for (int i = 0; i < 500; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

  std::vector<std::string> extra_;
  int port_;
  std::string config_file_;
  pid_t pid_ = 0;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_SUPPORT_REDIS_SERVER_H_
