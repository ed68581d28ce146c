// Packed-panel prefill kernels of the k-quants against Q8_K: Q4_K, Q5_K and Q6_K (the types of
// the Q4_K_M / Q5_K_M mixes). A panel block is one 256-element super-block of 8 columns:
// 64 code vectors (4 elements x 8 columns), then per sub-block an int16 vector with the
// column's scale in both halves of its lane (so one vpmaddwd applies 8 different scales), the
// minimums (Q4_K/Q5_K) or bias scales (Q6_K) in the same form, and the f32 super-block scales.
//
// int16 bounds of the pair sums before vpmaddwd widens them (activations within [-127, 127]):
//   Q4_K: 8 steps x 2 x 15 x 127 = 30480;  Q5_K: 4 x 2 x 31 x 127 = 31496;  Q6_K: 2 x 2 x 63 x 127.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <cstddef>
#include <type_traits>

#include "kernels/quant/blocks.h"
#include "kernels/quant/gemm_avx2_packed.h"

namespace kvasir::kernels::simd {
namespace {

struct NoPrep {};

// int16 vector whose lane pair (2c, 2c+1) holds v[c] twice.
inline void store_dup16(const int16_t v[8], uint8_t* dst) {
  alignas(32) int16_t t[16];
  for (int c = 0; c < 8; ++c) t[2 * c] = t[2 * c + 1] = v[c];
  std::memcpy(dst, t, 32);
}

inline void store_halves(const uint16_t h[8], uint8_t* dst) {
  _mm256_store_ps(reinterpret_cast<float*>(dst), _mm256_cvtph_ps(load128(h)));
}

// sum over t of dup[t] . (bsums[2t], bsums[2t+1]): per column c, sum_t v[c][t] * (pair of bsums).
inline __m256i weighted_pairs(const uint8_t* dup, const int16_t* bsums, int n_pairs, int stride) {
  __m256i s = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(dup)), bcast4(bsums));
  for (int t = 1; t < n_pairs; ++t)
    s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(dup + 32 * t * stride)),
                                              bcast4(bsums + 2 * t)));
  return s;
}

// ---- Q4_K / Q5_K: 8 sub-blocks of 32, six-bit scale and minimum each.
template <bool kFive>
struct K4 {
  using Block = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static constexpr int kBlock = kQK;
  static constexpr int kSteps = kFive ? 4 : 8;  // int16 accumulation steps (bounds above)
  // codes | scales (8 dup vectors) | mins (8 dup vectors, one per sub-block) | d | dmin
  static constexpr size_t kScales = 64 * 32, kMins = kScales + 8 * 32, kD = kMins + 8 * 32, kDmin = kD + 32;
  static constexpr size_t kPanelBytes = kDmin + 32;
  using Prep = NoPrep;
  static void prep(const uint8_t*, int64_t, Prep*) {}

  static void pack(const uint8_t* const cols[8], int64_t i, uint8_t* dst) {
    int16_t sc[8][8], mn[8][8];  // [sub-block][column]
    uint16_t d[8], dmin[8];
    __m256i codes[8][8];         // [sub-block][column]
    for (int c = 0; c < 8; ++c) {
      const Block& b = reinterpret_cast<const Block*>(cols[c])[i];
      uint8_t s8[8], m8[8];
      k4_scales_mins(b.scales, s8, m8);
      for (int j = 0; j < 8; ++j) sc[j][c] = s8[j], mn[j][c] = m8[j];
      d[c] = b.d, dmin[c] = b.dmin;
      __m256i hbits;
      if constexpr (kFive) hbits = load256(b.qh);
      for (int g = 0; g < 4; ++g) {
        const __m256i q = load256(b.qs + 32 * g);
        __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
        if constexpr (kFive) {
          lo = _mm256_or_si256(lo, bit_as(hbits, 2 * g, 0x10));
          hi = _mm256_or_si256(hi, bit_as(hbits, 2 * g + 1, 0x10));
        }
        codes[2 * g][c] = lo;
        codes[2 * g + 1][c] = hi;
      }
    }
    for (int j = 0; j < 8; ++j) {
      store_transposed(codes[j], dst + 256 * j);
      store_dup16(sc[j], dst + kScales + 32 * j);
      store_dup16(mn[j], dst + kMins + 32 * j);
    }
    store_halves(d, dst + kD);
    store_halves(dmin, dst + kDmin);
  }

  template <int R>
  static void micro(const uint8_t* panel, int64_t nb, const uint8_t* const a[], const Prep* const*, float* y,
                    int64_t ys, int nc) {
    const __m256 neg = _mm256_set1_ps(-0.0f);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* pb = panel + size_t(i) * kPanelBytes;
      const BlockQ8_K* yb[R];
      for (int r = 0; r < R; ++r) yb[r] = reinterpret_cast<const BlockQ8_K*>(a[r]) + i;
      __m256i sumi[R];
      for (int j = 0; j < 8; ++j) {
        const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + kScales + 32 * j));
        for (int h = 0; h < 8; h += kSteps) {
          __m256i p[R];
#pragma GCC unroll 8
          for (int kk = h; kk < h + kSteps; ++kk) {
            const int k = 8 * j + kk;
            const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + 32 * k));
            for (int r = 0; r < R; ++r) {
              const __m256i m = _mm256_maddubs_epi16(wv, bcast4(yb[r]->qs + 4 * k));
              p[r] = kk == h ? m : _mm256_add_epi16(p[r], m);
              keep_chain(p[r]);
            }
          }
          for (int r = 0; r < R; ++r) {
            const __m256i s = _mm256_madd_epi16(p[r], sc);
            sumi[r] = (j == 0 && h == 0) ? s : _mm256_add_epi32(sumi[r], s);
            keep_chain(sumi[r]);
          }
        }
      }
      const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(pb + kD));
      const __m256 dmin = _mm256_load_ps(reinterpret_cast<const float*>(pb + kDmin));
      for (int r = 0; r < R; ++r) {
        // Minimums: sum over sub-blocks j of m_j * (bsums[2j] + bsums[2j+1]).
        const __m256i msum = weighted_pairs(pb + kMins, yb[r]->bsums, 8, 1);
        const __m256 da = _mm256_set1_ps(yb[r]->d);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(dmin, da), neg), _mm256_cvtepi32_ps(msum), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) store_lanes(y + r * ys, acc[r], nc);
  }
};

