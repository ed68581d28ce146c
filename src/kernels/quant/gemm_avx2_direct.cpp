// Quantized matmul tiles straight from the file's blocks: what decode and small batches run.
// For a panel of 8 weight rows and one activation row, each block gives per column an int32x8
// vector whose lanes sum to the column's exact block dot; reduce8 turns the 8 vectors into one
// vector of 8 column sums, so the float steps of the contract (gemm.h) run one lane per column.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <type_traits>

#include "kernels/quant/blocks.h"
#include "kernels/quant/gemm_avx2.h"

namespace kvasir::kernels::simd {
namespace {

// Streams the next panel's bytes into cache while this one computes: the 8 rows of a panel are
// read interleaved, a pattern the hardware prefetcher follows poorly, but the panel as a whole
// is one contiguous run, so prefetching it linearly, a fixed share per block step, keeps DRAM
// busy (only the first activation row of a panel does this).
struct Prefetcher {
  const char* p = nullptr;
  const char* end = nullptr;
  size_t step = 0;  // bytes per block step, a multiple of 64
  Prefetcher() = default;
  Prefetcher(const uint8_t* begin, size_t bytes, int64_t steps)
      : p(reinterpret_cast<const char*>(begin)), end(p + bytes), step((bytes / size_t(std::max<int64_t>(steps, 1)) + 127) & ~size_t(63)) {}
  void next() {
    for (size_t k = 0; k < step && p < end; k += 64, p += 64) prefetch_line(p);
  }
};

inline __m256i ones16() { return _mm256_set1_epi16(1); }

// ---- 32-element blocks. lanes(): unsigned codes x signed activations; corr: what the offset
// of the codes (8 or 16) takes away, per activation block.
struct Q4_0P {
  using W = BlockQ4_0;
  using A = BlockQ8_0;
  static constexpr size_t kD = offsetof(W, d);
  static constexpr int kOffset = 8;
  static constexpr bool kMin = false;
  static __m256i lanes(const W& w, const A& a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(unpack_nibbles(w.qs), load256(a.qs)), ones16());
  }
};
struct Q5_0P {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr size_t kD = offsetof(W, d);
  static constexpr int kOffset = 16;
  static constexpr bool kMin = false;
  static __m256i lanes(const W& w, const A& a) {
    const __m256i q = _mm256_or_si256(unpack_nibbles(w.qs), fifth_bits(w.qh));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, load256(a.qs)), ones16());
  }
};
struct Q8_0P {
  using W = BlockQ8_0;
  using A = BlockQ8_0;
  static constexpr size_t kD = offsetof(W, d);
  static constexpr int kOffset = 0;
  static constexpr bool kMin = false;
  static __m256i lanes(const W& w, const A& a) { return dot_i8_i8(load256(w.qs), load256(a.qs)); }
};
struct Q4_1P {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr size_t kD = offsetof(W, d), kM = offsetof(W, m);
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;
  static __m256i lanes(const W& w, const A& a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(unpack_nibbles(w.qs), load256(a.qs)), ones16());
  }
};
struct Q5_1P {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr size_t kD = offsetof(W, d), kM = offsetof(W, m);
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;
  static __m256i lanes(const W& w, const A& a) {
    const __m256i q = _mm256_or_si256(unpack_nibbles(w.qs), fifth_bits(w.qh));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, load256(a.qs)), ones16());
  }
};

// One activation row against one panel (cols[c] = weight row c; padded with repeats).
template <class P>
void row_simple(int64_t nb, const uint8_t* const cols[8], const typename P::A* a, float* y, int n_cols, Prefetcher pf) {
  using W = typename P::W;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    pf.next();
    const uint8_t* blk[8];
    __m256i v[8];
    for (int c = 0; c < 8; ++c) {
      blk[c] = cols[c] + size_t(i) * sizeof(W);
      v[c] = P::lanes(*reinterpret_cast<const W*>(blk[c]), a[i]);
    }
    __m256i isum = reduce8(v);
    if constexpr (P::kOffset != 0) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(P::kOffset * sum_i8_32(a[i].qs)));
    const __m256 s = _mm256_mul_ps(gather_half(blk, P::kD), _mm256_set1_ps(half_to_float(a[i].d)));
    acc = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(isum), acc);
    if constexpr (P::kMin) acc = _mm256_fmadd_ps(gather_half(blk, P::kM), _mm256_set1_ps(half_to_float(a[i].s)), acc);
  }
  store_lanes(y, acc, n_cols);
}

