// Reference quantize / dequantize of the k-quants (Q2_K..Q6_K) and of Q8_K, byte-identical to
// ggml's quantize_row_*_ref: per sub-block scale search, then the sub-block scales themselves
// quantized against one fp16 super-block scale, then every element re-quantized against the
// scale it will actually be decoded with.
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

void requantize_scale_min_k4(const float* x, int nmax, uint16_t d_out, uint16_t dmin_out, const uint8_t* scales,
                             uint8_t* L) {
  for (int j = 0; j < kQK / 32; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(j, scales, sc, m);
    const float d = fp16_to_f32(d_out) * sc;
    if (!d) continue;
    const float dm = fp16_to_f32(dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

namespace {

// Shared by Q4_K and Q5_K: per-32 (scale, min) search, 6-bit scale/min codes, requantized L.
void quantize_scale_min_k4(const float* x, int nmax, float rmin, float rdelta, int nstep,
                           uint16_t& d_out, uint16_t& dmin_out, uint8_t* scales, uint8_t* L) {
  float mins[kQK / 32], sub_scales[kQK / 32], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQK / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    sub_scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, rdelta, nstep, false);
    if (sub_scales[j] > max_scale) max_scale = sub_scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < kQK / 32; ++j) {
    // ggml stores nearest_int into a uint8_t before clamping; keep that wrap-around.
    ls[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * sub_scales[j])));
    lm[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
  }
  std::memset(scales, 0, 12);
  pack_scale_min_k4(ls, lm, scales);
  d_out = f32_to_fp16(max_scale / 63.f);
  dmin_out = f32_to_fp16(max_min / 63.f);
  requantize_scale_min_k4(x, nmax, d_out, dmin_out, scales, L);
}

}  // namespace

void quantize_q2_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  constexpr float q4scale = 15.f;
  uint8_t L[kQK], Laux[16];
  float weights[16], mins[kQK / 16], scales[kQK / 16];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < kQK / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                   0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQK / 16; ++j) y[i].scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      y[i].d = f32_to_fp16(max_scale / q4scale);
    } else {
      std::memset(y[i].scales, 0, sizeof y[i].scales);
      y[i].d = f32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQK / 16; ++j)
        y[i].scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
      y[i].dmin = f32_to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = f32_to_fp16(0.f);
    }
    for (int j = 0; j < kQK / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = fp16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = uint8_t(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

void quantize_q3_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  int8_t L[kQK];
  float scales[kQK / 16];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < kQK / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(y[i].scales, 0, 12);
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQK / 16; ++j) {
        int8_t l = int8_t(nearest_int(iscale * scales[j]));
        l = int8_t(std::max(-32, std::min(31, int(l))) + 32);
        if (j < 8)
          y[i].scales[j] = uint8_t(l & 0xF);
        else
          y[i].scales[j - 8] |= uint8_t((l & 0xF) << 4);
        l = int8_t(l >> 4);
        y[i].scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
      }
      y[i].d = f32_to_fp16(1 / iscale);
    } else {
      y[i].d = f32_to_fp16(0.f);
    }
    quantize_q3_k_with_scales(x, L, y[i]);
  }
}

void quantize_q3_k_with_scales(const float* x, int8_t* L, BlockQ3_K& y) {
  int8_t sc[16];
  unpack_scales_q3_k(y.scales, sc);
  for (int j = 0; j < kQK / 16; ++j) {
    const float d = fp16_to_f32(y.d) * sc[j];
    if (!d) continue;  // as ggml: a zero sub-block keeps the search's codes
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = int8_t(std::max(-4, std::min(3, l)) + 4);
    }
  }
  // High bit of element j goes to hmask[j % 32], bit j / 32.
  std::memset(y.hmask, 0, sizeof y.hmask);
  uint8_t low[kQK];
  for (int j = 0; j < kQK; ++j) {
    int l = L[j];
    if (l > 3) {
      y.hmask[j % 32] |= uint8_t(1 << (j / 32));
      l -= 4;
    }
    low[j] = uint8_t(l);
  }
  pack_2bit(low, y.qs);
}

void quantize_q4_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    quantize_scale_min_k4(x, 15, -1.f, 0.1f, 20, y[i].d, y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

void pack_q5_k(const uint8_t* L, BlockQ5_K& y) {
  // Low nibbles as Q4_K; the fifth bit of the pair (j, j+32) of 64-group g goes to qh[j]
  // bits 2g and 2g+1.
  std::memset(y.qh, 0, sizeof y.qh);
  uint8_t* ql = y.qs;
  for (int g = 0; g < kQK / 64; ++g, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      const int l1 = L[64 * g + j], l2 = L[64 * g + j + 32];
      y.qh[j] |= uint8_t(((l1 >> 4) << (2 * g)) | ((l2 >> 4) << (2 * g + 1)));
      ql[j] = uint8_t((l1 & 0xF) | ((l2 & 0xF) << 4));
    }
  }
}

