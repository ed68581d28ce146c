// The values a quantized block can take, element by element, once its scales are chosen: element
// j decodes to scale[j] * q + offset[j] for an integer q in [qmin, qmax], exactly as the type's
// dequantizer computes it. Error-feedback quantizers (GPTQ) fix a block's scales first (with the
// type's own quantizer), then choose each element's q as they go, and write the q's back.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace kvasir::kernels {

// The q in [qmin, qmax] whose value scale * q + offset is nearest to x (a zero scale: q = 0,
// clamped into the range).
inline int nearest_quant(float x, float scale, float offset, int qmin, int qmax) {
  if (scale == 0.f) return std::clamp(0, qmin, qmax);
  return int(std::clamp(std::nearbyint((x - offset) / scale), float(qmin), float(qmax)));
}

struct BlockGrid {
  int qmin = 0, qmax = 0;
  float scale[256];   // per element of the block (block_size of the type, at most 256)
  float offset[256];
  // The q whose value is nearest to x (ties as nearbyint rounds), and that value.
  int nearest(int j, float x) const { return nearest_quant(x, scale[j], offset[j], qmin, qmax); }
  float value(int j, int q) const { return scale[j] * float(q) + offset[j]; }
};

// Whether the type has a grid here: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool has_block_grid(DType type);
// The grid of one block's scales (its quants are ignored).
void block_grid(DType type, const void* block, BlockGrid& grid);
// The block's quants, as q in [qmin, qmax] (block_size of them), and the quants written back into
// a block whose scales stay as they are.
void block_quants(DType type, const void* block, int* q);
void set_block_quants(DType type, void* block, const int* q);

}  // namespace kvasir::kernels