// ---- k-quants against Q8_K. lanes(): isum lanes (offsets folded in) and msum lanes.
inline __m256i weighted_bsums(const int16_t* bsums, __m128i w_lo, __m128i w_hi) {
  return widen128(_mm_add_epi32(_mm_madd_epi16(load128(bsums), w_lo), _mm_madd_epi16(load128(bsums + 8), w_hi)));
}
struct Q2_KP {
  using W = BlockQ2_K;
  static constexpr size_t kD = offsetof(W, d), kDmin = offsetof(W, dmin);
  static constexpr bool kMin = true;
  static __m256i lanes(const W& x, const BlockQ8_K& y, __m256i& msum) {
    const __m128i packed = load128(x.scales);
    const __m128i mins = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F));
    msum = weighted_bsums(y.bsums, _mm_cvtepu8_epi16(mins), _mm_cvtepu8_epi16(_mm_srli_si128(mins, 8)));
    const __m128i scales = _mm_and_si128(packed, _mm_set1_epi8(0x0F));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(x.qs + 32 * h);
      for (int k = 0; k < 4; ++k)
        sumi = _mm256_add_epi32(sumi, dot_u8_i8(two_bit_plane(q, k), load256(y.qs + 128 * h + 32 * k),
                                                chunk_scales(scales, 4 * h + k)));
    }
    return sumi;
  }
};
struct Q3_KP {
  using W = BlockQ3_K;
  static constexpr size_t kD = offsetof(W, d), kDmin = 0;
  static constexpr bool kMin = false;
  static __m256i lanes(const W& x, const BlockQ8_K& y, __m256i&) {
    const __m128i sc8 = q3_k_scales(x.scales);
    const __m256i bias = weighted_bsums(y.bsums, _mm_cvtepi8_epi16(sc8), _mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    const __m256i hm = load256(x.hmask);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(x.qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i codes = _mm256_or_si256(two_bit_plane(q, k), bit_as(hm, 4 * h + k, 4));
        sumi = _mm256_add_epi32(sumi, dot_u8_i8(codes, load256(y.qs + 128 * h + 32 * k), chunk_scales(sc8, 4 * h + k)));
      }
    }
    return _mm256_sub_epi32(sumi, _mm256_slli_epi32(bias, 2));  // codes are value + 4
  }
};
template <bool kFive>
struct K4P {
  using W = std::conditional_t<kFive, BlockQ5_K, BlockQ4_K>;
  static constexpr size_t kD = offsetof(W, d), kDmin = offsetof(W, dmin);
  static constexpr bool kMin = true;
  static __m256i lanes(const W& x, const BlockQ8_K& y, __m256i& msum) {
    uint8_t sc[8], mn[8];
    k4_scales_mins(x.scales, sc, mn);
    int64_t mn64;
    std::memcpy(&mn64, mn, 8);
    const __m128i pair_sums = _mm_hadd_epi16(load128(y.bsums), load128(y.bsums + 8));
    msum = widen128(_mm_madd_epi16(pair_sums, _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mn64))));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256i hbits;
    if constexpr (kFive) hbits = load256(x.qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load256(x.qs + 32 * g);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFive) {
        lo = _mm256_or_si256(lo, bit_as(hbits, 2 * g, 0x10));
        hi = _mm256_or_si256(hi, bit_as(hbits, 2 * g + 1, 0x10));
      }
      sumi = _mm256_add_epi32(sumi, dot_u8_i8(lo, load256(y.qs + 64 * g), _mm256_set1_epi16(sc[2 * g])));
      sumi = _mm256_add_epi32(sumi, dot_u8_i8(hi, load256(y.qs + 64 * g + 32), _mm256_set1_epi16(sc[2 * g + 1])));
    }
    return sumi;
  }
};
struct Q6_KP {
  using W = BlockQ6_K;
  static constexpr size_t kD = offsetof(W, d), kDmin = 0;
  static constexpr bool kMin = false;
  static __m256i lanes(const W& x, const BlockQ8_K& y, __m256i&) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3);
    const __m128i sc8 = load128(x.scales);
    const __m256i bias = weighted_bsums(y.bsums, _mm_cvtepi8_epi16(sc8), _mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load256(x.ql + 64 * h), l1 = load256(x.ql + 64 * h + 32);
      const __m256i qh = load256(x.qh + 32 * h);
      const __m256i lows[4] = {_mm256_and_si256(l0, low4), _mm256_and_si256(l1, low4),
                               _mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4)};
      for (int k = 0; k < 4; ++k) {
        const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), low2);
        const __m256i codes = _mm256_or_si256(lows[k], _mm256_slli_epi16(high, 4));
        sumi = _mm256_add_epi32(sumi, dot_u8_i8(codes, load256(y.qs + 128 * h + 32 * k), chunk_scales(sc8, 4 * h + k)));
      }
    }
    return _mm256_sub_epi32(sumi, _mm256_slli_epi32(bias, 5));  // codes are value + 32
  }
};

