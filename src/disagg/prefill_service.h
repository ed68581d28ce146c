// The prefill instance's side of disaggregation: runs a prompt as a prefill-only request whose KV
// blocks are pinned as its chunks compute them, and ships each chunk's blocks to the decode
// instance that asked (its UCX listener) while the next chunk computes, skipping the blocks that
// instance already holds. The pin is released however the transfer ends.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "disagg/counters.h"
#include "disagg/kv_transfer.h"
#include "disagg/ucx_node.h"
#include "engine/engine.h"

namespace kvasir::disagg {

// What a decode instance asks of a prefill instance (POST /internal/kv/prefill).
struct PrefillRequest {
  uint64_t transfer_id = 0;
  std::vector<int32_t> tokens;
  std::string cache_salt;
  int32_t skip_blocks = 0;          // leading full blocks the decode instance already holds
  std::string kv_format;            // the decode instance's: must be this instance's
  std::string target_host;          // the decode instance's UCX listener
  uint16_t target_port = 0;
  std::chrono::milliseconds timeout{5000};
};
// Parsed and checked (ids in range is the engine's check); errors name the field.
Result<PrefillRequest> parse_prefill_request(const nlohmann::ordered_json& body);
nlohmann::json to_json(const PrefillRequest& r);

struct PrefillResult {
  int32_t n_blocks = 0;  // sent
  int32_t n_pieces = 0;  // runs of blocks sent as the prefill's chunks completed them
  int64_t bytes = 0;
  double prefill_ms = 0;   // the prompt's compute, from the request's arrival
  double transfer_ms = 0;  // while any frame was in flight (mostly beside the prefill)
  double tail_ms = 0;      // from the prefill's end to the `done` frame: what the transfer added
};

class KvPusher {
 public:
  static Result<std::unique_ptr<KvPusher>> create(engine::Engine& engine);
  // Blocks until every block was sent (or it failed). Any thread.
  Result<PrefillResult> push(const PrefillRequest& request);
  PushCounters counters() const;

 private:
  explicit KvPusher(engine::Engine& engine) : engine_(engine) {}
  Result<PeerId> peer_for(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
  void forget(PeerId peer);

  engine::Engine& engine_;
  std::unique_ptr<UcxNode> node_;
  SendBuffers buffers_;
  mutable std::mutex mutex_;
  std::map<std::string, PeerId> peers_;  // "host:port" -> connection, reused
  PushCounters counters_;
};

}  // namespace kvasir::disagg
