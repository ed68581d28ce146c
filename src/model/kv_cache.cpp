#include "model/kv_cache.h"

#include <string>

namespace kvasir {

size_t KvCache::bytes_per_token(const ModelConfig& c, DType type) {
  return row_bytes(type, 2 * c.n_layers * c.kv_dim());
}

Result<KvCache> KvCache::create(const ModelConfig& c, const KvCacheOptions& o) {
  if (o.type != DType::F16 && o.type != DType::F32) return Error{"KV cache type must be f16 or f32"};
  if (o.block_size <= 0 || o.num_blocks <= 0) return Error{"KV cache needs a positive block size and block count"};
  KvCache kv;
  kv.options_ = o;
  kv.n_kv_heads_ = c.n_kv_heads;
  kv.head_dim_ = c.head_dim;
  // K and V of a layer share one pool, alternating per (block, head): [block][kv head][K rows,
  // V rows], so that what attention reads of a block for one head is one contiguous run. Pools
  // start on 64-byte lines; one mapping (huge pages where the OS allows) holds them all.
  const size_t bytes = row_bytes(o.type, 2 * o.num_blocks * o.block_size * c.kv_dim());
  const size_t pool = (bytes + 63) & ~size_t(63);
  kv.memory_ = HugeBuffer(pool * size_t(c.n_layers));
  if (!kv.memory_.data()) return Error{"cannot allocate " + std::to_string(bytes * c.n_layers >> 20) + " MiB of KV cache"};
  // Committed at start-up, like a GPU engine's KV tensors: no request pays the page faults.
  kv.memory_.populate();
  kv.pool_bytes_ = pool;
  return kv;
}

kernels::KvLayerView KvCache::layer(int64_t il) const {
  uint8_t* k = memory_.data() + size_t(il) * pool_bytes_;
  const int64_t run = options_.block_size * head_dim_;  // elements of one head's K (or V) rows of a block
  uint8_t* v = k + row_bytes(options_.type, run);
  return {k, v, options_.type, options_.block_size, n_kv_heads_, head_dim_, 2 * run};
}

}  // namespace kvasir
