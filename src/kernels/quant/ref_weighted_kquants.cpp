// The k-quants weighted by an importance matrix, byte-identical to ggml's
// quantize_row_q{2,3,4,5,6}_K_impl with quant_weights (what llama-quantize --imatrix runs).
// Q2_K..Q5_K weigh element j by imp_j * sqrt(sigma2 + x_j^2), sigma2 the super-block's mean
// square (doubled for Q3_K, Q4_K, Q5_K), search each sub-block's scale (and minimum) under those
// weights, and then quantize the sub-block scales against the super-block scale weighted by each
// sub-block's total weight (make_qp_quants, or make_qx_quants for Q3_K's signed scales) instead
// of by plain rounding. Q6_K only passes imp itself as the weights of its sub-block search.
#include "kernels/quant/no_contract.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/kquant_search.h"
#include "kernels/quant/ref.h"
#include "kernels/quant/round.h"

namespace kvasir::kernels::ref {
namespace {

// factor * (mean of x^2) over one super-block, summed in element order.
float superblock_sigma2(const float* x, float factor) {
  float sum_x2 = 0;
  for (int j = 0; j < kQK; ++j) sum_x2 += x[j] * x[j];
  return factor * sum_x2 / kQK;
}

// w_j = imp_j * sqrt(sigma2 + x_j^2) for n elements; returns their sum.
float sub_block_weights(const float* x, const float* imp, float sigma2, int n, float* w) {
  float sum_w = 0;
  for (int j = 0; j < n; ++j) w[j] = imp[j] * std::sqrt(sigma2 + x[j] * x[j]);
  for (int j = 0; j < n; ++j) sum_w += w[j];
  return sum_w;
}

// Q4_K (nmax 15) and Q5_K (nmax 31): per-32 (scale, min) search under the importance weights,
// 6-bit codes for both from make_qp_quants (Q5_K clamps them to 63, Q4_K does not), then L
// requantized against the decoded scales.
template <int nmax, bool clamp_codes>
void scale_min_k4_weighted(const float* x, const float* imp, uint16_t& d_out, uint16_t& dmin_out,
                           uint8_t* scales, uint8_t* L) {
  constexpr int kSub = kQK / 32;
  float w[32], sw[kSub], mins[kSub], sub_scales[kSub];
  uint8_t Laux[32], Ls[kSub], Lm[kSub];
  const float sigma2 = superblock_sigma2(x, 2.f);
  for (int j = 0; j < kSub; ++j) {
    sw[j] = sub_block_weights(x + 32 * j, imp + 32 * j, sigma2, 32, w);
    // ggml's make_qkx3_quants, the same search as make_qkx2_quants for non-null weights.
    sub_scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.9f,
                                     0.05f, 36, false);
  }
  const float d_block = make_qp_quants(kSub, 63, sub_scales, Ls, sw);
  const float m_block = make_qp_quants(kSub, 63, mins, Lm, sw);
  if constexpr (clamp_codes) {
    for (int j = 0; j < kSub; ++j) {
      Ls[j] = std::min<uint8_t>(63, Ls[j]);
      Lm[j] = std::min<uint8_t>(63, Lm[j]);
    }
  }
  std::memset(scales, 0, 12);
  pack_scale_min_k4(Ls, Lm, scales);
  d_out = f32_to_fp16(d_block);
  dmin_out = f32_to_fp16(m_block);
  requantize_scale_min_k4(x, nmax, d_out, dmin_out, scales, L);
}

}  // namespace

void quantize_q2_k_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  constexpr int kSub = kQK / 16;
  uint8_t L[kQK], Laux[16], Ls[kSub], Lm[kSub];
  float w[16], sw[kSub], mins[kSub], scales[kSub];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, imp += kQK) {
    const float sigma2 = superblock_sigma2(x, 1.f);
    for (int j = 0; j < kSub; ++j) {
      sw[j] = sub_block_weights(x + 16 * j, imp + 16 * j, sigma2, 16, w);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f,
                                   36, false);
    }
    y[i].d = f32_to_fp16(make_qp_quants(kSub, 15, scales, Ls, sw));
    y[i].dmin = f32_to_fp16(make_qp_quants(kSub, 15, mins, Lm, sw));
    const float dm = fp16_to_f32(y[i].d), mm = fp16_to_f32(y[i].dmin);
    for (int j = 0; j < kSub; ++j) y[i].scales[j] = uint8_t(Ls[j] | (Lm[j] << 4));
    for (int j = 0; j < kSub; ++j) {
      const float d = dm * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float m = mm * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + m) / d);
        L[16 * j + ii] = uint8_t(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

void quantize_q3_k_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  constexpr int kSub = kQK / 16;
  int8_t L[kQK], Ls[kSub];
  float w[16], sw[kSub], scales[kSub];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, imp += kQK) {
    const float sigma2 = superblock_sigma2(x, 2.f);
    for (int j = 0; j < kSub; ++j) {
      sw[j] = sub_block_weights(x + 16 * j, imp + 16 * j, sigma2, 16, w);
      scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, w);
    }
    // The signed sub-block scales as 6-bit codes (offset 32 already) against one scale.
    std::memset(y[i].scales, 0, 12);
    const float d_block = make_qx_quants(kSub, 32, scales, Ls, sw);
    for (int j = 0; j < kSub; ++j) {
      int l = Ls[j];
      if (j < 8)
        y[i].scales[j] = uint8_t(l & 0xF);
      else
        y[i].scales[j - 8] |= uint8_t((l & 0xF) << 4);
      l >>= 4;
      y[i].scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
    }
    y[i].d = f32_to_fp16(d_block);
    quantize_q3_k_with_scales(x, L, y[i]);
  }
}

void quantize_q4_k_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, imp += kQK) {
    scale_min_k4_weighted<15, false>(x, imp, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

void quantize_q5_k_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, imp += kQK) {
    scale_min_k4_weighted<31, true>(x, imp, y[i].d, y[i].dmin, y[i].scales, L);
    pack_q5_k(L, y[i]);
  }
}

void quantize_q6_k_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  quantize_q6_k_searched(x, dst, n, imp);  // only the sub-block search takes the weights
}

}  // namespace kvasir::kernels::ref