// ---- Q6_K: 16 sub-blocks of 16, signed eight-bit scales; codes are value + 32.
struct Q6K {
  static constexpr int kBlock = kQK;
  // codes | scales (16 dup vectors) | bias scales (8 vectors: lanes sc[2t], sc[2t+1]) | d
  static constexpr size_t kScales = 64 * 32, kBias = kScales + 16 * 32, kD = kBias + 8 * 32;
  static constexpr size_t kPanelBytes = kD + 32;
  using Prep = NoPrep;
  static void prep(const uint8_t*, int64_t, Prep*) {}

  static void pack(const uint8_t* const cols[8], int64_t i, uint8_t* dst) {
    int16_t sc[16][8];
    uint16_t d[8];
    __m256i codes[8][8];  // [32-element group][column]
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3);
    for (int c = 0; c < 8; ++c) {
      const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(cols[c])[i];
      for (int s = 0; s < 16; ++s) sc[s][c] = b.scales[s];
      d[c] = b.d;
      for (int h = 0; h < 2; ++h) {
        const __m256i l0 = load256(b.ql + 64 * h), l1 = load256(b.ql + 64 * h + 32);
        const __m256i qh = load256(b.qh + 32 * h);
        const __m256i lows[4] = {_mm256_and_si256(l0, low4), _mm256_and_si256(l1, low4),
                                 _mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                 _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4)};
        for (int k = 0; k < 4; ++k) {
          const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), low2);
          codes[4 * h + k][c] = _mm256_or_si256(lows[k], _mm256_slli_epi16(high, 4));
        }
      }
    }
    for (int g = 0; g < 8; ++g) store_transposed(codes[g], dst + 256 * g);
    for (int s = 0; s < 16; ++s) store_dup16(sc[s], dst + kScales + 32 * s);
    for (int t = 0; t < 8; ++t) {
      alignas(32) int16_t v[16];
      for (int c = 0; c < 8; ++c) v[2 * c] = sc[2 * t][c], v[2 * c + 1] = sc[2 * t + 1][c];
      std::memcpy(dst + kBias + 32 * t, v, 32);
    }
    store_halves(d, dst + kD);
  }

  template <int R>
  static void micro(const uint8_t* panel, int64_t nb, const uint8_t* const a[], const Prep* const*, float* y,
                    int64_t ys, int nc) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* pb = panel + size_t(i) * kPanelBytes;
      const BlockQ8_K* yb[R];
      for (int r = 0; r < R; ++r) yb[r] = reinterpret_cast<const BlockQ8_K*>(a[r]) + i;
      __m256i sumi[R];
      for (int s = 0; s < 16; ++s) {
        const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + kScales + 32 * s));
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
          const int k = 4 * s + 2 * half;
          const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + 32 * k));
          const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + 32 * (k + 1)));
          for (int r = 0; r < R; ++r) {
            __m256i p = _mm256_maddubs_epi16(w0, bcast4(yb[r]->qs + 4 * k));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w1, bcast4(yb[r]->qs + 4 * k + 4)));
            const __m256i v = _mm256_madd_epi16(p, sc);
            sumi[r] = (s == 0 && half == 0) ? v : _mm256_add_epi32(sumi[r], v);
            keep_chain(sumi[r]);
          }
        }
      }
      const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(pb + kD));
      for (int r = 0; r < R; ++r) {
        const __m256i bias = weighted_pairs(pb + kBias, yb[r]->bsums, 8, 1);
        const __m256i isum = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(bias, 5));
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(yb[r]->d)), _mm256_cvtepi32_ps(isum), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) store_lanes(y + r * ys, acc[r], nc);
  }
};

}  // namespace

bool gemm_packed_k(const GemmTile& t, void* scratch) {
  switch (t.wtype) {
    case DType::Q4_K: run_packed<K4<false>>(t, scratch); return true;
    case DType::Q5_K: run_packed<K4<true>>(t, scratch); return true;
    case DType::Q6_K: run_packed<Q6K>(t, scratch); return true;
    default: return false;
  }
}

size_t gemm_packed_k_scratch_bytes(DType wtype, int64_t n, int64_t n_rows) {
  switch (wtype) {
    case DType::Q4_K: return packed_scratch_bytes<K4<false>>(n, n_rows);
    case DType::Q5_K: return packed_scratch_bytes<K4<true>>(n, n_rows);
    case DType::Q6_K: return packed_scratch_bytes<Q6K>(n, n_rows);
    default: return 0;
  }
}

}  // namespace kvasir::kernels::simd
#endif
