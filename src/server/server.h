// The HTTP server around the engine: binds first (so /health answers 503 while the model loads),
// serves on its own threads (http/transport.h), and drains on shutdown within a deadline.
#pragma once
#include <chrono>
#include <memory>

#include "core/status.h"
#include "http/router.h"
#include "http/transport.h"
#include "server/access.h"
#include "server/state.h"

namespace kvasir::server {

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  Status bind();                // host:port; port 0 picks a free one
  int port() const { return transport_->port(); }
  void start();                 // serves on background threads until stop()
  ServerState& state() { return state_; }

  // Graceful shutdown within `timeout` in all: new generations get 503, the engine finishes
  // what it has until the deadline, then aborts the rest (their clients get a final chunk with
  // finish_reason "abort" and the stream's end); responses are written, the server stops and
  // the engine goes.
  void drain_and_stop(std::chrono::milliseconds timeout);
  void stop();

 private:
  ServerState state_;
  AccessPolicy access_;
  http::Router router_;
  std::unique_ptr<http::Transport> transport_;
  bool stopped_ = false;
};

}  // namespace kvasir::server
