// KV calibration: the basis in which a quantized KV cache stores K and V, measured on a short
// text at start-up. Per layer, KV head and channel, from the queries, keys and values of one
// forward pass:
// - keys are shifted by their mean and divided by k_scale = sqrt(sigma_k / rms_q). The mean
//   carries most of a key's size on models such as Gemma 3, yet it moves every score of a query
//   by the same amount; the scale balances a channel's spread against the weight queries give
//   it (the rounding error of a score, q·dk, is smallest so when the error spreads evenly over
//   the rotated channels). Keys are stored after RoPE, so the mean is taken before it and turned
//   into the average of its rotations over positions [0, n_positions): a shift right for every
//   position the cache can hold, not only for those of the text (a rotary pair that turns
//   within the range averages away; one that barely turns keeps its mean). Scales are the same
//   for both channels of a rotary pair, so they commute with RoPE.
// - values are shifted by their mean and divided by sqrt(sigma_v) (attention weights sum to 1,
//   so the shift returns whole).
// Scales are normalized to a geometric mean of 1 per head.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "model/kv_transform.h"
#include "model/model.h"

namespace kvasir::eval {

struct KvCalibrationOptions {
  int64_t n_ctx = 512;             // tokens of the text used (the first ones; BOS first when bos >= 0)
  int64_t n_positions = 4096;      // the positions the cache serves (its context), at most 2^20
  int num_threads = 0;
  int32_t bos = -1;
};

Result<std::shared_ptr<const KvTransform>> calibrate_kv(const Model& model, std::span<const int32_t> tokens,
                                                        const KvCalibrationOptions& options);

}  // namespace kvasir::eval
