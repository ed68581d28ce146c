// AVX2 dot products of the 32-element block types, and the Q8_0 / Q8_1 activation quantizers.
// One block is 32 bytes of quants = one register; the integer dot per block is exact and only
// the per-block scale multiply-add is float.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <cmath>

#include "core/fp16.h"
#include "kernels/quant/avx2_util.h"
#include "kernels/quant/blocks.h"

namespace kvasir::kernels::simd {
namespace {

// Q5 codes: the 4-bit nibbles plus 0x10 where the block's qh bit is set.
inline __m256i q5_codes(const uint8_t* qs, const uint8_t* qh) {
  const __m256i high = _mm256_and_si256(bits_to_bytes(load_u32(qh)), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(unpack_nibbles_32(qs), high);
}

// Blocks whose codes are signed after subtracting `offset` (Q4_0: 8, Q5_0: 16, Q8_0: none).
template <typename Block, typename Codes>
float dot_symmetric(int64_t n, const Block* x, const BlockQ8_0* y, Codes codes) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = n / kQ;
  int64_t i = 0;
  // Two blocks per step into two accumulators to overlap the FMA latency.
  for (; i + 2 <= nb; i += 2) {
    const __m256i p0 = dot_i8_i8(codes(x[i]), load256(y[i].qs));
    const __m256i p1 = dot_i8_i8(codes(x[i + 1]), load256(y[i + 1].qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d)), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i + 1].d) * half_to_float(y[i + 1].d)),
                           _mm256_cvtepi32_ps(p1), acc1);
  }
  for (; i < nb; ++i) {
    const __m256i p = dot_i8_i8(codes(x[i]), load256(y[i].qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d)), _mm256_cvtepi32_ps(p), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Blocks with a minimum (value = d*q + m, q unsigned): the m term uses Q8_1's precomputed s.
template <typename Block, typename Codes>
float dot_with_min(int64_t n, const Block* x, const BlockQ8_1* y, Codes codes) {
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n / kQ; ++i) {
    const __m256i p = dot_u8_i8(codes(x[i]), load256(y[i].qs), ones);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d)), _mm256_cvtepi32_ps(p), acc);
    acc_min += half_to_float(x[i].m) * half_to_float(y[i].s);
  }
  return hsum(acc) + acc_min;
}

// roundf semantics (ties away from zero), exactly: v - trunc(v) is exact for |v| < 2^23.
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
  const __m256 abs_frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
  const __m256 up = _mm256_cmp_ps(abs_frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  return _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(sign, _mm256_set1_ps(1.0f))));
}

// Quantizes one 32-float block like the reference Q8_0 / Q8_1 (same d, same roundf), returning
// the fp32 scale and the sum of the quants.
inline float quantize_block_q8(const float* x, int8_t* qs, int& sum) {
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[k]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127;
  const float id = d ? 1.0f / d : 0.0f;
  __m256i q[4];
  __m256i s = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    q[k] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[k], _mm256_set1_ps(id))));
    s = _mm256_add_epi32(s, q[k]);
  }
  // int32 -> int8 with packs (values are within [-127, 127]); packs interleave 128-bit lanes,
  // so restore element order with one cross-lane permute.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  sum = hsum_i32(s);
  return d;
}

}  // namespace

float dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  return dot_symmetric(n, static_cast<const BlockQ4_0*>(w), static_cast<const BlockQ8_0*>(a), [](const BlockQ4_0& b) {
    return _mm256_sub_epi8(unpack_nibbles_32(b.qs), _mm256_set1_epi8(8));
  });
}

float dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  return dot_symmetric(n, static_cast<const BlockQ5_0*>(w), static_cast<const BlockQ8_0*>(a), [](const BlockQ5_0& b) {
    return _mm256_sub_epi8(q5_codes(b.qs, b.qh), _mm256_set1_epi8(16));
  });
}

float dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  return dot_symmetric(n, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0*>(a),
                       [](const BlockQ8_0& b) { return load256(b.qs); });
}

float dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  return dot_with_min(n, static_cast<const BlockQ4_1*>(w), static_cast<const BlockQ8_1*>(a),
                      [](const BlockQ4_1& b) { return unpack_nibbles_32(b.qs); });
}

float dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  return dot_with_min(n, static_cast<const BlockQ5_1*>(w), static_cast<const BlockQ8_1*>(a),
                      [](const BlockQ5_1& b) { return q5_codes(b.qs, b.qh); });
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  int sum;
  for (int64_t i = 0; i < n / kQ; ++i) y[i].d = f32_to_fp16(quantize_block_q8(x + i * kQ, y[i].qs, sum));
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  int sum;
  for (int64_t i = 0; i < n / kQ; ++i) {
    const float d = quantize_block_q8(x + i * kQ, y[i].qs, sum);
    y[i].d = f32_to_fp16(d);
    y[i].s = f32_to_fp16(float(sum) * d);
  }
}

}  // namespace kvasir::kernels::simd
#endif
