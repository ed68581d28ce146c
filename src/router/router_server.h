// `kvasir router`: one OpenAI-compatible endpoint in front of kvasir instances (prefill, decode or
// colocated, one model or several). Requests go through the same admission as `serve` (Host and
// Origin checks, API keys, the JSON body check), are placed by model, prefix affinity and load,
// and relayed (streams piece by piece). A request whose instance fails before answering is placed
// again on another; a stream whose instance dies mid-way ends with an error event, at once.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "http/router.h"
#include "http/transport.h"
#include "router/pool.h"
#include "server/access.h"

namespace kvasir::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  server::AccessOptions access;
  std::vector<InstanceSpec> instances;
  std::string upstream_api_key;  // sent to the instances; empty: the client's Authorization is passed on
  std::chrono::milliseconds upstream_timeout{60000};  // silence from an instance before it counts as failed
  std::chrono::milliseconds health_interval{1000};
  int max_attempts = 3;  // instances tried per request
  int64_t affinity_slack = 2, pooled_affinity_slack = 1;  // PoolOptions'
  size_t max_body_bytes = 8u << 20;
};

struct RouterCounters {
  std::atomic<int64_t> requests{0}, replaced{0}, unplaceable{0}, broken_streams{0}, with_prefill{0};
};

class RouterServer {
 public:
  explicit RouterServer(RouterOptions options);
  ~RouterServer();
  Status bind();
  int port() const { return transport_->port(); }
  void start();
  void stop();

 private:
  void relay(const http::Request& req, http::Response& res);
  void models(http::Response& res) const;
  void metrics(http::Response& res) const;

  RouterOptions options_;
  server::AccessPolicy access_;
  Pool pool_;
  RouterCounters counters_;
  http::Router router_;
  std::unique_ptr<http::Transport> transport_;
};

}  // namespace kvasir::router
