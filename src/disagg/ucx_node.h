// One UCX worker with a progress thread of its own: a listener that accepts peers, connections to
// peers, and messages sent as active messages (a header and a payload). UCX picks the transport:
// shared memory between processes of one host, TCP between hosts, RDMA where the hardware has it.
// Every UCX call runs on the progress thread; the public methods post work to it and are safe
// from any thread. A peer that dies or is cut off is reported once, through on_peer_down.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvasir::disagg {

using PeerId = uint64_t;

struct UcxCallbacks {
  // A whole message arrived (on the progress thread). Peer 0: a sender not known as a peer. The
  // payload is valid during the call only: the node reuses its receive buffers.
  std::function<void(PeerId, std::span<const uint8_t> header, std::span<const uint8_t> payload)> on_message;
  // A peer's connection failed or closed (on the progress thread).
  std::function<void(PeerId, const std::string& why)> on_peer_down;
};

struct UcxOptions {
  std::string listen_host;       // empty: no listener (a node that only connects)
  uint16_t listen_port = 0;      // 0: an ephemeral port (port() says which)
  uint64_t max_message_bytes = uint64_t(1) << 30;  // larger messages close their peer
};

class UcxNode {
 public:
  static Result<std::unique_ptr<UcxNode>> create(const UcxOptions& options, UcxCallbacks callbacks);
  ~UcxNode();  // closes every endpoint and stops the thread; callbacks are not called after it
  UcxNode(const UcxNode&) = delete;
  UcxNode& operator=(const UcxNode&) = delete;

  uint16_t port() const;  // the listener's (0 without one)
  // Connects and waits until the connection is up (or fails, or `timeout` passes).
  Result<PeerId> connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
  // Sends one message; `done` (on the progress thread) gets its outcome. The payload stays alive
  // until then.
  void send(PeerId peer, std::vector<uint8_t> header, std::shared_ptr<const std::vector<uint8_t>> payload,
            std::function<void(Status)> done);
  void disconnect(PeerId peer);

  struct Impl;

 private:
  explicit UcxNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvasir::disagg
