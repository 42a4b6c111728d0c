// openloop: an open-loop HTTP/1.1 load generator that measures latency at a fixed offered rate
// without coordinated omission (issue 23).
//
//   openloop --url http://127.0.0.1:8080/v1/auth/allow --rate 20000 --duration 10
//            --connections 64 [--header 'X-Api-Key: k']... [--keys 100000 [--zipf 0.99]]
//
// Request i has an intended send time, start + i / rate, whether or not a connection is free
// then. Its latency is the time from that intended send time to the end of its response, never
// from the moment it was actually written: when the server stalls, every request that should have
// gone out during the stall waits in the client (one request in flight per keep-alive connection,
// no pipelining) and that wait is part of its latency, as it would be for a real client that does
// not slow down because the server did. A closed-loop tool (wrk, grpc_load) stops sending during
// a stall and records one slow response; here a 300 ms stall at 1,000 r/s shows as ~300 slow
// requests. `service_*` are the same requests measured the closed-loop way (from the actual send),
// for comparison. Between the two lie two waits: for a free connection (the server's doing;
// max_backlog > 0 says there was one) and for the client itself, whose event loop may notice late
// that a request is due (its thread not scheduled in time on a busy machine, or busy itself).
// `lag_*` measure the second, per request, from the intended send time to the moment the loop
// saw it due: it counts against the server in the latency figures too, so on a shared machine
// compare lag with the latencies (and check client_cpu_s) before reading them as the server's.
//
// The run is bounded. Sending stops at --duration: requests still waiting for a connection then
// are `unsent`. Replies in flight get --grace-ms more; the rest are `timeouts`. A broken
// connection makes its request an error and is reconnected (every 50 ms until that works:
// connect_failures counts the attempts that failed). So intended = sent + unsent and
// sent = completed + errors + timeouts. Every completed response counts in the latency figures,
// whatever its status (a 429 is an answer); the statuses are counted in `status`.
//
// Prints one JSON line:
//   {"url":...,"offered_rps":...,"achieved_rps":...,"duration_s":...,"connections":...,
//    "threads":...,"intended":...,"sent":...,"completed":...,"errors":...,"timeouts":...,
//    "unsent":...,"connect_failures":...,"status":{"200":...},"non_2xx":...,"p50_us":...,
//    "p90_us":...,"p99_us":...,"p999_us":...,"max_us":...,"mean_us":...,"service_p50_us":...,
//    "service_p99_us":...,"service_p999_us":...,"service_max_us":...,"lag_p50_us":...,
//    "lag_p99_us":...,"lag_max_us":...,"max_backlog":...,"client_cpu_s":...}
// achieved_rps is completed / duration. max_backlog is the most requests that waited for a
// connection at once (0: there were always enough connections).
//
// --keys K adds the header --key-header (X-Key) with one of K values per request, drawn uniformly
// or, with --zipf S, by zipf(S) over ranks 1..K (rank 1 the most frequent): k1..kK, or with
// --key-format ipv4 the addresses 10.0.0.1 onwards (for X-Forwarded-For).
//
// One thread and one Asio event loop by default; --threads N splits the rate and the connections
// into N independent loops (each its own share, interleaved in time) and merges their histograms.

#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "fmt/format.h"
#include "latency_histogram.h"
#include "util/json_string.h"

namespace {

using SteadyClock = std::chrono::steady_clock;
using sluice::bench::LatencyHistogram;
namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct Options {
  std::string url;
  double rate = 1000;
  double duration_s = 10;
  int connections = 64;
  int threads = 1;
  std::string method = "GET";
  std::vector<std::string> headers;
  int64_t keys = 0;
  std::string key_header = "X-Key";
  std::string key_format = "name";
  double zipf = 0;
  int grace_ms = 1000;
  uint64_t seed = 1;
};

// http://HOST:PORT/PATH, the only form accepted (no TLS, no user info).
struct Url {
  std::string host, port, target;
};

std::optional<Url> ParseUrl(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) return std::nullopt;
  const std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  const size_t colon = authority.rfind(':');
  Url out;
  out.host = authority.substr(0, colon);
  out.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  out.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (out.host.empty() || out.port.empty()) return std::nullopt;
  return out;
}

