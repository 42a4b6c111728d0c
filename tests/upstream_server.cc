// A test upstream for the reverse proxy tests (tests/proxy_e2e.sh), on sluice's own HttpServer.
//
//   upstream_server [--listen 127.0.0.1:0]     prints "upstream: listening on HOST:PORT"
//
//   /status/NNN     answers NNN, body "status NNN"
//   /slow?ms=N      answers 200 after N ms (a timer, not a sleeping thread)
//   /own-limits     answers 200 with X-RateLimit-Limit and RateLimit-Policy of its own
//   /hop            answers 200 with hop-by-hop fields (Keep-Alive; the server writes its own
//                   Connection field)
//                   and an end-to-end one (X-End: 1)
//   /bytes?n=N      200 with N bytes (up to 2^64), generated while they are sent, 64 KiB at a
//                   time, each written once the previous one is out: the line kLine over and
//                   over (`yes 'sluice streams bodies piece by piece' | head -c N` is the same);
//                   with a Content-Length, or chunked with &chunked=1; &cut=M: announces N but
//                   closes the connection after M bytes
//   /hold           200, chunked: "first part\n" at once, then "second part\n" after a
//                   /release (or 5 s)
//   /release        lets every /hold waiting now finish
//   /early?status=N answers N (default 413) with "answered early" at once and reads nothing of
//                   its body: then closes the connection (reset, as the body is unread), or with
//                   &hold_ms=M holds it open, unread, for M ms first
//   /upload         its body streamed in (read piece by piece as it arrives) and checked against
//                   kLine repeated: "received N bytes, pattern ok" (or "... broken at OFFSET")
//   /stats          "requests=R connections=C holding=H cut=K received=B": requests served so
//                   far (but /stats), TCP connections accepted, /hold answers waiting for a
//                   /release, streamed answers whose client (sluice) went away before their
//                   end, body bytes /upload received so far
//   anything else   200, the request echoed: "METHOD TARGET", then each header field as
//                   "name: value", an empty line and the body
// Stops on SIGTERM/SIGINT.

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "http/transport/server.h"

using sluice::http::BodyReader;
using sluice::http::BodyWriter;
using sluice::http::Deferral;
using sluice::http::HttpRequest;
using sluice::http::HttpResponse;
using sluice::http::HttpServer;
using sluice::http::Responder;
namespace beast_http = sluice::http::beast_http;

namespace {

constexpr std::string_view kLine = "sluice streams bodies piece by piece\n";  // 37 bytes
constexpr size_t kPiece = 64 << 10;

struct Counters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> releases{0};
  std::atomic<int64_t> holding{0};
  std::atomic<uint64_t> cut{0};
  std::atomic<uint64_t> received{0};
};

// The value of `name` in the query of `target` (0 when absent).
uint64_t Param(const std::string& target, const std::string& name) {
  for (size_t at = target.find('?'); at != std::string::npos; at = target.find('&', at + 1)) {
    if (target.compare(at + 1, name.size() + 1, name + "=") == 0) {
      uint64_t value = 0;
      const char* begin = target.data() + at + name.size() + 2;
      std::from_chars(begin, target.data() + target.size(), value);
      return value;
    }
  }
  return 0;
}

// Writes kLine repeated, `total` bytes (or only the first `stop_at` and then closes), one piece
// in flight at a time.
class Generator : public std::enable_shared_from_this<Generator> {
 public:
  Generator(std::shared_ptr<BodyWriter> body, uint64_t total, uint64_t stop_at, Counters* counters)
      : body_(std::move(body)), total_(total), stop_at_(stop_at), counters_(counters) {}

  void Next() {
    static const std::string pattern = [] {
      std::string p;
      while (p.size() < kPiece + kLine.size()) p += kLine;
      return p;
    }();
    if (sent_ == stop_at_) return stop_at_ < total_ ? body_->Abort() : body_->End();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kPiece, stop_at_ - sent_));
    body_->Write(boost::asio::buffer(pattern.data() + sent_ % kLine.size(), n),
                 [self = shared_from_this(), n](bool written) {
                   if (!written) {
                     ++self->counters_->cut;
                     return;
                   }
                   self->sent_ += n;
                   self->Next();
                 });
  }

 private:
  std::shared_ptr<BodyWriter> body_;
  const uint64_t total_;
  const uint64_t stop_at_;
  Counters* counters_;
  uint64_t sent_ = 0;
};

