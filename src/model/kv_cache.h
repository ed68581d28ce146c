// Paged KV storage: per layer, a pool of num_blocks fixed-size blocks holding K and V. Which block
// belongs to which sequence is decided elsewhere (block tables); this class only owns the memory.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/huge_buffer.h"
#include "core/status.h"
#include "kernels/attention.h"
#include "model/config.h"
#include "model/kv_transform.h"

namespace kvasir {

// How K and V are stored, and how much of them: the one set of KV settings, from the command
// line through the runner to the KvCache.
struct KvOptions {
  int64_t n_blocks = 0;     // exact number of blocks (KvCache::create needs it); 0: from mem_bytes
  uint64_t mem_bytes = 0;   // budget when n_blocks is 0; 0 as well: the runner's default size
  int64_t block_size = 16;  // token positions per block
  // F16, F32, Q8_0 or Q4_0 (the quantized types need a head_dim of whole 32-element blocks).
  DType type = DType::F16;
  std::vector<DType> layer_types = {};  // one per layer (empty: `type` in every layer)
  bool rotate_k = true;  // Q4_0 layers store K and V Hadamard-rotated (a power-of-two head_dim)
  // Quantized layers store K and V in this basis (KV calibration); null: as they are.
  std::shared_ptr<const KvTransform> transform = nullptr;
  // The pool's pages are committed by a background thread (serve: ready at once, its first
  // requests may meet a page fault) instead of before create() returns.
  bool populate_in_background = false;
  DType layer_type(int64_t il) const { return layer_types.empty() ? type : layer_types[size_t(il)]; }
};

class KvCache {
 public:
  static Result<KvCache> create(const ModelConfig& config, const KvOptions& options);

  kernels::KvLayerView layer(int64_t il) const;  // a stored layer's
  int64_t num_blocks() const { return options_.n_blocks; }
  int64_t block_size() const { return options_.block_size; }
  DType type() const { return options_.type; }
  const KvOptions& options() const { return options_; }
  // One block of layer il: its K and V for every KV head, one contiguous run of block_bytes(il)
  // bytes (what KV block I/O copies).
  size_t block_bytes(int64_t il) const;
  uint8_t* block_data(int64_t il, int64_t block) const {
    return memory_.data() + pool_offset_[size_t(il)] + size_t(block) * block_bytes(il);
  }
  // Bytes of K+V for one token across all layers.
  static size_t bytes_per_token(const ModelConfig& config, DType type);
  static size_t bytes_per_token(const ModelConfig& config, const KvOptions& options);

 private:
  KvOptions options_;
  HugeBuffer memory_;  // every layer's pool (K and V interleaved per block and head), one mapping
  std::vector<size_t> pool_offset_;  // per layer
  int64_t n_kv_heads_ = 0, head_dim_ = 0;
};

}  // namespace kvasir
