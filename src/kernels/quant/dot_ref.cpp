// Scalar reference dot products of each block type with its activation type. Every block is
// first decoded to small integers, the integer dot is exact, and only the per-block scaling is
// floating point (summed in double), so these are the yardstick the SIMD versions are tested on.
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/ref.h"

namespace kvasir::kernels::ref {
namespace {

int dot_i8(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// 4-bit block: elements j and j+16 share byte j.
void nibbles(const uint8_t* qs, int offset, int8_t q[kQ]) {
  for (int j = 0; j < kQ / 2; ++j) {
    q[j] = int8_t((qs[j] & 0xF) - offset);
    q[j + kQ / 2] = int8_t((qs[j] >> 4) - offset);
  }
}

void fifth_bits(const uint8_t* qh_bytes, int8_t q[kQ]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQ; ++j) q[j] = int8_t(q[j] | (((qh >> j) & 1) << 4));
}

// k-quant element e of the 2-bit planes used by Q2_K and Q3_K.
int two_bits(const uint8_t* qs, int e) { return (qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

}  // namespace

float dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  double s = 0;
  int8_t q[kQ];
  for (int64_t i = 0; i < n / kQ; ++i) {
    nibbles(x[i].qs, 8, q);
    s += double(fp16_to_f32(x[i].d)) * fp16_to_f32(y[i].d) * dot_i8(q, y[i].qs, kQ);
  }
  return float(s);
}

// Q4_1 / Q5_1 value = d*q + m, so the dot is d*dy*sum(q*qy) + m*(dy*sum(qy)) and Q8_1 carries
// the second factor precomputed (rounded to fp16) in s.
float dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  double s = 0;
  int8_t q[kQ];
  for (int64_t i = 0; i < n / kQ; ++i) {
    nibbles(x[i].qs, 0, q);
    s += double(fp16_to_f32(x[i].d)) * fp16_to_f32(y[i].d) * dot_i8(q, y[i].qs, kQ) +
         double(fp16_to_f32(x[i].m)) * fp16_to_f32(y[i].s);
  }
  return float(s);
}

float dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  double s = 0;
  int8_t q[kQ];
  for (int64_t i = 0; i < n / kQ; ++i) {
    nibbles(x[i].qs, 0, q);
    fifth_bits(x[i].qh, q);
    for (auto& v : q) v = int8_t(v - 16);
    s += double(fp16_to_f32(x[i].d)) * fp16_to_f32(y[i].d) * dot_i8(q, y[i].qs, kQ);
  }
  return float(s);
}

float dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  double s = 0;
  int8_t q[kQ];
  for (int64_t i = 0; i < n / kQ; ++i) {
    nibbles(x[i].qs, 0, q);
    fifth_bits(x[i].qh, q);
    s += double(fp16_to_f32(x[i].d)) * fp16_to_f32(y[i].d) * dot_i8(q, y[i].qs, kQ) +
         double(fp16_to_f32(x[i].m)) * fp16_to_f32(y[i].s);
  }
  return float(s);
}

float dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  double s = 0;
  for (int64_t i = 0; i < n / kQ; ++i)
    s += double(fp16_to_f32(x[i].d)) * fp16_to_f32(y[i].d) * dot_i8(x[i].qs, y[i].qs, kQ);
  return float(s);
}

// k-quants with a minimum (Q2_K, Q4_K, Q5_K): value = d*sc*q - dmin*m, and the min term only
// needs the activation's per-16 sums (bsums).
float dot_q2_k_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  double s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum_q = 0, sum_m = 0;
    for (int sub = 0; sub < 16; ++sub) {
      int d = 0;
      for (int e = 16 * sub; e < 16 * sub + 16; ++e) d += two_bits(x[i].qs, e) * y[i].qs[e];
      sum_q += (x[i].scales[sub] & 0xF) * d;
      sum_m += (x[i].scales[sub] >> 4) * y[i].bsums[sub];
    }
    s += double(y[i].d) * (double(fp16_to_f32(x[i].d)) * sum_q - double(fp16_to_f32(x[i].dmin)) * sum_m);
  }
  return float(s);
}

float dot_q3_k_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  double s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int8_t sc[16];
    unpack_scales_q3_k(x[i].scales, sc);
    int sum_q = 0;
    for (int sub = 0; sub < 16; ++sub) {
      int d = 0;
      for (int e = 16 * sub; e < 16 * sub + 16; ++e) {
        const int high = (x[i].hmask[e % 32] >> (e / 32)) & 1;
        d += (two_bits(x[i].qs, e) - (high ? 0 : 4)) * y[i].qs[e];
      }
      sum_q += sc[sub] * d;
    }
    s += double(y[i].d) * double(fp16_to_f32(x[i].d)) * sum_q;
  }
  return float(s);
}

float dot_q4_k_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  double s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum_q = 0, sum_m = 0;
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t sc, m;
      unpack_scale_min_k4(sub, x[i].scales, sc, m);
      int d = 0;
      for (int e = 32 * sub; e < 32 * sub + 32; ++e)
        d += ((x[i].qs[(e / 64) * 32 + e % 32] >> (4 * (sub & 1))) & 0xF) * y[i].qs[e];
      sum_q += sc * d;
      sum_m += m * (y[i].bsums[2 * sub] + y[i].bsums[2 * sub + 1]);
    }
    s += double(y[i].d) * (double(fp16_to_f32(x[i].d)) * sum_q - double(fp16_to_f32(x[i].dmin)) * sum_m);
  }
  return float(s);
}

float dot_q5_k_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  double s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum_q = 0, sum_m = 0;
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t sc, m;
      unpack_scale_min_k4(sub, x[i].scales, sc, m);
      int d = 0;
      for (int e = 32 * sub; e < 32 * sub + 32; ++e) {
        const int low = (x[i].qs[(e / 64) * 32 + e % 32] >> (4 * (sub & 1))) & 0xF;
        const int high = (x[i].qh[e % 32] >> sub) & 1;
        d += (low | (high << 4)) * y[i].qs[e];
      }
      sum_q += sc * d;
      sum_m += m * (y[i].bsums[2 * sub] + y[i].bsums[2 * sub + 1]);
    }
    s += double(y[i].d) * (double(fp16_to_f32(x[i].d)) * sum_q - double(fp16_to_f32(x[i].dmin)) * sum_m);
  }
  return float(s);
}

float dot_q6_k_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  double s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum_q = 0;
    for (int sub = 0; sub < 16; ++sub) {
      int d = 0;
      for (int e = 16 * sub; e < 16 * sub + 16; ++e) {
        const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
        const int low = (x[i].ql[half * 64 + l + 32 * (quarter & 1)] >> (4 * (quarter >> 1))) & 0xF;
        const int high = (x[i].qh[half * 32 + l] >> (2 * quarter)) & 3;
        d += ((low | (high << 4)) - 32) * y[i].qs[e];
      }
      sum_q += x[i].scales[sub] * d;
    }
    s += double(y[i].d) * double(fp16_to_f32(x[i].d)) * sum_q;
  }
  return float(s);
}

}  // namespace kvasir::kernels::ref
