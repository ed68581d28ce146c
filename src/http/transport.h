// The HTTP/1.1 server transport: one I/O thread holds every connection (Boost.Asio coroutines over
// Boost.Beast's parser), so idle, slow or half-sent connections cost a little memory and no
// thread; complete requests go to a Service, on the I/O thread when it can answer at once, else on
// a bounded pool of worker threads. Every phase has a limit: header bytes and time, body bytes and
// time, time per write, connections at once, requests waiting for a worker.
//
// A client that hangs up is noticed while its request is handled: Request::client_gone() turns
// true and a stream's next write fails, so the work behind it can stop.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "http/request_parser.h"
#include "http/service.h"

namespace kvasir::http {

struct TransportOptions {
  Limits limits;
  std::chrono::milliseconds header_timeout{10'000};  // connection or keep-alive start -> end of headers
  std::chrono::milliseconds body_timeout{30'000};    // end of headers -> end of body
  std::chrono::milliseconds write_timeout{30'000};   // each write of a response
  size_t max_connections = 4096;  // beyond: accepted and closed at once
  size_t workers = 256;           // threads for handlers that may block; each stream holds one
  size_t max_queued = 1024;       // requests waiting for a worker; beyond: 503
};

struct TransportStats {
  int64_t connections_open = 0;
  int64_t connections_total = 0;
  int64_t connections_refused = 0;  // over max_connections
  int64_t requests_total = 0;
  int64_t requests_in_flight = 0;   // on a worker or waiting for one
};

class Transport {
 public:
  Transport(TransportOptions options, Service& service);
  ~Transport();  // stop()
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  Status bind(const std::string& host, int port);  // port 0: any free port
  int port() const;
  void start();  // the I/O thread and the workers
  // Stops accepting and ends every connection: streams see write() fail, handlers waiting on work
  // see client_gone(). Waits up to `grace` for handlers to return, then joins the threads.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  TransportStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvasir::http
