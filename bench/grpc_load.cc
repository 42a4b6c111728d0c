// grpc_load: a closed-loop load generator for sluice's two decision APIs (issue 7).
//
//   grpc_load --mode grpc --target 127.0.0.1:8081 --concurrency 16 --seconds 5
//   grpc_load --mode http --target 127.0.0.1:8080 --concurrency 16 --seconds 5 --keys 100000
//
// Keeps `concurrency` calls outstanding at all times for `warmup + seconds`, each one a single
// decision, and prints one JSON line about the measured `seconds` (after the warm-up):
//
//   {"mode":"grpc","concurrency":16,"keys":1,"seconds":5.00,"decisions":...,
//    "decisions_per_sec":...,"p50_us":...,"p99_us":...,"errors":...,"over_limit":...,
//    "client_cpu_s":...}
//
// grpc: envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit on ONE channel (one HTTP/2
//   connection), so `concurrency` is the number of concurrent streams, as Envoy's rate limit
//   filter talks to a rate limit service. Driven by one thread through a CompletionQueue.
// http: POST /v1/check with the same descriptor as JSON, on `concurrency` keep-alive
//   connections (one request in flight on each: HTTP/1.1 has no multiplexing), driven by one
//   thread with Boost.Asio/Beast.
//
// Every request carries one descriptor: the optional `--entry K=V` first (default
// generic_key=allow, which bench/compare/bench.yaml limits at 1,000,000/s per key), then
// `--key-name` = k<i>, i drawn uniformly from 1..`--keys` (1: always k1). A decision counts
// whether it allows or denies (OVER_LIMIT / 429 are counted in over_limit); anything else (a
// gRPC error, another HTTP status, a broken connection, a call over `--timeout-ms`) is an error
// and not a decision. Latency is from issuing a call to its completion, over the calls that
// complete inside the measured interval. client_cpu_s is this process's own CPU time (it shares
// the machine with the server).
//
// Everything is bounded: no call starts after the end, and each has a deadline (gRPC) or is
// cut off by a timer (HTTP) `--timeout-ms` after the end.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
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
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "fmt/format.h"
#include "grpcpp/grpcpp.h"

namespace {

using SteadyClock = std::chrono::steady_clock;
namespace rls = envoy::service::ratelimit::v3;
namespace asio = boost::asio;
namespace http = boost::beast::http;

struct Options {
  std::string mode = "grpc";
  std::string target;
  int concurrency = 16;
  double seconds = 5;
  double warmup_seconds = 0.5;
  int64_t keys = 1;
  std::string domain = "bench";
  std::string entry = "generic_key=allow";
  std::string key_name = "key";
  int timeout_ms = 5000;
};

// What a run measured: decisions and latencies inside [start, end), errors anywhere after the
// warm-up.
struct Tally {
  SteadyClock::time_point start, end;
  int64_t decisions = 0;
  int64_t over_limit = 0;
  int64_t errors = 0;
  std::vector<int64_t> latencies_ns;

  bool Measuring(SteadyClock::time_point now) const { return now >= start && now < end; }
  void Decision(SteadyClock::time_point issued, SteadyClock::time_point now, bool over) {
    if (!Measuring(now)) return;
    ++decisions;
    if (over) ++over_limit;
    latencies_ns.push_back((now - issued).count());
  }
  void Error(SteadyClock::time_point now) {
    if (now >= start) ++errors;
  }
};

// Draws the key of each request: k1 when there is one key, else k<uniform 1..keys>.
class KeyPicker {
 public:
  explicit KeyPicker(int64_t keys) : keys_(keys), dist_(1, std::max<int64_t>(keys, 1)) {}
  std::string Next() { return keys_ <= 1 ? std::string("k1") : fmt::format("k{}", dist_(rng_)); }

