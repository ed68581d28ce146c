#include "kv/block_hash.h"

#include <cstring>

namespace kvasir::kv {
namespace {

// splitmix64 finalizer: a bijective 64-bit mix with full avalanche.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t absorb(uint64_t h, uint64_t word) { return mix(h + kGolden + word); }

uint64_t hash_bytes(uint64_t h, std::string_view bytes) {
  h = absorb(h, bytes.size());
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = absorb(h, w);
  }
  uint64_t tail = 0;
  if (i < bytes.size()) std::memcpy(&tail, bytes.data() + i, bytes.size() - i);  // an empty view may have no data
  return absorb(h, tail);
}

}  // namespace

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) {
  // The length goes in first so that blocks of different sizes never line up.
  uint64_t h = absorb(parent, tokens.size());
  size_t i = 0;
  for (; i + 2 <= tokens.size(); i += 2) {
    h = absorb(h, uint64_t(uint32_t(tokens[i])) | uint64_t(uint32_t(tokens[i + 1])) << 32);
  }
  if (i < tokens.size()) h = absorb(h, uint64_t(uint32_t(tokens[i])) | (1ULL << 63));
  return h;
}

BlockHash hash_root(std::string_view model_id, std::string_view salt) {
  // Length-prefixed fields: ("ab", "c") and ("a", "bc") hash apart.
  return hash_bytes(hash_bytes(0x6b76617369722d31ULL, model_id), salt);  // "kvasir-1"
}

}  // namespace kvasir::kv
