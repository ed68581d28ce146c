// KV calibration's result: per layer and KV head, the change of basis in which quantized KV
// storage rounds K and V (kernels::KvLayerView's k_shift, k_scale, v_shift, v_scale). Exact in
// real arithmetic, so only the rounding it steers changes. Measured once on a short text at
// start-up (eval/kv_calibration.h).
#pragma once
#include <vector>

namespace kvasir {

struct KvLayerTransform {
  // Each [n_kv_heads][head_dim]; empty: none (k_shift is left empty for models whose attention
  // scores are soft-capped, where a constant per query would not cancel).
  std::vector<float> k_shift, k_scale, v_shift, v_scale;
};

struct KvTransform {
  std::vector<KvLayerTransform> layers;  // one per model layer
};

}  // namespace kvasir