// /upload: reads the body as it comes, counting it into `received` and checking it.
class UploadReader : public std::enable_shared_from_this<UploadReader> {
 public:
  UploadReader(std::shared_ptr<BodyReader> body, Responder responder, Counters* counters)
      : body_(std::move(body)), responder_(std::move(responder)), counters_(counters) {}

  void Next() {
    body_->Read([self = shared_from_this()](BodyReader::Status status, std::string_view piece) {
      if (status == BodyReader::Status::kError) return;  // the client is gone
      if (status == BodyReader::Status::kEnd) return self->Answer();
      for (size_t i = 0; i < piece.size() && self->broken_at_ < 0; ++i) {
        if (piece[i] != kLine[(self->size_ + i) % kLine.size()]) {
          self->broken_at_ = static_cast<int64_t>(self->size_ + i);
        }
      }
      self->size_ += piece.size();
      self->counters_->received += piece.size();
      self->Next();
    });
  }

 private:
  void Answer() {
    HttpResponse response(beast_http::status::ok, 11);
    response.set(beast_http::field::content_type, "text/plain");
    response.body() = "received " + std::to_string(size_) + " bytes, pattern " +
                      (broken_at_ < 0 ? "ok" : "broken at " + std::to_string(broken_at_));
    responder_.Send(std::move(response));
  }

  std::shared_ptr<BodyReader> body_;
  Responder responder_;
  Counters* counters_;
  uint64_t size_ = 0;
  int64_t broken_at_ = -1;
};

