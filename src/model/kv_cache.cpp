#include "model/kv_cache.h"

#include <string>

namespace kvasir {

size_t KvCache::bytes_per_token(const ModelConfig& c, DType type) {
  return size_t(2 * c.n_layers * c.kv_dim()) * (type == DType::F32 ? 4 : 2);
}

Result<KvCache> KvCache::create(const ModelConfig& c, const KvCacheOptions& o) {
  if (o.type != DType::F16 && o.type != DType::F32) return Error{"KV cache type must be f16 or f32"};
  if (o.block_size <= 0 || o.num_blocks <= 0) return Error{"KV cache needs a positive block size and block count"};
  KvCache kv;
  kv.options_ = o;
  kv.n_kv_heads_ = c.n_kv_heads;
  kv.head_dim_ = c.head_dim;
  const size_t bytes = size_t(o.num_blocks * o.block_size * c.kv_dim()) * (o.type == DType::F32 ? 4 : 2);
  // Pools start on 64-byte lines; one mapping (huge pages where the OS allows) holds them all.
  const size_t pool = (bytes + 63) & ~size_t(63);
  kv.memory_ = HugeBuffer(pool * 2 * size_t(c.n_layers));
  if (!kv.memory_.data()) return Error{"cannot allocate " + std::to_string(bytes * 2 * c.n_layers >> 20) + " MiB of KV cache"};
  kv.layers_.resize(size_t(c.n_layers));
  for (size_t il = 0; il < kv.layers_.size(); ++il) {
    kv.layers_[il].k = kv.memory_.data() + (2 * il) * pool;
    kv.layers_[il].v = kv.memory_.data() + (2 * il + 1) * pool;
  }
  return kv;
}

kernels::KvLayerView KvCache::layer(int64_t il) const {
  const Pool& p = layers_[size_t(il)];
  return {p.k, p.v, options_.type, options_.block_size, n_kv_heads_, head_dim_};
}

}  // namespace kvasir