// Which key each request carries: an index in [0, keys), uniform or zipf. Immutable once built,
// shared by the threads (each draws with its own generator).
class KeySpread {
 public:
  KeySpread(int64_t keys, double zipf_exponent) : keys_(keys) {
    if (keys_ <= 1 || zipf_exponent <= 0) return;
    // The cumulative distribution over ranks 1..keys, drawn from by binary search.
    cdf_.resize(static_cast<size_t>(keys_));
    double sum = 0;
    for (int64_t rank = 1; rank <= keys_; ++rank) {
      sum += std::pow(static_cast<double>(rank), -zipf_exponent);
      cdf_[static_cast<size_t>(rank - 1)] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }

  int64_t Draw(std::mt19937_64& rng) const {
    if (keys_ <= 1) return 0;
    if (cdf_.empty()) return std::uniform_int_distribution<int64_t>(0, keys_ - 1)(rng);
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return std::min<int64_t>(it - cdf_.begin(), keys_ - 1);
  }

 private:
  int64_t keys_;
  std::vector<double> cdf_;
};

// What one loop measured; the threads' are merged at the end.
struct Tally {
  int64_t intended = 0;
  int64_t sent = 0;
  int64_t completed = 0;
  int64_t errors = 0;
  int64_t timeouts = 0;
  int64_t unsent = 0;
  int64_t connect_failures = 0;  // attempts to reconnect that failed
  int64_t max_backlog = 0;
  std::map<unsigned, int64_t> status;
  LatencyHistogram latency;  // from the intended send time
  LatencyHistogram service;  // from the actual send time
  LatencyHistogram lag;      // from the intended send time to the loop seeing the request due

  void Merge(const Tally& other) {
    intended += other.intended;
    sent += other.sent;
    completed += other.completed;
    errors += other.errors;
    timeouts += other.timeouts;
    unsent += other.unsent;
    connect_failures += other.connect_failures;
    max_backlog += other.max_backlog;  // an upper bound: the loops' peaks need not coincide
    for (const auto& [code, n] : other.status) status[code] += n;
    latency.Merge(other.latency);
    service.Merge(other.service);
    lag.Merge(other.lag);
  }
};

// One event loop: `rate` requests per second over its own connections, request i intended at
// start + (i + phase) / rate, for i while that is before `end`. Single-threaded.
class Loop {
 public:
  Loop(const Options& options, const Url& url, tcp::resolver::results_type endpoints,
       const KeySpread& keys, double rate, double phase, int connections, uint64_t seed)
      : options_(options),
        endpoints_(std::move(endpoints)),
        keys_(keys),
        rate_(rate),
        phase_(phase),
        rng_(seed),
        tick_(io_),
        end_timer_(io_) {
    request_head_ = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\n", options.method, url.target,
                                url.host, url.port);
    for (const std::string& header : options.headers) request_head_ += header + "\r\n";
    for (int i = 0; i < connections; ++i) connections_.push_back(std::make_unique<Connection>(io_));
  }

  // Opens every connection (blocking); false, with the reason on stderr, if one fails.
  bool Connect() {
    for (auto& c : connections_) {
      boost::system::error_code ec;
      asio::connect(c->socket, endpoints_, ec);
      if (ec) {
        std::cerr << "openloop: cannot connect to " << options_.url << ": " << ec.message() << "\n";
        return false;
      }
      c->socket.set_option(tcp::no_delay(true), ec);
    }
    return true;
  }

