#include "model/kv_cache.h"

#include <string>

namespace kvasir {

size_t KvCache::bytes_per_token(const ModelConfig& c, DType type) {
  return row_bytes(type, 2 * c.n_layers * c.kv_dim());
}

size_t KvCache::bytes_per_token(const ModelConfig& c, const KvOptions& o) {
  size_t bytes = 0;
  for (int64_t il = 0; il < c.n_layers; ++il)
    bytes += row_bytes(o.layer_type(il), 2 * c.kv_dim());
  return bytes;
}

Result<KvCache> KvCache::create(const ModelConfig& c, const KvOptions& o) {
  if (o.block_size <= 0 || o.n_blocks <= 0) return Error{"KV cache needs a positive block size and block count"};
  if (!o.layer_types.empty() && int64_t(o.layer_types.size()) != c.n_layers)
    return Error{"KV cache: " + std::to_string(o.layer_types.size()) + " layer types for " + std::to_string(c.n_layers) +
                 " layers", ErrorCode::invalid_argument};
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const DType t = o.layer_type(il);
    if (t != DType::F16 && t != DType::F32 && t != DType::Q8_0 && t != DType::Q4_0)
      return Error{"KV cache type must be f16, f32, q8_0 or q4_0", ErrorCode::invalid_argument};
    if (dtype_info(t).block_size > 1 && c.head_dim % dtype_info(t).block_size != 0)
      return Error{"KV cache type " + std::string(dtype_name(t)) + " needs a head size of whole " +
                       std::to_string(dtype_info(t).block_size) + "-element blocks; this model's is " +
                       std::to_string(c.head_dim),
                   ErrorCode::invalid_argument};
    if (t == DType::Q8_0 && o.block_size % 8 != 0)
      return Error{"KV cache type q8_0 needs a block size that is a multiple of 8; this one is " +
                       std::to_string(o.block_size),
                   ErrorCode::invalid_argument};
    const bool pow2 = c.head_dim > 0 && (c.head_dim & (c.head_dim - 1)) == 0 && c.head_dim <= kernels::kMaxHeadDim;
    if (t == DType::Q4_0 && o.rotate_k && !pow2)
      return Error{"the rotation of 4-bit K needs a power-of-two head size up to " + std::to_string(kernels::kMaxHeadDim) +
                       "; this model's is " + std::to_string(c.head_dim),
                   ErrorCode::invalid_argument};
  }
  if (o.transform) {
    const auto& layers = o.transform->layers;
    bool fits = int64_t(layers.size()) == c.n_layers;
    const size_t n = size_t(c.kv_dim());
    for (const KvLayerTransform& lt : layers)
      for (const auto* x : {&lt.k_shift, &lt.k_scale, &lt.v_shift, &lt.v_scale}) fits = fits && (x->empty() || x->size() == n);
    if (!fits) return Error{"KV cache: the KV transform does not fit this model's layers", ErrorCode::invalid_argument};
  }
  KvCache kv;
  kv.options_ = o;
  kv.n_kv_heads_ = c.n_kv_heads;
  kv.head_dim_ = c.head_dim;
  // K and V of a layer share one pool, alternating per (block, head): [block][kv head][K rows,
  // V rows], so that what attention reads of a block for one head is one contiguous run. Pools
  // start on 64-byte lines; one mapping (huge pages where the OS allows) holds them all.
  size_t total = 0;
  for (int64_t il = 0; il < c.n_layers; ++il) {
    kv.pool_offset_.push_back(total);
    const size_t bytes = row_bytes(o.layer_type(il), 2 * o.n_blocks * o.block_size * c.kv_dim());
    total += (bytes + 63) & ~size_t(63);
  }
  kv.memory_ = HugeBuffer(total);
  if (!kv.memory_.data()) return Error{"cannot allocate " + std::to_string(total >> 20) + " MiB of KV cache"};
  // Committed at start-up, like a GPU engine's KV tensors: no request pays the page faults.
  if (o.populate_in_background) kv.memory_.populate_in_background();
  else kv.memory_.populate();
  return kv;
}

size_t KvCache::block_bytes(int64_t il) const {
  return row_bytes(options_.layer_type(il), 2 * options_.block_size * n_kv_heads_ * head_dim_);
}

kernels::KvLayerView KvCache::layer(int64_t il) const {
  const DType t = options_.layer_type(il);
  uint8_t* k = memory_.data() + pool_offset_[size_t(il)];
  const int64_t run = options_.block_size * head_dim_;  // elements of one head's K (or V) rows of a block
  uint8_t* v = k + row_bytes(t, run);
  const bool rotate = t == DType::Q4_0 && options_.rotate_k;
  kernels::KvLayerView view{k, v, t, options_.block_size, n_kv_heads_, head_dim_, 2 * run, rotate};
  view.rotate_v = rotate;
  if (options_.transform && dtype_info(t).block_size > 1) {
    const KvLayerTransform& lt = options_.transform->layers[size_t(il)];
    auto at = [](const std::vector<float>& x) { return x.empty() ? nullptr : x.data(); };
    view.k_shift = at(lt.k_shift), view.k_scale = at(lt.k_scale);
    view.v_shift = at(lt.v_shift), view.v_scale = at(lt.v_scale);
  }
  return view;
}

}  // namespace kvasir
