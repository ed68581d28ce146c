#include "disagg/transfer_frame.h"

#include <cstring>
#include <string>

namespace kvasir::disagg {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out[at + i] = uint8_t(uint64_t(v) >> (8 * i));
}
template <typename T>
T get(std::span<const uint8_t> in, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(in[at + i]) << (8 * i);
  return T(v);
}

}  // namespace

// Layout: magic u32 | kind u8 | 3 zero bytes | transfer_id u64 | layer u32 | first u32 |
// n_blocks u32 | block_bytes u32 | format_hash u64.
std::vector<uint8_t> encode_header(const Frame& f) {
  std::vector<uint8_t> h(kFrameHeaderBytes, 0);
  put<uint32_t>(h, 0, kFrameMagic);
  h[4] = uint8_t(f.kind);
  put<uint64_t>(h, 8, f.transfer_id);
  put<uint32_t>(h, 16, f.layer);
  put<uint32_t>(h, 20, f.first);
  put<uint32_t>(h, 24, f.n_blocks);
  put<uint32_t>(h, 28, f.block_bytes);
  put<uint64_t>(h, 32, f.format_hash);
  return h;
}

Result<Frame> parse_header(std::span<const uint8_t> h, uint64_t payload_bytes) {
  if (h.size() != kFrameHeaderBytes)
    return Error{"KV frame header of " + std::to_string(h.size()) + " bytes (expected 40)", ErrorCode::invalid_argument};
  if (get<uint32_t>(h, 0) != kFrameMagic) return Error{"not a KV frame (bad magic)", ErrorCode::invalid_argument};
  if (h[5] | h[6] | h[7]) return Error{"KV frame: reserved bytes set", ErrorCode::invalid_argument};
  Frame f;
  const uint8_t kind = h[4];
  if (kind < 1 || kind > 3) return Error{"KV frame of unknown kind " + std::to_string(kind), ErrorCode::invalid_argument};
  f.kind = FrameKind(kind);
  f.transfer_id = get<uint64_t>(h, 8);
  f.layer = get<uint32_t>(h, 16);
  f.first = get<uint32_t>(h, 20);
  f.n_blocks = get<uint32_t>(h, 24);
  f.block_bytes = get<uint32_t>(h, 28);
  f.format_hash = get<uint64_t>(h, 32);
  if (f.n_blocks > kMaxFrameBlocks) return Error{"KV frame names too many blocks", ErrorCode::invalid_argument};
  if (f.kind == FrameKind::blocks) {
    if (f.n_blocks == 0 || f.block_bytes == 0) return Error{"KV frame without blocks", ErrorCode::invalid_argument};
    if (uint64_t(f.first) + f.n_blocks > kMaxFrameBlocks) return Error{"KV frame beyond the block limit", ErrorCode::invalid_argument};
    const uint64_t want = uint64_t(f.n_blocks) * f.block_bytes;
    if (want > kMaxFramePayload || want != payload_bytes)
      return Error{"KV frame of " + std::to_string(payload_bytes) + " payload bytes for " + std::to_string(f.n_blocks) +
                       " blocks of " + std::to_string(f.block_bytes),
                   ErrorCode::invalid_argument};
  } else if (payload_bytes != 0) {
    return Error{"KV control frame with a payload", ErrorCode::invalid_argument};
  }
  return f;
}

uint64_t hash_format(std::string_view format) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : format) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace kvasir::disagg