 private:
  int64_t keys_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::uniform_int_distribution<int64_t> dist_;
};

std::pair<std::string, std::string> SplitEntry(const std::string& entry) {
  const size_t eq = entry.find('=');
  if (eq == std::string::npos) return {entry, ""};
  return {entry.substr(0, eq), entry.substr(eq + 1)};
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// ---------------------------------------------------------------- gRPC

// One outstanding ShouldRateLimit call; reused (with a fresh ClientContext) call after call.
struct GrpcCall {
  rls::RateLimitRequest request;
  rls::RateLimitResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientAsyncResponseReader<rls::RateLimitResponse>> reader;
  SteadyClock::time_point issued;
};

int RunGrpc(const Options& options, Tally* tally) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 20);
  auto channel =
      grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
    std::cerr << "grpc_load: cannot connect to " << options.target << "\n";
    return 1;
  }
  auto stub = rls::RateLimitService::NewStub(channel);
  grpc::CompletionQueue queue;
  KeyPicker keys(options.keys);
  const auto [entry_key, entry_value] = SplitEntry(options.entry);
  const auto timeout = std::chrono::milliseconds(options.timeout_ms);

  std::vector<GrpcCall> calls(options.concurrency);
  auto issue = [&](GrpcCall& call) {
    auto* descriptor = call.request.mutable_descriptors(0);
    descriptor->mutable_entries(descriptor->entries_size() - 1)->set_value(keys.Next());
    call.response.Clear();
    call.context = std::make_unique<grpc::ClientContext>();
    call.issued = SteadyClock::now();
    // gRPC takes deadlines on the system clock only.
    call.context->set_deadline(std::chrono::system_clock::now() + timeout);
    call.reader = stub->AsyncShouldRateLimit(call.context.get(), call.request, &queue);
    call.reader->Finish(&call.response, &call.status, &call);
  };
  for (GrpcCall& call : calls) {
    call.request.set_domain(options.domain);
    auto* descriptor = call.request.add_descriptors();
    if (!entry_key.empty()) {
      auto* entry = descriptor->add_entries();
      entry->set_key(entry_key);
      entry->set_value(entry_value);
    }
    descriptor->add_entries()->set_key(options.key_name);
    issue(call);
  }

  int outstanding = options.concurrency;
  void* tag = nullptr;
  bool ok = false;
  while (outstanding > 0 && queue.Next(&tag, &ok)) {
    auto& call = *static_cast<GrpcCall*>(tag);
    const auto now = SteadyClock::now();
    if (ok && call.status.ok()) {
      tally->Decision(call.issued, now,
                      call.response.overall_code() == rls::RateLimitResponse::OVER_LIMIT);
    } else {
      tally->Error(now);
    }
    if (now < tally->end) {
      issue(call);
    } else {
      --outstanding;
    }
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return 0;
}

// ---------------------------------------------------------------- HTTP /v1/check

// One keep-alive connection with one request in flight. Calls `done` once, when it stops: after
// the end of the run, or on any failure (then counted as one error).
class HttpConnection {
 public:
  HttpConnection(asio::io_context& io, const Options& options, KeyPicker* keys, Tally* tally,
                 std::function<void()> done)
      : socket_(io), options_(options), keys_(keys), tally_(tally), done_(std::move(done)) {
    const auto [entry_key, entry_value] = SplitEntry(options.entry);
    body_prefix_ = "{\"domain\":" + JsonString(options.domain) + ",\"descriptors\":[{\"entries\":[";
    if (!entry_key.empty()) {
      body_prefix_ +=
          "{\"key\":" + JsonString(entry_key) + ",\"value\":" + JsonString(entry_value) + "},";
    }
    body_prefix_ += "{\"key\":" + JsonString(options.key_name) + ",\"value\":";
  }

  asio::ip::tcp::socket& socket() { return socket_; }

  void Send() {
    const std::string body = body_prefix_ + JsonString(keys_->Next()) + "}]}]}";
    request_ = fmt::format(
        "POST /v1/check HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\n\r\n{}",
        options_.target, body.size(), body);
    issued_ = SteadyClock::now();
    asio::async_write(socket_, asio::buffer(request_),
                      [this](boost::system::error_code ec, size_t) {
                        if (ec) return Fail();
                        response_.emplace();
                        response_->body_limit(1 << 20);
                        http::async_read(socket_, buffer_, *response_,
                                         [this](boost::system::error_code ec, size_t) {
                                           if (ec) return Fail();
                                           OnResponse();
                                         });
                      });
  }

  void Close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

 private:
  void OnResponse() {
    const auto now = SteadyClock::now();
    const unsigned status = response_->get().result_int();
    if (status == 200 || status == 429) {
      tally_->Decision(issued_, now, status == 429);
    } else {
      tally_->Error(now);
    }
    if (!response_->get().keep_alive()) return Fail();
    if (now < tally_->end) return Send();
    Close();
    done_();
  }

  void Fail() {
    tally_->Error(SteadyClock::now());
    Close();
    done_();
  }

  asio::ip::tcp::socket socket_;
  const Options& options_;
  KeyPicker* keys_;
  Tally* tally_;
  std::function<void()> done_;
  std::string body_prefix_;
  std::string request_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> response_;
  SteadyClock::time_point issued_;
};

