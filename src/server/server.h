// The HTTP server around the engine: binds first (so /health answers 503 while the model loads),
// serves on its own threads, and drains on shutdown.
#pragma once
#include <chrono>
#include <memory>
#include <thread>

#include "core/status.h"
#include "server/state.h"

namespace httplib {
class Server;
}

namespace kvasir::server {

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  Status bind();                // host:port; port 0 picks a free one
  int port() const { return port_; }
  void start();                 // serves on a background thread until stop()
  ServerState& state() { return state_; }

  // Graceful shutdown: new generations get 503, the engine finishes what it has, responses in
  // flight are written (waiting at most `timeout`), then the server stops and the engine goes.
  void drain_and_stop(std::chrono::milliseconds timeout);
  void stop();

 private:
  void configure();

  ServerState state_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kvasir::server
