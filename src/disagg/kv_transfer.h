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

// One transfer's sending side, fed as the blocks become ready: send() ships a run of the
// transfer's blocks, every layer, and returns once its frames are queued (at most
// max_in_flight_bytes wait at a time); finish() waits for every frame and sends `done`. A sender
// that failed, or that is destroyed unfinished, sends an `abort` frame (best effort), so the
// receiver ends at once rather than at its deadline. Export runs on the calling thread.
class KvSender {
 public:
  KvSender(UcxNode& node, PeerId peer, uint64_t id, const runtime::ModelRunner& runner, const SendOptions& options);
  ~KvSender();
  KvSender(const KvSender&) = delete;
  KvSender& operator=(const KvSender&) = delete;

  // blocks[i] is the transfer's block `first + i` (an index into the receiver's list).
  Status send(std::span<const int32_t> blocks, uint32_t first);
  // Every frame sent, then `done` for a transfer of n_blocks blocks.
  Status finish(uint32_t n_blocks);
  // Ends the transfer as failed (an `abort` frame), unless it already ended.
  void abort() { (void)give_up({}); }
  // Time during which any of its frames was in flight: the transfer's own time.
  double busy_ms() const;

 private:
  struct InFlight;
  Status give_up(Status why);
  bool wait_until_window(size_t bytes);

  UcxNode& node_;
  const PeerId peer_;
  const uint64_t id_;
  const runtime::ModelRunner& runner_;
  const SendOptions options_;
  const uint64_t format_hash_;
  std::shared_ptr<InFlight> flight_;
  bool ended_ = false;  // finished, or aborted
};

// Sends blocks[i] of `runner`, every layer, as transfer `id` to `peer`, then its `done` frame;
// returns once every frame was sent (ok), one failed, or the deadline passed (then an `abort`
// frame is sent on a best-effort basis).
Status send_kv(UcxNode& node, PeerId peer, uint64_t id, const runtime::ModelRunner& runner,
               std::span<const int32_t> blocks, const SendOptions& options);

}  // namespace kvasir::disagg