int RunHttp(const Options& options, Tally* tally) {
  const size_t colon = options.target.rfind(':');
  if (colon == std::string::npos) {
    std::cerr << "grpc_load: --target must be HOST:PORT\n";
    return 2;
  }
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto endpoints =
      resolver.resolve(options.target.substr(0, colon), options.target.substr(colon + 1), ec);
  if (ec) {
    std::cerr << "grpc_load: cannot resolve " << options.target << ": " << ec.message() << "\n";
    return 1;
  }
  // A server that stops answering must not hang the run: the cutoff closes every connection
  // `timeout_ms` after the end. When the last connection stops, the cutoff is cancelled and
  // run() returns.
  asio::steady_timer cutoff(io, tally->end + std::chrono::milliseconds(options.timeout_ms));
  int running = options.concurrency;
  auto done = [&] {
    if (--running == 0) cutoff.cancel();
  };
  KeyPicker keys(options.keys);
  std::vector<std::unique_ptr<HttpConnection>> connections;
  for (int i = 0; i < options.concurrency; ++i) {
    connections.push_back(std::make_unique<HttpConnection>(io, options, &keys, tally, done));
    asio::connect(connections.back()->socket(), endpoints, ec);
    if (ec) {
      std::cerr << "grpc_load: cannot connect to " << options.target << ": " << ec.message()
                << "\n";
      return 1;
    }
    connections.back()->socket().set_option(asio::ip::tcp::no_delay(true));
  }
  cutoff.async_wait([&](boost::system::error_code ec) {
    if (ec) return;  // cancelled: everything finished in time
    for (auto& connection : connections) connection->Close();
  });
  for (auto& connection : connections) connection->Send();
  io.run();
  return 0;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double PercentileUs(std::vector<int64_t>& sorted_ns, double p) {
  if (sorted_ns.empty()) return 0;
  const size_t i = std::min(sorted_ns.size() - 1, static_cast<size_t>(p * sorted_ns.size()));
  return sorted_ns[i] / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"grpc_load: closed-loop load on sluice's gRPC ShouldRateLimit or HTTP /v1/check"};
  app.add_option("--mode", options.mode, "grpc or http")
      ->check(CLI::IsMember({"grpc", "http"}))
      ->capture_default_str();
  app.add_option("--target", options.target, "HOST:PORT of the gRPC port or the data plane")
      ->required();
  app.add_option("--concurrency", options.concurrency,
                 "calls in flight: gRPC streams on one channel, or HTTP connections")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--seconds", options.seconds, "measured duration")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_option("--warmup", options.warmup_seconds, "seconds of load before measuring")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  app.add_option("--keys", options.keys, "distinct keys k1..kN, drawn uniformly (1: always k1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000}))
      ->capture_default_str();
  app.add_option("--domain", options.domain)->capture_default_str();
  app.add_option("--entry", options.entry, "first descriptor entry K=V (empty: none)")
      ->capture_default_str();
  app.add_option("--key-name", options.key_name, "descriptor key of the varying entry")
      ->capture_default_str();
  app.add_option("--timeout-ms", options.timeout_ms, "per-call deadline")
      ->check(CLI::Range(1, 60'000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  Tally tally;
  tally.start = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                         std::chrono::duration<double>(options.warmup_seconds));
  tally.end = tally.start + std::chrono::duration_cast<SteadyClock::duration>(
                                std::chrono::duration<double>(options.seconds));
  const double cpu_before = CpuSeconds();
  const int rc = options.mode == "grpc" ? RunGrpc(options, &tally) : RunHttp(options, &tally);
  if (rc != 0) return rc;
  const double cpu = CpuSeconds() - cpu_before;

  std::sort(tally.latencies_ns.begin(), tally.latencies_ns.end());
  std::cout << fmt::format(
                   "{{\"mode\":\"{}\",\"concurrency\":{},\"keys\":{},\"seconds\":{:.2f},"
                   "\"decisions\":{},\"decisions_per_sec\":{:.0f},\"p50_us\":{:.1f},"
                   "\"p99_us\":{:.1f},\"errors\":{},\"over_limit\":{},\"client_cpu_s\":{:.2f}}}",
                   options.mode, options.concurrency, options.keys, options.seconds,
                   tally.decisions, tally.decisions / options.seconds,
                   PercentileUs(tally.latencies_ns, 0.50), PercentileUs(tally.latencies_ns, 0.99),
                   tally.errors, tally.over_limit, cpu)
            << std::endl;
  return 0;
}
