// Scalar twin of the matmul tiles: the batch-invariance contract of gemm.h written out, one
// output at a time. Integer block dots are exact (any order gives the same int); the float steps
// are explicit std::fma calls in the contract's order, so the SIMD kernels must match bitwise.
#include "kernels/quant/no_contract.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/gemm.h"

namespace kvasir::kernels {
namespace {

int dot_i8(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Codes of a 32-element block: nibble j (low half) / j+16 (high half), fifth bit from qh.
void codes32(const uint8_t* qs, const uint8_t* qh, int offset, int8_t q[kQ]) {
  uint32_t h = 0;
  if (qh) std::memcpy(&h, qh, 4);
  for (int j = 0; j < kQ / 2; ++j) {
    q[j] = int8_t((qs[j] & 0xF) + (((h >> j) & 1) << 4) - offset);
    q[j + 16] = int8_t((qs[j] >> 4) + (((h >> (j + 16)) & 1) << 4) - offset);
  }
}

inline float h2f(uint16_t h) { return fp16_to_f32(h); }

// One output's accumulation over its blocks, per weight type.
float dot_contract(DType t, int64_t n, const uint8_t* w, const uint8_t* a) {
  float acc = 0;
  int8_t q[kQK];
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: {
      const auto* y = reinterpret_cast<const BlockQ8_0*>(a);
      for (int64_t i = 0; i < n / kQ; ++i) {
        float dw;
        if (t == DType::Q4_0) {
          const auto& b = reinterpret_cast<const BlockQ4_0*>(w)[i];
          codes32(b.qs, nullptr, 8, q);
          dw = h2f(b.d);
        } else if (t == DType::Q5_0) {
          const auto& b = reinterpret_cast<const BlockQ5_0*>(w)[i];
          codes32(b.qs, b.qh, 16, q);
          dw = h2f(b.d);
        } else {
          const auto& b = reinterpret_cast<const BlockQ8_0*>(w)[i];
          std::memcpy(q, b.qs, kQ);
          dw = h2f(b.d);
        }
        const float s = dw * h2f(y[i].d);
        acc = std::fma(s, float(dot_i8(q, y[i].qs, kQ)), acc);
      }
      return acc;
    }
    case DType::Q4_1: case DType::Q5_1: {
      const auto* y = reinterpret_cast<const BlockQ8_1*>(a);
      for (int64_t i = 0; i < n / kQ; ++i) {
        uint16_t d, m;
        if (t == DType::Q4_1) {
          const auto& b = reinterpret_cast<const BlockQ4_1*>(w)[i];
          codes32(b.qs, nullptr, 0, q);
          d = b.d, m = b.m;
        } else {
          const auto& b = reinterpret_cast<const BlockQ5_1*>(w)[i];
          codes32(b.qs, b.qh, 0, q);
          d = b.d, m = b.m;
        }
        const float s = h2f(d) * h2f(y[i].d);
        acc = std::fma(s, float(dot_i8(q, y[i].qs, kQ)), acc);
        acc = std::fma(h2f(m), h2f(y[i].s), acc);
      }
      return acc;
    }
    default: break;
  }
  // k-quants: 256-element super-blocks against Q8_K.
  const auto* y = reinterpret_cast<const BlockQ8_K*>(a);
  for (int64_t i = 0; i < n / kQK; ++i) {
    int isum = 0, msum = 0;
    float dw = 0, dmin = 0;
    switch (t) {
      case DType::Q2_K: {
        const auto& b = reinterpret_cast<const BlockQ2_K*>(w)[i];
        for (int e = 0; e < kQK; ++e) q[e] = int8_t((b.qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3);
        for (int sub = 0; sub < 16; ++sub) {
          isum += (b.scales[sub] & 0xF) * dot_i8(q + 16 * sub, y[i].qs + 16 * sub, 16);
          msum += (b.scales[sub] >> 4) * y[i].bsums[sub];
        }
        dw = h2f(b.d), dmin = h2f(b.dmin);
        break;
      }
      case DType::Q3_K: {
        const auto& b = reinterpret_cast<const BlockQ3_K*>(w)[i];
        int8_t sc[16];
        unpack_scales_q3_k(b.scales, sc);
        for (int e = 0; e < kQK; ++e) {
          const int low = (b.qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
          q[e] = int8_t(low - (((b.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4));
        }
        for (int sub = 0; sub < 16; ++sub) isum += sc[sub] * dot_i8(q + 16 * sub, y[i].qs + 16 * sub, 16);
        dw = h2f(b.d);
        break;
      }
      case DType::Q4_K: case DType::Q5_K: {
        const uint8_t *qs, *scales, *qh = nullptr;
        if (t == DType::Q4_K) {
          const auto& b = reinterpret_cast<const BlockQ4_K*>(w)[i];
          qs = b.qs, scales = b.scales, dw = h2f(b.d), dmin = h2f(b.dmin);
        } else {
          const auto& b = reinterpret_cast<const BlockQ5_K*>(w)[i];
          qs = b.qs, scales = b.scales, qh = b.qh, dw = h2f(b.d), dmin = h2f(b.dmin);
        }
        for (int e = 0; e < kQK; ++e) {
          const int sub = e / 32;
          int v = (qs[(e / 64) * 32 + e % 32] >> (4 * (sub & 1))) & 0xF;
          if (qh) v |= ((qh[e % 32] >> sub) & 1) << 4;
          q[e] = int8_t(v);
        }
        for (int sub = 0; sub < 8; ++sub) {
          uint8_t sc, m;
          unpack_scale_min_k4(sub, scales, sc, m);
          isum += sc * dot_i8(q + 32 * sub, y[i].qs + 32 * sub, 32);
          msum += m * (y[i].bsums[2 * sub] + y[i].bsums[2 * sub + 1]);
        }
        break;
      }
      case DType::Q6_K: {
        const auto& b = reinterpret_cast<const BlockQ6_K*>(w)[i];
        for (int e = 0; e < kQK; ++e) {
          const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
          const int low = (b.ql[half * 64 + l + 32 * (quarter & 1)] >> (4 * (quarter >> 1))) & 0xF;
          const int high = (b.qh[half * 32 + l] >> (2 * quarter)) & 3;
          q[e] = int8_t((low | (high << 4)) - 32);
        }
        for (int sub = 0; sub < 16; ++sub) isum += b.scales[sub] * dot_i8(q + 16 * sub, y[i].qs + 16 * sub, 16);
        dw = h2f(b.d);
        break;
      }
      default: std::abort();
    }
    const float s = dw * y[i].d;
    acc = std::fma(s, float(isum), acc);
    if (t == DType::Q2_K || t == DType::Q4_K || t == DType::Q5_K) {
      const float ms = dmin * y[i].d;
      acc = std::fma(-ms, float(msum), acc);
    }
  }
  return acc;
}

// Float rows: eight lane sums, the fixed reduction tree, then the tail.
template <typename T, typename Widen>
float dot_float(int64_t n, const T* w, const T* a, Widen widen) {
  float lane[8] = {};
  const int64_t n8 = n & ~int64_t(7);
  for (int64_t k = 0; k < n8; ++k) lane[k % 8] = std::fma(widen(w[k]), widen(a[k]), lane[k % 8]);
  float s = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  for (int64_t k = n8; k < n; ++k) s = std::fma(widen(w[k]), widen(a[k]), s);
  return s;
}

// BF16 (gemm.h): vdpbf16ps's order and flushing over 32-element chunks, then the float tail.
float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x; }

float dot_bf16_pairs(int64_t n, const uint16_t* w, const uint16_t* a) {
  auto in = [](uint16_t h) { return flush(bf16_to_f32(h)); };  // denormal inputs read as zero
  float lane[16] = {};
  const int64_t n32 = n & ~int64_t(31);
  for (int64_t k = 0; k < n32; k += 32)
    for (int j = 0; j < 16; ++j) {
      lane[j] = flush(std::fma(in(w[k + 2 * j + 1]), in(a[k + 2 * j + 1]), lane[j]));
      lane[j] = flush(std::fma(in(w[k + 2 * j]), in(a[k + 2 * j]), lane[j]));
    }
  float l[8];
  for (int i = 0; i < 8; ++i) l[i] = lane[i] + lane[i + 8];
  float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (int64_t k = n32; k < n; ++k) s = std::fma(bf16_to_f32(w[k]), bf16_to_f32(a[k]), s);
  return s;
}

float dot_any(DType t, int64_t n, const uint8_t* w, const uint8_t* a) {
  switch (t) {
    case DType::F32:
      return dot_float(n, reinterpret_cast<const float*>(w), reinterpret_cast<const float*>(a), [](float v) { return v; });
    case DType::F16:
      return dot_float(n, reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const uint16_t*>(a), fp16_to_f32);
    case DType::BF16:
      return dot_bf16_pairs(n, reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const uint16_t*>(a));
    default:
      return dot_contract(t, n, w, a);
  }
}

}  // namespace

void gemm_ref(const GemmTile& t) {
  for (int64_t r = 0; r < t.n_rows; ++r)
    for (int64_t c = 0; c < t.n_cols; ++c)
      t.y[r * t.y_stride + c] = dot_any(t.wtype, t.n, t.w + size_t(c) * t.w_stride, t.a + size_t(r) * t.a_stride);
}

}  // namespace kvasir::kernels
