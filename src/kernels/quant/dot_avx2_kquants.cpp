// AVX2 dot products of the k-quants with Q8_K, and the Q8_K activation quantizer.
// Each 32-element chunk of a super-block is one register of codes (unsigned) times one register
// of activation quants; maddubs + madd with the chunk's two 16-element sub-block scales (or its
// one 32-element scale) accumulate exact int32 sums. Offsets and minimums come out of the
// activation's per-16 sums (bsums) instead of touching the codes.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <cstring>

#include "kernels/quant/avx2_util.h"
#include "kernels/quant/blocks.h"

namespace kvasir::kernels::simd {
namespace {

// sum over 16 sub-blocks of weight[s] * bsums[s], weights as 16 int16.
inline int weighted_bsums(const int16_t* bsums, __m128i w_lo, __m128i w_hi) {
  return hsum_i32(_mm_add_epi32(_mm_madd_epi16(load128(bsums), w_lo), _mm_madd_epi16(load128(bsums + 8), w_hi)));
}

}  // namespace

float dot_q2_k_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m128i packed = load128(x[i].scales);
    const __m128i mins = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F));
    const int sum_m = weighted_bsums(y[i].bsums, _mm_cvtepu8_epi16(mins), _mm_cvtepu8_epi16(_mm_srli_si128(mins, 8)));
    const __m128i scales = _mm_and_si128(packed, _mm_set1_epi8(0x0F));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(x[i].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i wts = chunk_scales(scales, 4 * h + k);
        sumi = _mm256_add_epi32(sumi, dot_u8_i8(two_bit_plane(q, k), load256(y[i].qs + 128 * h + 32 * k), wts));
      }
    }
    s += y[i].d * (half_to_float(x[i].d) * float(hsum_i32(sumi)) - half_to_float(x[i].dmin) * float(sum_m));
  }
  return s;
}

// Codes are low + 4*high in [0, 7]; the value is code - 4, so subtract 4 * scale * bsum.
float dot_q3_k_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m128i sc8 = q3_k_scales(x[i].scales);
    const int bias = weighted_bsums(y[i].bsums, _mm_cvtepi8_epi16(sc8), _mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    const __m256i hm = load256(x[i].hmask);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(x[i].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i codes = _mm256_or_si256(two_bit_plane(q, k), bit_as(hm, 4 * h + k, 4));
        sumi = _mm256_add_epi32(sumi, dot_u8_i8(codes, load256(y[i].qs + 128 * h + 32 * k), chunk_scales(sc8, 4 * h + k)));
      }
    }
    s += y[i].d * half_to_float(x[i].d) * float(hsum_i32(sumi) - 4 * bias);
  }
  return s;
}

// Q4_K / Q5_K share everything but the fifth bit: 8 sub-blocks of 32 with 6-bit scale and min.
template <bool kFive, typename Block>
float dot_k4_family(int64_t n, const Block* x, const BlockQ8_K* y) {
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / kQK; ++i) {
    uint8_t sc[8], mn[8];
    k4_scales_mins(x[i].scales, sc, mn);
    int64_t mn64;
    std::memcpy(&mn64, mn, 8);
    // bsums pair up (two 16s per 32-element sub-block) before weighting by the mins.
    const __m128i pair_sums = _mm_hadd_epi16(load128(y[i].bsums), load128(y[i].bsums + 8));
    const int sum_m = hsum_i32(_mm_madd_epi16(pair_sums, _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mn64))));
    __m256i hbits;
    if constexpr (kFive) hbits = load256(x[i].qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load256(x[i].qs + 32 * g);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFive) {
        lo = _mm256_or_si256(lo, bit_as(hbits, 2 * g, 0x10));
        hi = _mm256_or_si256(hi, bit_as(hbits, 2 * g + 1, 0x10));
      }
      sumi = _mm256_add_epi32(sumi, dot_u8_i8(lo, load256(y[i].qs + 64 * g), _mm256_set1_epi16(sc[2 * g])));
      sumi = _mm256_add_epi32(sumi, dot_u8_i8(hi, load256(y[i].qs + 64 * g + 32), _mm256_set1_epi16(sc[2 * g + 1])));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi), acc);
    acc_min += half_to_float(x[i].dmin) * y[i].d * float(sum_m);
  }
  return hsum(acc) - acc_min;
}

float dot_q4_k_q8_k(int64_t n, const void* w, const void* a) {
  return dot_k4_family<false>(n, static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(a));
}

float dot_q5_k_q8_k(int64_t n, const void* w, const void* a) {
  return dot_k4_family<true>(n, static_cast<const BlockQ5_K*>(w), static_cast<const BlockQ8_K*>(a));
}

// Codes are 6-bit unsigned; the value is code - 32, so subtract 32 * scale * bsum.
float dot_q6_k_q8_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3);
  float s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m128i sc8 = load128(x[i].scales);
    const int bias = weighted_bsums(y[i].bsums, _mm_cvtepi8_epi16(sc8), _mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load256(x[i].ql + 64 * h), l1 = load256(x[i].ql + 64 * h + 32);
      const __m256i qh = load256(x[i].qh + 32 * h);
      // Quarter k: low nibble of l0, of l1, high nibble of l0, of l1; high bits 2k..2k+1 of qh.
      const __m256i lows[4] = {_mm256_and_si256(l0, low4), _mm256_and_si256(l1, low4),
                               _mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4)};
      for (int k = 0; k < 4; ++k) {
        const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), low2);
        const __m256i codes = _mm256_or_si256(lows[k], _mm256_slli_epi16(high, 4));
        sumi = _mm256_add_epi32(sumi, dot_u8_i8(codes, load256(y[i].qs + 128 * h + 32 * k), chunk_scales(sc8, 4 * h + k)));
      }
    }
    s += y[i].d * half_to_float(x[i].d) * float(hsum_i32(sumi) - 32 * bias);
  }
  return s;
}

// Same bytes as ref::quantize_q8_k: scale from the first element of largest magnitude,
// round-to-nearest-even of x * (-127 / max) (what nearest_int computes), clamp at 127.
void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    __m256 vmax = _mm256_setzero_ps();
    for (int k = 0; k < kQK; k += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    if (!amax) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    int first = 0;
    const __m256 target = _mm256_set1_ps(amax);
    for (int k = 0; k < kQK; k += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask), target, _CMP_EQ_OQ));
      if (hit) {
        first = k + __builtin_ctz(unsigned(hit));
        break;
      }
    }
    const float iscale = -127.f / x[first];
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int k = 0; k < kQK; k += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), vs);
        q[j] = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), cap);
      }
      y[i].bsums[k / 16] = int16_t(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[k / 16 + 1] = int16_t(hsum_i32(_mm256_add_epi32(q[2], q[3])));
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + k),
                          _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace kvasir::kernels::simd
#endif
