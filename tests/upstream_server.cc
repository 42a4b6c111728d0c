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
//   /stats          "requests=R connections=C": requests served so far (but /stats) and TCP
//                   connections accepted
//   anything else   200, the request echoed: "METHOD TARGET", then each header field as
//                   "name: value", an empty line and the body
// Stops on SIGTERM/SIGINT.

#include <signal.h>

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <iostream>
#include <string>
#include <thread>

#include "http/server.h"

using sluice::http::Deferral;
using sluice::http::HttpRequest;
using sluice::http::HttpResponse;
using sluice::http::HttpServer;
namespace beast_http = sluice::http::beast_http;

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

  HttpServer server({.threads = 2});
  std::atomic<uint64_t> requests{0};
  auto port = server.Listen(listen, [&](HttpRequest& request, const std::string&,
                                        HttpResponse& response, Deferral& deferral) {
    const std::string target(request.target());
    const std::string path = target.substr(0, target.find('?'));
    response.set(beast_http::field::content_type, "text/plain");
    if (path == "/stats") {
      response.body() = "requests=" + std::to_string(requests.load()) +
                        " connections=" + std::to_string(server.stats().connections_total.load());
      return;
    }
    ++requests;
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
      timer->async_wait([timer, responder = deferral.Take()](boost::system::error_code) mutable {
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