// /hold: the second part once /release was asked for since the first was sent, or after 5 s.
void HoldThenFinish(std::shared_ptr<BodyWriter> body, Counters* counters, uint64_t releases,
                    std::shared_ptr<boost::asio::steady_timer> timer, int polls_left) {
  if (counters->releases.load() == releases && polls_left > 0) {
    timer->expires_after(std::chrono::milliseconds(10));
    timer->async_wait([=](boost::system::error_code) {
      HoldThenFinish(body, counters, releases, timer, polls_left - 1);
    });
    return;
  }
  --counters->holding;
  static constexpr std::string_view kSecond = "second part\n";
  BodyWriter& writer = *body;
  writer.Write(boost::asio::buffer(kSecond.data(), kSecond.size()), [body](bool written) {
    if (written) body->End();
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--listen") listen = argv[i + 1];
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // /upload takes bodies of any size (it streams them); the rest are small.
  HttpServer server({.threads = 2, .max_body_bytes = std::numeric_limits<size_t>::max()});
  Counters counters;
  std::atomic<uint64_t>& requests = counters.requests;
  auto port = server.Listen(
      listen,
      [&](HttpRequest& request, const std::string&, HttpResponse& response, Deferral& deferral) {
        const std::string target(request.target());
        const std::string path = target.substr(0, target.find('?'));
        response.set(beast_http::field::content_type, "text/plain");
        if (path == "/stats") {
          response.body() = "requests=" + std::to_string(requests.load()) + " connections=" +
                            std::to_string(server.stats().connections_total.load()) +
                            " holding=" + std::to_string(counters.holding.load()) +
                            " cut=" + std::to_string(counters.cut.load()) +
                            " received=" + std::to_string(counters.received.load());
          return;
        }
        ++requests;
        if (path == "/upload") {
          if (deferral.body() == nullptr) {  // a body too small to need reading, or none
            response.body() = "received " + std::to_string(request.body().size()) + " bytes";
            return;
          }
          std::make_shared<UploadReader>(deferral.body(), deferral.Take(), &counters)->Next();
          return;
        }
        if (path == "/early") {  // the body (streamed: see below) is left unread
          const uint64_t status = Param(target, "status");
          const auto hold = std::chrono::milliseconds(Param(target, "hold_ms"));
          HttpResponse head(static_cast<beast_http::status>(status >= 200 && status <= 599
                                                                ? static_cast<unsigned>(status)
                                                                : 413u),
                            11);
          head.set(beast_http::field::content_type, "text/plain");
          auto timer = std::make_shared<boost::asio::steady_timer>(deferral.executor());
          // A streamed answer, so that the connection ends by Abort: closed outright, without the
          // lingering close HttpServer gives an answer whose request body is unread.
          deferral.Take().Stream(
              std::move(head), 14, [timer, hold](std::shared_ptr<BodyWriter> body) {
                if (body == nullptr) return;
                static constexpr std::string_view kEarly = "answered early";
                BodyWriter& writer = *body;
                writer.Write(
                    boost::asio::buffer(kEarly.data(), kEarly.size()), [timer, hold, body](bool) {
                      timer->expires_after(hold);
                      timer->async_wait([body](boost::system::error_code) { body->Abort(); });
                    });
              });
          return;
        }
        if (path == "/bytes") {
          const uint64_t total = Param(target, "n");
          const uint64_t cut = Param(target, "cut");
          const bool chunked = Param(target, "chunked") == 1;
          HttpResponse head(beast_http::status::ok, 11);
          head.set(beast_http::field::content_type, "application/octet-stream");
          deferral.Take().Stream(
              std::move(head), chunked ? std::nullopt : std::optional<uint64_t>(total),
              [&counters, total, cut](std::shared_ptr<BodyWriter> body) {
                if (body == nullptr) return;
                const uint64_t stop_at = cut > 0 && cut < total ? cut : total;
                std::make_shared<Generator>(std::move(body), total, stop_at, &counters)->Next();
              });
          return;
        }
        if (path == "/release") {
          ++counters.releases;
          response.body() = "released";
          return;
        }
        if (path == "/hold") {
          HttpResponse head(beast_http::status::ok, 11);
          head.set(beast_http::field::content_type, "text/plain");
          const uint64_t releases = counters.releases.load();
          auto timer = std::make_shared<boost::asio::steady_timer>(deferral.executor());
          deferral.Take().Stream(std::move(head), std::nullopt,
                                 [&counters, releases, timer](std::shared_ptr<BodyWriter> body) {
                                   if (body == nullptr) return;
                                   static constexpr std::string_view kFirst = "first part\n";
                                   ++counters.holding;
                                   BodyWriter& writer = *body;
                                   writer.Write(boost::asio::buffer(kFirst.data(), kFirst.size()),
                                                [&counters, releases, timer, body](bool written) {
                                                  if (!written) {
                                                    --counters.holding;
                                                    ++counters.cut;
                                                    return;
                                                  }
                                                  HoldThenFinish(body, &counters, releases, timer,
                                                                 500);
                                                });
                                 });
          return;
        }
        if (path.rfind("/status/", 0) == 0) {
          int status = 0;
          const std::string code = path.substr(8);
          std::from_chars(code.data(), code.data() + code.size(), status);
          if (status < 200 || status > 599) status = 400;
          response.result(static_cast<unsigned>(status));
          response.body() = "status " + code;
          return;
        }
        if (path == "/slow") {
          const size_t at = target.find("ms=");
          int ms = 1000;
          if (at != std::string::npos)
            std::from_chars(target.data() + at + 3, target.data() + target.size(), ms);
          auto timer = std::make_shared<boost::asio::steady_timer>(deferral.executor(),
                                                                   std::chrono::milliseconds(ms));
          timer->async_wait(
              [timer, responder = deferral.Take()](boost::system::error_code) mutable {
                HttpResponse later(beast_http::status::ok, 11);
                later.set(beast_http::field::content_type, "text/plain");
                later.body() = "slow";
                responder.Send(std::move(later));
              });
          return;
        }
        if (path == "/own-limits") {  // an upstream with rate-limit fields of its own
          response.set("X-RateLimit-Limit", "999");
          response.set("RateLimit-Policy", "\"upstream\";q=999;w=1");
          response.body() = "own";
          return;
        }
        if (path == "/hop") {
          response.set("Keep-Alive", "timeout=5");
          response.set("X-Hop", "1");
          response.set(beast_http::field::connection, "X-Hop");
          response.set("X-End", "1");
          response.body() = "hop";
          return;
        }
        std::string echo = std::string(request.method_string()) + " " + target + "\n";
        for (const auto& field : request) {
          echo += std::string(field.name_string()) + ": " + std::string(field.value()) + "\n";
        }
        echo += "\n" + request.body();
        response.body() = std::move(echo);
      },
      0, [](const HttpRequest& header) {  // /upload reads its body as it comes, /early never
        const std::string_view target(header.target().data(), header.target().size());
        const std::string_view path = target.substr(0, target.find('?'));
        return path == "/upload" || path == "/early";
      });
  if (!port.ok()) {
    std::cerr << "upstream: " << port.status().message() << "\n";
    return 1;
  }
  std::thread([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.Stop();
  }).detach();
  std::cout << "upstream: listening on " << listen.substr(0, listen.rfind(':')) << ":" << *port
            << std::endl;
  server.Run();
  return 0;
}
