// A KV transfer between two runners of the same kv_format(): the prefill side sends named blocks
// layer by layer (send_kv), the decode side writes them into blocks it reserved (KvReceiver).
// Every transfer has an id, a deadline and one end state: done, failed (a bad or missing frame,
// the peer gone, an abort) or expired. Once the receiver reports the end, no frame of that
// transfer touches the runner's KV again, so its blocks can be freed or used.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "disagg/transfer_frame.h"
#include "disagg/ucx_node.h"
#include "runtime/model_runner.h"

namespace kvasir::disagg {

enum class TransferEnd { done, failed, expired };
const char* transfer_end_name(TransferEnd end);

struct TransferCounters {
  int64_t done = 0, failed = 0, expired = 0;
  int64_t rejected_frames = 0;  // malformed, unknown transfer, wrong format or geometry
  int64_t bytes = 0;            // KV bytes written
};

class KvReceiver {
 public:
  // Frames are written into `runner`'s KV (import_kv, which is safe beside its forwards: the
  // blocks are the reservation's, which no request uses).
  explicit KvReceiver(runtime::ModelRunner& runner);

  // Expects transfer `id` of blocks[i] for i in [0, blocks.size()), every layer.
  Status expect(uint64_t id, std::vector<int32_t> blocks);
  // What the transport delivers (any thread).
  void on_message(PeerId peer, std::span<const uint8_t> header, std::span<const uint8_t> payload);
  void on_peer_down(PeerId peer);
  // Waits for the transfer's end, or until `deadline` (then it expired), and forgets it.
  TransferEnd wait(uint64_t id, std::chrono::steady_clock::time_point deadline, std::string* why = nullptr);
  TransferCounters counters() const;
  size_t n_active() const;

 private:
  struct Transfer {
    std::vector<int32_t> blocks;
    std::vector<uint8_t> received;  // [layer][block]
    int64_t n_received = 0;
    PeerId peer = 0;
    bool ended = false;
    TransferEnd end = TransferEnd::failed;
    std::string why;
  };
  void end(Transfer& t, TransferEnd e, std::string why);
  void reject(const std::string& why);

  runtime::ModelRunner& runner_;
  const uint64_t format_hash_;
  const int64_t n_layers_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::unordered_map<uint64_t, Transfer> transfers_;
  TransferCounters counters_;
};

// Payload buffers reused across frames and transfers: a fresh multi-megabyte buffer per frame
// costs a page fault per 4 KiB and a zero fill. Thread-safe; a buffer comes back when the
// transport is done with it, and at most 64 MiB wait for reuse.
class SendBuffers {
 public:
  std::shared_ptr<std::vector<uint8_t>> take(size_t n);

 private:
  struct Spare {
    std::mutex mutex;
    std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers;
    size_t bytes = 0;
  };
  std::shared_ptr<Spare> spare_ = std::make_shared<Spare>();
};

struct SendOptions {
  std::chrono::steady_clock::time_point deadline;
  size_t max_frame_bytes = size_t(16) << 20;  // blocks per frame: as many as fit
  size_t max_in_flight_bytes = size_t(64) << 20;
  SendBuffers* buffers = nullptr;  // null: a fresh buffer per frame
};

// Sends blocks[i] of `runner`, every layer, as transfer `id` to `peer`, then its `done` frame;
// returns once every frame was sent (ok), one failed, or the deadline passed (then an `abort`
// frame is sent on a best-effort basis). Export runs on the calling thread.
Status send_kv(UcxNode& node, PeerId peer, uint64_t id, const runtime::ModelRunner& runner,
               std::span<const int32_t> blocks, const SendOptions& options);

}  // namespace kvasir::disagg
