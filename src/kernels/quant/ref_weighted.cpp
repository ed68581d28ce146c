// Quantizers weighted by an importance matrix, byte-identical to ggml's quantize_row_*_impl with
// quant_weights (what llama-quantize --imatrix runs): each element's error counts with weight
// imp_j * sqrt(sigma2 + x_j^2), sigma2 the row's mean square, and the block's scale (and minimum)
// is searched under that weighting.
#include "kernels/quant/no_contract.h"

#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/kquant_search.h"
#include "kernels/quant/ref.h"

namespace kvasir::kernels::ref {
namespace {

float row_sigma2(const float* x, int64_t n) {
  float sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
  return sum_x2 / float(n);
}

void block_weights(const float* xb, const float* imp, float sigma2, float* w) {
  for (int j = 0; j < kQ; ++j) w[j] = imp[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
}

uint32_t pack_nibbles_and_fifth_bits(const uint8_t* L, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < kQ / 2; ++j) {
    qs[j] = uint8_t((L[j] & 0x0F) | ((L[j + kQ / 2] & 0x0F) << 4));
    qh |= uint32_t((L[j] & 0x10u) >> 4) << j;
    qh |= uint32_t((L[j + kQ / 2] & 0x10u) >> 4) << (j + kQ / 2);
  }
  return qh;
}

// Symmetric: quants in [0, 2 nmax), scale searched by make_qx_quants.
template <typename Block, int nmax, bool fifth_bit>
void symmetric(const float* x, void* dst, int64_t n, const float* imp) {
  auto* y = static_cast<Block*>(dst);
  const float sigma2 = row_sigma2(x, n);
  float w[kQ];
  int8_t L[kQ];
  for (int64_t ib = 0; ib < n / kQ; ++ib) {
    const float* xb = x + kQ * ib;
    block_weights(xb, imp + kQ * ib, sigma2, w);
    y[ib].d = f32_to_fp16(make_qx_quants(kQ, nmax, xb, L, w));
    if constexpr (fifth_bit) {
      const uint32_t qh = pack_nibbles_and_fifth_bits(reinterpret_cast<const uint8_t*>(L), y[ib].qs);
      std::memcpy(y[ib].qh, &qh, 4);
    } else {
      for (int j = 0; j < kQ / 2; ++j) y[ib].qs[j] = uint8_t(L[j] | (L[j + kQ / 2] << 4));
    }
  }
}

// With a minimum: quants in [0, nmax], scale and minimum searched by make_qkx2_quants (ggml's
// make_qkx3_quants there, the same search for non-null weights).
template <typename Block, int nmax, bool fifth_bit>
void with_min(const float* x, void* dst, int64_t n, const float* imp) {
  auto* y = static_cast<Block*>(dst);
  const float sigma2 = row_sigma2(x, n);
  float w[kQ];
  uint8_t L[kQ], Laux[kQ];
  for (int64_t ib = 0; ib < n / kQ; ++ib) {
    const float* xb = x + kQ * ib;
    block_weights(xb, imp + kQ * ib, sigma2, w);
    float neg_min = 0;
    const float d = make_qkx2_quants(kQ, nmax, xb, w, L, &neg_min, Laux, -0.9f, 0.05f, 36, false);
    y[ib].d = f32_to_fp16(d);
    y[ib].m = f32_to_fp16(-neg_min);
    if constexpr (fifth_bit) {
      const uint32_t qh = pack_nibbles_and_fifth_bits(L, y[ib].qs);
      std::memcpy(y[ib].qh, &qh, 4);
    } else {
      for (int j = 0; j < kQ / 2; ++j) y[ib].qs[j] = uint8_t(L[j] | (L[j + kQ / 2] << 4));
    }
  }
}

}  // namespace

void quantize_q4_0_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  symmetric<BlockQ4_0, 8, false>(x, dst, n, imp);
}
void quantize_q5_0_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  symmetric<BlockQ5_0, 16, true>(x, dst, n, imp);
}
void quantize_q4_1_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  with_min<BlockQ4_1, 15, false>(x, dst, n, imp);
}
void quantize_q5_1_weighted(const float* x, void* dst, int64_t n, const float* imp) {
  with_min<BlockQ5_1, 31, true>(x, dst, n, imp);
}

}  // namespace kvasir::kernels::ref