  // Sends from `start` to `end`, then waits out the grace; returns when everything has stopped.
  void Run(SteadyClock::time_point start, SteadyClock::time_point end) {
    // Timers fire up to the thread's timer slack late (50 µs by default): on loopback that is as
    // much as a whole answer, and it would count as latency. 1 ns asks for no slack.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    start_ = start;
    const int64_t duration_ns = std::chrono::nanoseconds(end - start).count();
    while (IntendedNs(total_) < duration_ns) ++total_;
    for (auto& c : connections_) idle_.push_back(c.get());
    end_timer_.expires_at(end);
    end_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) OnEnd();
    });
    ScheduleTick();
    io_.run();
  }

  const Tally& tally() const { return tally_; }

 private:
  struct Connection {
    explicit Connection(asio::io_context& io) : socket(io), retry(io) {}
    tcp::socket socket;
    asio::steady_timer retry;  // between reconnection attempts
    boost::beast::flat_buffer buffer;
    std::optional<http::response_parser<http::string_body>> parser;
    std::string request;
    int64_t index = -1;  // the request in flight, or -1
    SteadyClock::time_point sent_at;
  };

  int64_t IntendedNs(int64_t i) const {
    return std::llround((static_cast<double>(i) + phase_) * 1e9 / rate_);
  }
  SteadyClock::time_point Intended(int64_t i) const {
    return start_ + std::chrono::nanoseconds(IntendedNs(i));
  }

  void ScheduleTick() {
    if (due_ >= total_) return;
    tick_.expires_at(Intended(due_));
    tick_.async_wait([this](boost::system::error_code ec) {
      if (ec || ended_) return;
      const auto now = SteadyClock::now();
      for (; due_ < total_ && Intended(due_) <= now; ++due_) {
        tally_.lag.Record(std::chrono::nanoseconds(now - Intended(due_)).count());
      }
      Dispatch();
      ScheduleTick();
    });
  }

  // Hands the requests that are due and not yet sent to idle connections, oldest first.
  void Dispatch() {
    while (tally_.sent < due_ && !idle_.empty()) {
      Connection* c = idle_.back();
      idle_.pop_back();
      Send(*c, tally_.sent++);
    }
    tally_.max_backlog = std::max(tally_.max_backlog, due_ - tally_.sent);
  }

  void Send(Connection& c, int64_t index) {
    c.request = request_head_;
    if (options_.keys > 0) {
      const int64_t n = keys_.Draw(rng_) + 1;
      c.request += options_.key_header;
      if (options_.key_format == "ipv4") {
        c.request += fmt::format(": 10.{}.{}.{}\r\n", (n >> 16) & 255, (n >> 8) & 255, n & 255);
      } else {
        c.request += fmt::format(": k{}\r\n", n);
      }
    }
    c.request += "\r\n";
    c.index = index;
    ++busy_;
    c.sent_at = SteadyClock::now();
    asio::async_write(c.socket, asio::buffer(c.request),
                      [this, &c](boost::system::error_code ec, size_t) {
                        if (ec) return Fail(c);
                        c.parser.emplace();
                        c.parser->body_limit(1 << 20);
                        http::async_read(c.socket, c.buffer, *c.parser,
                                         [this, &c](boost::system::error_code ec, size_t) {
                                           if (ec) return Fail(c);
                                           OnResponse(c);
                                         });
                      });
  }

  void OnResponse(Connection& c) {
    const auto now = SteadyClock::now();
    ++tally_.completed;
    tally_.latency.Record(std::chrono::nanoseconds(now - Intended(c.index)).count());
    tally_.service.Record(std::chrono::nanoseconds(now - c.sent_at).count());
    ++tally_.status[c.parser->get().result_int()];
    const bool keep_alive = c.parser->get().keep_alive();
    Finished(c);
    if (!keep_alive) return Reconnect(c);
    Release(c);
  }

  // The request in flight on `c` failed (or `c` was closed at the end of the grace).
  void Fail(Connection& c) {
    if (c.index < 0) return;  // already counted as a timeout
    ++tally_.errors;
    Finished(c);
    Reconnect(c);
  }

  void Finished(Connection& c) {
    c.index = -1;
    --busy_;
    if (ended_ && busy_ == 0) end_timer_.cancel();  // the grace is over early
  }

  // `c` may take the next request.
  void Release(Connection& c) {
    if (ended_) return Close(c);
    if (tally_.sent < due_) return Send(c, tally_.sent++);
    idle_.push_back(&c);
  }

  void Reconnect(Connection& c) {
    Close(c);
    if (ended_) return;
    c.buffer.clear();
    asio::async_connect(c.socket, endpoints_,
                        [this, &c](boost::system::error_code ec, const tcp::endpoint&) {
                          if (ended_) return Close(c);
                          if (!ec) {
                            c.socket.set_option(tcp::no_delay(true), ec);
                            return Release(c);
                          }
                          ++tally_.connect_failures;
                          c.retry.expires_after(std::chrono::milliseconds(50));
                          c.retry.async_wait([this, &c](boost::system::error_code ec) {
                            if (!ec) Reconnect(c);
                          });
                        });
  }

  static void Close(Connection& c) {
    boost::system::error_code ignored;
    c.socket.close(ignored);
  }

  // --duration is over: nothing more is sent. Requests that were due but never got a connection
  // are unsent; those in flight have the grace to finish.
  void OnEnd() {
    ended_ = true;
    tick_.cancel();
    due_ = total_;
    tally_.intended = total_;
    tally_.unsent = total_ - tally_.sent;
    idle_.clear();
    for (auto& c : connections_) {  // idle, or reconnecting
      if (c->index >= 0) continue;
      c->retry.cancel();
      Close(*c);
    }
    if (busy_ == 0) return;
    end_timer_.expires_after(std::chrono::milliseconds(options_.grace_ms));
    end_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;  // every reply came in
      for (auto& c : connections_) {
        if (c->index < 0) continue;
        ++tally_.timeouts;
        c->index = -1;
        Close(*c);
      }
    });
  }

  const Options& options_;
  const tcp::resolver::results_type endpoints_;
  const KeySpread& keys_;
  const double rate_;
  const double phase_;
  std::mt19937_64 rng_;
  asio::io_context io_;
  asio::steady_timer tick_;       // the next intended send time
  asio::steady_timer end_timer_;  // --duration, then the grace
  std::string request_head_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<Connection*> idle_;
  SteadyClock::time_point start_;
  int64_t total_ = 0;  // requests intended before the end
  int64_t due_ = 0;    // requests whose intended time has come
  int busy_ = 0;       // connections with a request in flight
  bool ended_ = false;
  Tally tally_;
};

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double Us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

