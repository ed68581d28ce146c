// Paged KV storage: per layer, K and V pools of num_blocks fixed-size blocks. Which block belongs
// to which sequence is decided elsewhere (block tables); this class only owns the memory.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/huge_buffer.h"
#include "core/status.h"
#include "kernels/attention.h"
#include "model/config.h"

namespace kvasir {

struct KvCacheOptions {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  DType type = DType::F16;  // F16 or F32
};

class KvCache {
 public:
  static Result<KvCache> create(const ModelConfig& config, const KvCacheOptions& options);

  kernels::KvLayerView layer(int64_t il) const;
  int64_t num_blocks() const { return options_.num_blocks; }
  int64_t block_size() const { return options_.block_size; }
  DType type() const { return options_.type; }
  // Bytes of K+V for one token across all layers.
  static size_t bytes_per_token(const ModelConfig& config, DType type);

 private:
  struct Pool {
    uint8_t *k = nullptr, *v = nullptr;  // inside memory_
  };
  KvCacheOptions options_;
  HugeBuffer memory_;  // every layer's K and V pools, one mapping
  int64_t n_kv_heads_ = 0, head_dim_ = 0;
  std::vector<Pool> layers_;
};

}  // namespace kvasir