template <class P>
void row_kquant(int64_t nb, const uint8_t* const cols[8], const BlockQ8_K* a, float* y, int n_cols, Prefetcher pf) {
  using W = typename P::W;
  __m256 acc = _mm256_setzero_ps();
  const __m256 neg = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < nb; ++i) {
    pf.next();
    const uint8_t* blk[8];
    __m256i v[8], m[8];
    for (int c = 0; c < 8; ++c) {
      blk[c] = cols[c] + size_t(i) * sizeof(W);
      v[c] = P::lanes(*reinterpret_cast<const W*>(blk[c]), a[i], m[c]);
    }
    const __m256 da = _mm256_set1_ps(a[i].d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(gather_half(blk, P::kD), da), _mm256_cvtepi32_ps(reduce8(v)), acc);
    if constexpr (P::kMin) {
      const __m256 ms = _mm256_mul_ps(gather_half(blk, P::kDmin), da);
      acc = _mm256_fmadd_ps(_mm256_xor_ps(ms, neg), _mm256_cvtepi32_ps(reduce8(m)), acc);
    }
  }
  store_lanes(y, acc, n_cols);
}

// Every activation row against every panel of the tile's columns.
template <class P, bool kK>
void run(const GemmTile& t) {
  const int64_t block = kK ? kQK : kQ;
  const int64_t nb = t.n / block;
  for (int64_t c0 = 0; c0 < t.n_cols; c0 += 8) {
    const int nc = int(std::min<int64_t>(8, t.n_cols - c0));
    const uint8_t* cols[8];
    for (int c = 0; c < 8; ++c) cols[c] = t.w + size_t(c0 + std::min(c, nc - 1)) * t.w_stride;
    const int64_t next = std::min<int64_t>(8, t.n_cols - c0 - 8);
    const Prefetcher ahead(t.w + size_t(c0 + 8) * t.w_stride, next > 0 ? size_t(next) * t.w_stride : 0, nb);
    for (int64_t r = 0; r < t.n_rows; ++r) {
      const uint8_t* ar = t.a + size_t(r) * t.a_stride;
      float* y = t.y + r * t.y_stride + c0;
      const Prefetcher pf = r == 0 ? ahead : Prefetcher();
      if constexpr (kK) row_kquant<P>(nb, cols, reinterpret_cast<const BlockQ8_K*>(ar), y, nc, pf);
      else row_simple<P>(nb, cols, reinterpret_cast<const typename P::A*>(ar), y, nc, pf);
    }
  }
}

}  // namespace

void gemm_direct(const GemmTile& t) {
  switch (t.wtype) {
    case DType::Q4_0: return run<Q4_0P, false>(t);
    case DType::Q4_1: return run<Q4_1P, false>(t);
    case DType::Q5_0: return run<Q5_0P, false>(t);
    case DType::Q5_1: return run<Q5_1P, false>(t);
    case DType::Q8_0: return run<Q8_0P, false>(t);
    case DType::Q2_K: return run<Q2_KP, true>(t);
    case DType::Q3_K: return run<Q3_KP, true>(t);
    case DType::Q4_K: return run<K4P<false>, true>(t);
    case DType::Q5_K: return run<K4P<true>, true>(t);
    case DType::Q6_K: return run<Q6_KP, true>(t);
    default: std::abort();
  }
}

}  // namespace kvasir::kernels::simd
#endif