void quantize_q5_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    quantize_scale_min_k4(x, 31, -0.5f, 0.1f, 15, y[i].d, y[i].dmin, y[i].scales, L);
    pack_q5_k(L, y[i]);
  }
}

void quantize_q6_k(const float* x, void* dst, int64_t n) { quantize_q6_k_searched(x, dst, n, nullptr); }

void quantize_q6_k_searched(const float* x, void* dst, int64_t n, const float* imp) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  int8_t L[kQK];
  float scales[kQK / 16];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, imp = imp ? imp + kQK : nullptr) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQK / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, imp ? imp + 16 * ib : nullptr);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < 1e-15f) {  // ggml's GROUP_MAX_EPS: an all-zero super-block
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK / 16; ++ib)
      y[i].scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < kQK / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * y[i].scales[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = int8_t(std::max(-32, std::min(31, l)) + 32);
      }
    }
    // Per 128: ql[l] = low nibbles of (l, l+64), ql[l+32] = of (l+32, l+96); qh[l] = the four
    // high bit pairs of l, l+32, l+64, l+96.
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
        ql[l] = uint8_t((a & 0xF) | ((c & 0xF) << 4));
        ql[l + 32] = uint8_t((b & 0xF) | ((e & 0xF) << 4));
        qh[l] = uint8_t((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      // ggml leaves bsums untouched here; zero them so the block is fully defined (a zero
      // block's bsums are zero anyway).
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    // -127 rather than -128 keeps every quant in [-127, 127] (ggml does the same).
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQK / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = int16_t(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void dequantize_q2_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    for (int e = 0; e < kQK; ++e) {
      // Element e: byte (e/128)*32 + e%32, bits 2*((e%128)/32); sub-block e/16.
      const int q = (x[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const uint8_t sc = x[i].scales[e / 16];
      *y++ = d * (sc & 0xF) * q - dmin * (sc >> 4);
    }
  }
}

void dequantize_q3_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(x[i].d);
    int8_t sc[16];
    unpack_scales_q3_k(x[i].scales, sc);
    for (int e = 0; e < kQK; ++e) {
      const int low = (x[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const int high = (x[i].hmask[e % 32] >> (e / 32)) & 1;
      *y++ = d * sc[e / 16] * (low - (high ? 0 : 4));
    }
  }
}

void dequantize_q4_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    for (int e = 0; e < kQK; ++e) {
      const int sub = e / 32;  // sub-blocks pair up on one 32-byte run: low then high nibbles
      const int q = (x[i].qs[(e / 64) * 32 + e % 32] >> (4 * (sub & 1))) & 0xF;
      uint8_t sc, m;
      unpack_scale_min_k4(sub, x[i].scales, sc, m);
      *y++ = d * sc * q - dmin * m;
    }
  }
}

void dequantize_q5_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(x[i].d), dmin = fp16_to_f32(x[i].dmin);
    for (int e = 0; e < kQK; ++e) {
      const int sub = e / 32;
      const int low = (x[i].qs[(e / 64) * 32 + e % 32] >> (4 * (sub & 1))) & 0xF;
      const int high = (x[i].qh[e % 32] >> sub) & 1;
      uint8_t sc, m;
      unpack_scale_min_k4(sub, x[i].scales, sc, m);
      *y++ = d * sc * (low | (high << 4)) - dmin * m;
    }
  }
}

void dequantize_q6_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int e = 0; e < kQK; ++e) {
      const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
      // quarter 0: low nibble of ql[l]; 1: of ql[l+32]; 2: high of ql[l]; 3: high of ql[l+32].
      const uint8_t lo_byte = x[i].ql[half * 64 + l + 32 * (quarter & 1)];
      const int low = (lo_byte >> (4 * (quarter >> 1))) & 0xF;
      const int high = (x[i].qh[half * 32 + l] >> (2 * quarter)) & 3;
      *y++ = d * x[i].scales[e / 16] * ((low | (high << 4)) - 32);
    }
  }
}

void dequantize_q8_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i)
    for (int j = 0; j < kQK; ++j) *y++ = x[i].d * x[i].qs[j];
}

}  // namespace kvasir::kernels::ref
