// The KV transfer's wire format: every message is one frame, a fixed 40-byte header (little
// endian) and a payload. A prefill instance sends a transfer's blocks layer by layer (`blocks`
// frames, a run of consecutive blocks of the transfer's list each) and ends with `done` (or
// `abort`); the decode instance parses every header here before it touches its KV. Pure:
// hostile bytes get an error, never a read out of bounds (fuzzed by fuzz_transfer).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvasir::disagg {

enum class FrameKind : uint8_t { blocks = 1, done = 2, abort = 3 };

struct Frame {
  FrameKind kind = FrameKind::blocks;
  uint64_t transfer_id = 0;
  uint32_t layer = 0;        // blocks: the layer these bytes belong to
  uint32_t first = 0;        // blocks: index of the first block in the transfer's block list
  uint32_t n_blocks = 0;     // blocks: how many; done: the transfer's block count
  uint32_t block_bytes = 0;  // blocks: bytes per block in this layer; done: 0
  uint64_t format_hash = 0;  // the sender's kv_format() hashed: both ends must agree
};

inline constexpr size_t kFrameHeaderBytes = 40;
inline constexpr uint32_t kFrameMagic = 0x3158564b;  // "KVX1"
inline constexpr uint32_t kMaxFrameBlocks = 1u << 20;
inline constexpr uint64_t kMaxFramePayload = uint64_t(1) << 32;

std::vector<uint8_t> encode_header(const Frame& frame);
// The header, checked: magic, a known kind, sizes that multiply to exactly payload_bytes (blocks)
// or no payload (done, abort), counts within the limits.
Result<Frame> parse_header(std::span<const uint8_t> header, uint64_t payload_bytes);

// FNV-1a of a KV format string (runtime::ModelRunner::kv_format()).
uint64_t hash_format(std::string_view format);

}  // namespace kvasir::disagg
