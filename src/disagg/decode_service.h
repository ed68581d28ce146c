// The decode instance's side of disaggregation: before a request's prompt is computed here, its
// KV is fetched from the prefill instance the router named. The full blocks this instance's prefix
// cache lacks are reserved, the prefill instance is asked (HTTP) to compute and send them (UCX),
// and once all arrived they enter the prefix cache, so the request (and the conversation's next
// turn) hits there. Whatever goes wrong, within one timeout nothing is left behind and the engine
// computes the prompt itself.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "disagg/counters.h"
#include "disagg/kv_transfer.h"
#include "disagg/ucx_node.h"
#include "engine/engine.h"

namespace kvasir::disagg {

struct PullOptions {
  std::string listen_host = "127.0.0.1";  // this instance's UCX listener (what prefill instances connect to)
  uint16_t listen_port = 0;               // 0: any free port
  std::chrono::milliseconds timeout{5000};  // --kv-transfer-timeout: the whole fetch, prefill included
  int32_t min_tokens = 64;                  // shorter prompts are computed here
  std::string api_key;                      // sent to the prefill instance
  // Prefill instances this one may be pointed at (http://host:port); empty: any.
  std::vector<std::string> allowed_prefill;
};

class KvPuller {
 public:
  static Result<std::unique_ptr<KvPuller>> create(engine::Engine& engine, const PullOptions& options);
  uint16_t port() const { return node_->port(); }
  // Brings the prompt's KV from the prefill instance at `prefill_url` (http://host:port) into the
  // prefix cache. An error says why not; the request then runs as usual. Any thread.
  Status pull(std::span<const int32_t> tokens, const std::string& salt, const std::string& prefill_url);
  PullCounters counters() const;

 private:
  KvPuller(engine::Engine& engine, PullOptions options) : engine_(engine), options_(std::move(options)) {}
  engine::Engine& engine_;
  PullOptions options_;
  std::unique_ptr<KvReceiver> rx_;
  std::unique_ptr<UcxNode> node_;
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex mutex_;
  PullCounters counters_;
};

}  // namespace kvasir::disagg