std::string ResultJson(const Options& options, const Tally& t, double cpu_s) {
  std::string out = "{\"url\":";
  sluice::util::AppendJsonString(&out, options.url);
  out += fmt::format(
      ",\"offered_rps\":{:.1f},\"achieved_rps\":{:.1f},\"duration_s\":{:.3f},\"connections\":{},"
      "\"threads\":{},\"intended\":{},\"sent\":{},\"completed\":{},\"errors\":{},\"timeouts\":{},"
      "\"unsent\":{},\"connect_failures\":{},\"status\":{{",
      options.rate, static_cast<double>(t.completed) / options.duration_s, options.duration_s,
      options.connections, options.threads, t.intended, t.sent, t.completed, t.errors, t.timeouts,
      t.unsent, t.connect_failures);
  int64_t non_2xx = 0;
  bool first = true;
  for (const auto& [code, n] : t.status) {
    out += fmt::format("{}\"{}\":{}", first ? "" : ",", code, n);
    first = false;
    if (code < 200 || code > 299) non_2xx += n;
  }
  const LatencyHistogram& l = t.latency;
  const LatencyHistogram& s = t.service;
  out += fmt::format(
      "}},\"non_2xx\":{},\"p50_us\":{:.1f},\"p90_us\":{:.1f},\"p99_us\":{:.1f},"
      "\"p999_us\":{:.1f},\"max_us\":{:.1f},\"mean_us\":{:.1f},\"service_p50_us\":{:.1f},"
      "\"service_p99_us\":{:.1f},\"service_p999_us\":{:.1f},\"service_max_us\":{:.1f},"
      "\"lag_p50_us\":{:.1f},\"lag_p99_us\":{:.1f},\"lag_max_us\":{:.1f},"
      "\"max_backlog\":{},\"client_cpu_s\":{:.2f}}}",
      non_2xx, Us(l.ValueAtPercentile(50)), Us(l.ValueAtPercentile(90)),
      Us(l.ValueAtPercentile(99)), Us(l.ValueAtPercentile(99.9)), Us(l.max_ns()),
      l.mean_ns() / 1000.0, Us(s.ValueAtPercentile(50)), Us(s.ValueAtPercentile(99)),
      Us(s.ValueAtPercentile(99.9)), Us(s.max_ns()), Us(t.lag.ValueAtPercentile(50)),
      Us(t.lag.ValueAtPercentile(99)), Us(t.lag.max_ns()), t.max_backlog, cpu_s);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"openloop: HTTP/1.1 load at a constant offered rate, latency from intended send"};
  app.add_option("--url", options.url, "http://HOST:PORT/PATH")->required();
  app.add_option("--rate", options.rate, "offered requests per second")
      ->check(CLI::Range(0.1, 10'000'000.0))
      ->capture_default_str();
  app.add_option("--duration", options.duration_s, "seconds of sending")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--connections", options.connections,
                 "keep-alive connections, one request in flight on each")
      ->check(CLI::Range(1, 65'536))
      ->capture_default_str();
  app.add_option("--threads", options.threads, "event loops, each with its share of the load")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--method", options.method)->capture_default_str();
  app.add_option("--header", options.headers, "'Name: value', repeatable");
  app.add_option("--keys", options.keys, "vary --key-header over this many values (0: no header)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}))
      ->capture_default_str();
  app.add_option("--key-header", options.key_header)->capture_default_str();
  app.add_option("--key-format", options.key_format, "name: k1..kK; ipv4: 10.0.0.1 onwards")
      ->check(CLI::IsMember({"name", "ipv4"}))
      ->capture_default_str();
  app.add_option("--zipf", options.zipf, "zipf exponent of the key mix (0: uniform)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  app.add_option("--grace-ms", options.grace_ms, "wait for replies in flight after --duration")
      ->check(CLI::Range(0, 60'000))
      ->capture_default_str();
  app.add_option("--seed", options.seed, "of the key draws")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::optional<Url> url = ParseUrl(options.url);
  if (!url) {
    std::cerr << "openloop: --url must be http://HOST:PORT/PATH\n";
    return 2;
  }
  for (const std::string& header : options.headers) {
    if (header.find(':') == std::string::npos || header.find_first_of("\r\n") != header.npos) {
      std::cerr << "openloop: --header must be 'Name: value', got '" << header << "'\n";
      return 2;
    }
  }
  if (options.connections < options.threads) {
    std::cerr << "openloop: --connections must be at least --threads\n";
    return 2;
  }
  if (options.zipf > 0 && options.keys > 100'000'000) {
    std::cerr << "openloop: --zipf keeps a table of 8 bytes per key: at most 100,000,000 keys\n";
    return 2;
  }
  if (options.key_format == "ipv4" && options.keys >= (int64_t{1} << 24)) {
    std::cerr << "openloop: --key-format ipv4 has 2^24 - 1 addresses in 10.0.0.0/8\n";
    return 2;
  }

  asio::io_context resolve_io;
  tcp::resolver resolver(resolve_io);
  boost::system::error_code ec;
  const auto endpoints = resolver.resolve(url->host, url->port, ec);
  if (ec) {
    std::cerr << "openloop: cannot resolve " << url->host << ": " << ec.message() << "\n";
    return 1;
  }

  const KeySpread keys(options.keys, options.zipf);
  const int n = options.threads;
  std::vector<std::unique_ptr<Loop>> loops;
  for (int i = 0; i < n; ++i) {
    // Loop i sends requests i, i + n, i + 2n, ... of the whole schedule.
    const int connections = options.connections / n + (i < options.connections % n ? 1 : 0);
    loops.push_back(std::make_unique<Loop>(options, *url, endpoints, keys, options.rate / n,
                                           static_cast<double>(i) / n, connections,
                                           options.seed + static_cast<uint64_t>(i)));
    if (!loops.back()->Connect()) return 1;
  }

  const double cpu_before = CpuSeconds();
  // A moment to start the threads before the first intended send.
  const auto start = SteadyClock::now() + std::chrono::milliseconds(20);
  const auto end = start + std::chrono::duration_cast<SteadyClock::duration>(
                               std::chrono::duration<double>(options.duration_s));
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back([&, i] { loops[i]->Run(start, end); });
  loops[0]->Run(start, end);
  for (std::thread& t : threads) t.join();
  const double cpu_s = CpuSeconds() - cpu_before;

  Tally total;
  for (const auto& loop : loops) total.Merge(loop->tally());
  std::cout << ResultJson(options, total, cpu_s) << std::endl;
  return 0;
}
