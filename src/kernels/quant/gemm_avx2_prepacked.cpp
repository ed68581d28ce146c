// Kernels on weights repacked once (PackedMatrix, kernels/matmul.h), Q4_0, Q8_0 and (VNNI builds)
// Q5_0; the k-quants are in gemm_avx2_prepacked_k.cpp. Q4_0: a panel block
// holds the codes of 8 rows x 32 elements as 4 vectors of nibbles, low nibbles = elements
// 4(2m)..4(2m)+3 of each row (4 bytes per row, row c at bytes 4c..4c+3), high nibbles = the next
// 4 elements, then the 8 row scales (fp16). Two ANDs and a shift give the vectors the packed
// prefill kernel builds per call, so one broadcast + vpmaddubsw per 4 elements feeds all 8
// rows: no horizontal sums, no scale gathers, one sequential stream per thread. Same bytes per
// panel as the file (8 x 18), and the same float steps as every other kernel (gemm.h).
// Q8_0: 8 vectors of signed codes laid out the same way, then the 8 scales (8 x 34 bytes);
// |w| (once per panel block) times sign-adjusted activations keeps vpmaddubsw from saturating.
// Where AVX-512 VNNI is compiled in, vpdpbusd replaces the vpmaddubsw chains (exact int32 either
// way, so the same bits) and the Q8_0 panel holds its codes + 128, unsigned.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <cstddef>

#include "kernels/quant/blocks.h"
#include "kernels/quant/gemm_avx2_packed.h"

namespace kvasir::kernels::simd {
namespace {

constexpr size_t kQ4_0Codes = 128;                  // 4 x 32 bytes of nibbles
constexpr size_t kQ4_0Block = kQ4_0Codes + 16;      // + 8 fp16 scales
constexpr size_t kQ8_0Codes = 256;                  // 8 x 32 bytes of int8
constexpr size_t kQ8_0Block = kQ8_0Codes + 16;

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

struct Prep {
  float da;
  int32_t corr;  // the code offset (Q4_0 8, Q5_0 16, unsigned Q8_0 128) times the activation block's sum
};

// Q5_0: the Q4_0 panel block with the codes' fifth bits after the nibbles, 32 bytes where bit k
// of byte 4c + e is the fifth bit of element 4k + e of row c, then the scales (8 x 22 bytes, as
// in the file). Codes 0..31 with an offset of 16.
constexpr size_t kQ5_0High = kQ4_0Codes, kQ5_0Scales = kQ5_0High + 32, kQ5_0Block = kQ5_0Scales + 16;
template <bool kQ5>
constexpr size_t kScalesAt = kQ5 ? kQ5_0Scales : kQ4_0Codes;
template <bool kQ5>
constexpr size_t kBlockBytes = kScalesAt<kQ5> + 16;

// Code vector k's fifth bits moved to bit 4 of their bytes (a 16-bit shift by at most 4 never
// carries the neighbouring byte's bits into bit 4).
inline __m256i fifth_of(__m256i hb, int k) {
  const __m256i t = k < 4 ? _mm256_slli_epi16(hb, 4 - k) : _mm256_srli_epi16(hb, k - 4);
  return _mm256_and_si256(t, _mm256_set1_epi8(0x10));
}

#if KVASIR_HAVE_VNNI
inline __m512i fifth_of(__m512i hb, int k) {
  const __m512i t = k < 4 ? _mm512_slli_epi16(hb, 4 - k) : _mm512_srli_epi16(hb, k - 4);
  return _mm512_and_si512(t, _mm512_set1_epi8(0x10));
}

// With VNNI one vpdpbusd per 4 elements adds the codes' products into each column's int32 lane
// (two chains a row, so the adds overlap); starting a chain at -corr takes the offset away.
template <int R, bool kQ5>
void panel_q4_0(const uint8_t* panel, int64_t nb, const BlockQ8_0* const a[], const Prep* const pr[], __m256 acc[]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* pb = panel + size_t(i) * kBlockBytes<kQ5>;
    prefetch_part<kBlockBytes<kQ5>, 1>(pb, 0);
    __m256i v[8];
    for (int m = 0; m < 4; ++m) {
      const __m256i l = load256(pb + 32 * m);
      v[2 * m] = _mm256_and_si256(l, low4);
      v[2 * m + 1] = _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
    }
    if constexpr (kQ5) {
      const __m256i hb = load256(pb + kQ5_0High);
      for (int k = 0; k < 8; ++k) v[k] = _mm256_or_si256(v[k], fifth_of(hb, k));
    }
    const __m256 dw = _mm256_cvtph_ps(load128(pb + kScalesAt<kQ5>));
    for (int r = 0; r < R; ++r) {
      const int8_t* q = a[r][i].qs;
      __m256i s0 = _mm256_dpbusd_epi32(_mm256_set1_epi32(-pr[r][i].corr), v[0], bcast4(q));
      __m256i s1 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), v[1], bcast4(q + 4));
      for (int k = 2; k < 8; k += 2) {
        s0 = _mm256_dpbusd_epi32(s0, v[k], bcast4(q + 4 * k));
        s1 = _mm256_dpbusd_epi32(s1, v[k + 1], bcast4(q + 4 * k + 4));
      }
      const __m256i isum = _mm256_add_epi32(s0, s1);
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(pr[r][i].da)), _mm256_cvtepi32_ps(isum), acc[r]);
    }
  }
}
#else
// Without VNNI, vpmaddubsw takes the unsigned codes times the activation bytes in int16 pairs.
// Q4_0's eight pair sums per lane stay below 2^15 (8 x 2 x 15 x 127); Q5_0's codes reach 31, so
// its sums go to int32 in two runs of four (4 x 2 x 31 x 127 = 31,496). Integer sums are exact:
// the same bits as the file-layout kernels.
template <int R, bool kQ5>
void panel_q4_0(const uint8_t* panel, int64_t nb, const BlockQ8_0* const a[], const Prep* const pr[], __m256 acc[]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* pb = panel + size_t(i) * kBlockBytes<kQ5>;
    prefetch_part<kBlockBytes<kQ5>, 1>(pb, 0);
    __m256i v[8];
    for (int m = 0; m < 4; ++m) {
      const __m256i l = load256(pb + 32 * m);
      v[2 * m] = _mm256_and_si256(l, low4);
      v[2 * m + 1] = _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
    }
    if constexpr (kQ5) {
      const __m256i hb = load256(pb + kQ5_0High);
      for (int k = 0; k < 8; ++k) v[k] = _mm256_or_si256(v[k], fifth_of(hb, k));
    }
    const __m256 dw = _mm256_cvtph_ps(load128(pb + kScalesAt<kQ5>));
    for (int r = 0; r < R; ++r) {
      const int8_t* q = a[r][i].qs;
      __m256i isum;
      if constexpr (kQ5) {
        __m256i p0 = _mm256_maddubs_epi16(v[0], bcast4(q)), p1 = _mm256_maddubs_epi16(v[4], bcast4(q + 16));
        for (int k = 1; k < 4; ++k) {
          p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(v[k], bcast4(q + 4 * k)));
          p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(v[k + 4], bcast4(q + 4 * k + 16)));
          keep_chain(p0);
          keep_chain(p1);
        }
        isum = _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
      } else {
        __m256i p = _mm256_maddubs_epi16(v[0], bcast4(q));
        for (int k = 1; k < 8; ++k) {
          p = _mm256_add_epi16(p, _mm256_maddubs_epi16(v[k], bcast4(q + 4 * k)));
          keep_chain(p);
        }
        isum = _mm256_madd_epi16(p, ones);
      }
      isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(pr[r][i].corr));
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(pr[r][i].da)), _mm256_cvtepi32_ps(isum), acc[r]);
    }
  }
}

#endif

// Q8_0: pr[r][i] holds row r's block scales as floats (computed once per call). Only the first
// row group of a panel block streams it from memory (prefetched 2 KiB ahead); the others find
// it in L2.
#if KVASIR_HAVE_VNNI
// With VNNI the panel stores the codes moved to unsigned (w ^ 0x80 = w + 128), so one vpdpbusd
// per 4 elements multiplies them by the activation bytes; 128 * sum(a) of the block comes off.
constexpr bool kQ8_0Unsigned = true;

template <int R>
void panel_q8_0(const uint8_t* panel, int64_t nb, const BlockQ8_0* const a[], const Prep* const pr[], bool stream,
                __m256 acc[]) {
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* pb = panel + size_t(i) * kQ8_0Block;
    if (stream)
      prefetch_part<kQ8_0Block, 1>(pb, 0);
    __m256i s0[R], s1[R];
    for (int r = 0; r < R; ++r) s0[r] = _mm256_set1_epi32(-pr[r][i].corr), s1[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
      const __m256i w0 = load256(pb + 32 * k), w1 = load256(pb + 32 * k + 32);
      for (int r = 0; r < R; ++r) {
        s0[r] = _mm256_dpbusd_epi32(s0[r], w0, bcast4(a[r][i].qs + 4 * k));
        s1[r] = _mm256_dpbusd_epi32(s1[r], w1, bcast4(a[r][i].qs + 4 * k + 4));
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(pb + kQ8_0Codes));
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(pr[r][i].da)),
                               _mm256_cvtepi32_ps(_mm256_add_epi32(s0[r], s1[r])), acc[r]);
  }
}
#else
constexpr bool kQ8_0Unsigned = false;

template <int R>
void panel_q8_0(const uint8_t* panel, int64_t nb, const BlockQ8_0* const a[], const Prep* const pr[], bool stream,
                __m256 acc[]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* pb = panel + size_t(i) * kQ8_0Block;
    if (stream)
      prefetch_part<kQ8_0Block, 1>(pb, 0);
    __m256i isum[R];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m256i w = load256(pb + 32 * k), wabs = _mm256_sign_epi8(w, w);
      for (int r = 0; r < R; ++r) {
        const __m256i s = _mm256_sign_epi8(bcast4(a[r][i].qs + 4 * k), w);
        const __m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, s), ones);
        isum[r] = k == 0 ? t : _mm256_add_epi32(isum[r], t);
        keep_chain(isum[r]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(pb + kQ8_0Codes));
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(pr[r][i].da)), _mm256_cvtepi32_ps(isum[r]), acc[r]);
  }
}

#endif

#if KVASIR_HAVE_VNNI
template <int R>
void split_halves(const __m512 acc[], __m256 acc0[], __m256 acc1[]) {
  for (int r = 0; r < R; ++r) acc0[r] = _mm512_castps512_ps256(acc[r]), acc1[r] = _mm512_extractf32x8_ps(acc[r], 1);
}

// The two-panel forms (16 columns a register, see kPanelsPerStep): panel p at `panel`, p + 1 at
// panel + panel_bytes; per lane the same integer sums and float steps as the one-panel kernels.
template <int R, bool kQ5>
void panel2_q4_0(const uint8_t* panel, size_t panel_bytes, int64_t nb, const BlockQ8_0* const a[],
                 const Prep* const pr[], __m256 acc0[], __m256 acc1[]) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p0 = panel + size_t(i) * kBlockBytes<kQ5>;
    const uint8_t* p1 = p0 + panel_bytes;
    prefetch_part<kBlockBytes<kQ5>, 1>(p0, 0);
    prefetch_part<kBlockBytes<kQ5>, 1>(p1, 0);
    __m512i v[8];
    for (int m = 0; m < 4; ++m) {
      const __m512i l = load_pair(p0 + 32 * m, p1 + 32 * m);
      v[2 * m] = _mm512_and_si512(l, low4);
      v[2 * m + 1] = _mm512_and_si512(_mm512_srli_epi16(l, 4), low4);
    }
    if constexpr (kQ5) {
      const __m512i hb = load_pair(p0 + kQ5_0High, p1 + kQ5_0High);
      for (int k = 0; k < 8; ++k) v[k] = _mm512_or_si512(v[k], fifth_of(hb, k));
    }
    const __m512 dw = load_pair_half(p0 + kScalesAt<kQ5>, p1 + kScalesAt<kQ5>);
    for (int r = 0; r < R; ++r) {
      const int8_t* q = a[r][i].qs;
      __m512i s0 = _mm512_dpbusd_epi32(_mm512_set1_epi32(-pr[r][i].corr), v[0], bcast4_512(q));
      __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[1], bcast4_512(q + 4));
      for (int k = 2; k < 8; k += 2) {
        s0 = _mm512_dpbusd_epi32(s0, v[k], bcast4_512(q + 4 * k));
        s1 = _mm512_dpbusd_epi32(s1, v[k + 1], bcast4_512(q + 4 * k + 4));
      }
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(pr[r][i].da)),
                               _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[r]);
    }
  }
  split_halves<R>(acc, acc0, acc1);
}

template <int R>
void panel2_q8_0(const uint8_t* panel, size_t panel_bytes, int64_t nb, const BlockQ8_0* const a[],
                 const Prep* const pr[], bool stream, __m256 acc0[], __m256 acc1[]) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p0 = panel + size_t(i) * kQ8_0Block;
    const uint8_t* p1 = p0 + panel_bytes;
    if (stream) {
      prefetch_part<kQ8_0Block, 1>(p0, 0);
      prefetch_part<kQ8_0Block, 1>(p1, 0);
    }
    __m512i s0[R], s1[R];
    for (int r = 0; r < R; ++r) s0[r] = _mm512_set1_epi32(-pr[r][i].corr), s1[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
      const __m512i w0 = load_pair(p0 + 32 * k, p1 + 32 * k), w1 = load_pair(p0 + 32 * k + 32, p1 + 32 * k + 32);
      for (int r = 0; r < R; ++r) {
        s0[r] = _mm512_dpbusd_epi32(s0[r], w0, bcast4_512(a[r][i].qs + 4 * k));
        s1[r] = _mm512_dpbusd_epi32(s1[r], w1, bcast4_512(a[r][i].qs + 4 * k + 4));
      }
    }
    const __m512 dw = load_pair_half(p0 + kQ8_0Codes, p1 + kQ8_0Codes);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(pr[r][i].da)),
                               _mm512_cvtepi32_ps(_mm512_add_epi32(s0[r], s1[r])), acc[r]);
  }
  split_halves<R>(acc, acc0, acc1);
}
#endif

void pack_q8_0(const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t nb, uint8_t* dst) {
  for (int64_t i = 0; i < nb; ++i) {
    __m256i codes[8];
    alignas(16) uint16_t d[8];
    for (int c = 0; c < 8; ++c) {
      const auto& b = reinterpret_cast<const BlockQ8_0*>(w + size_t(std::min<int64_t>(c, n_rows - 1)) * w_stride)[i];
      codes[c] = load256(b.qs);
      if (kQ8_0Unsigned) codes[c] = _mm256_xor_si256(codes[c], _mm256_set1_epi8(char(0x80)));
      d[c] = b.d;
    }
    transpose8x8_epi32(codes);
    uint8_t* pb = dst + size_t(i) * kQ8_0Block;
    for (int k = 0; k < 8; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + 32 * k), codes[k]);
    std::memcpy(pb + kQ8_0Codes, d, 16);
  }
}

void pack_q5_0(const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t nb, uint8_t* dst) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < nb; ++i) {
    __m256i codes[8];
    alignas(16) uint16_t d[8];
    for (int c = 0; c < 8; ++c) {
      const auto& b = reinterpret_cast<const BlockQ5_0*>(w + size_t(std::min<int64_t>(c, n_rows - 1)) * w_stride)[i];
      codes[c] = _mm256_or_si256(unpack_nibbles(b.qs), fifth_bits(b.qh));
      d[c] = b.d;
    }
    transpose8x8_epi32(codes);
    uint8_t* pb = dst + size_t(i) * kQ5_0Block;
    __m256i hb = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k)
      hb = _mm256_or_si256(hb, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(codes[k], 4), one), k));
    for (int m = 0; m < 4; ++m)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + 32 * m),
                          _mm256_or_si256(_mm256_and_si256(codes[2 * m], low4),
                                          _mm256_slli_epi16(_mm256_and_si256(codes[2 * m + 1], low4), 4)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + kQ5_0High), hb);
    std::memcpy(pb + kQ5_0Scales, d, 16);
  }
}

void pack_q4_0(const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t nb, uint8_t* dst) {
  for (int64_t i = 0; i < nb; ++i) {
    __m256i codes[8];
    alignas(16) uint16_t d[8];
    for (int c = 0; c < 8; ++c) {
      const auto& b = reinterpret_cast<const BlockQ4_0*>(w + size_t(std::min<int64_t>(c, n_rows - 1)) * w_stride)[i];
      codes[c] = unpack_nibbles(b.qs);
      d[c] = b.d;
    }
    transpose8x8_epi32(codes);
    uint8_t* pb = dst + size_t(i) * kQ4_0Block;
    for (int m = 0; m < 4; ++m)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + 32 * m),
                          _mm256_or_si256(codes[2 * m], _mm256_slli_epi16(codes[2 * m + 1], 4)));
    std::memcpy(pb + kQ4_0Codes, d, 16);
  }
}

// The kernels that take Q8_0 activations (Q4_0, Q5_0, Q8_0): each (row, block)'s scale and
// offset x block sum computed once per call into prep, then the panels row group by row group;
// kernels.template operator()<R>(panel, np, a, pr, first_group, out) runs one or two panels.
template <class Kernels>
void gemm_q8_0_acts(const uint8_t* panels, size_t panel_bytes, int64_t nb, int64_t out_begin, int64_t out_end,
                    const uint8_t* act, size_t a_stride, int64_t n_rows, float* y, int64_t y_stride, Prep* prep,
                    int offset, Kernels&& kernels) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(act + size_t(r) * a_stride);
    for (int64_t i = 0; i < nb; ++i) prep[r * nb + i] = {half_to_float(a[i].d), offset ? offset * sum_i8_32(a[i].qs) : 0};
  }
  for_prepacked_panels(panel_bytes, out_begin, out_end, n_rows, y, y_stride,
                       [&](int64_t p, int np, int64_t r0, int R, float (*out)[8 * kPanelsPerStep]) {
    const BlockQ8_0* a[kPanelRowGroup];
    const Prep* pr[kPanelRowGroup];
    for (int r = 0; r < R; ++r) {
      a[r] = reinterpret_cast<const BlockQ8_0*>(act + size_t(r0 + r) * a_stride);
      pr[r] = prep + (r0 + r) * nb;
    }
    const uint8_t* panel = panels + size_t(p) * panel_bytes;
    with_rows(R, [&]<int kR>() { kernels.template operator()<kR>(panel, np, a, pr, r0 == 0, out); });
  });
}

// Q4_0 (kQ5 false) and Q5_0: unsigned codes with an offset of 8 / 16.
template <bool kQ5>
void gemm_nibbles(const uint8_t* panels, size_t panel_bytes, int64_t nb, int64_t out_begin, int64_t out_end,
                  const uint8_t* act, size_t a_stride, int64_t n_rows, float* y, int64_t y_stride, Prep* prep) {
  gemm_q8_0_acts(panels, panel_bytes, nb, out_begin, out_end, act, a_stride, n_rows, y, y_stride, prep, kQ5 ? 16 : 8,
                 [&]<int kR>(const uint8_t* panel, int np, const BlockQ8_0* const a[], const Prep* const pr[], bool,
                             float (*out)[8 * kPanelsPerStep]) {
    run_panels<kR>(np, out, [&](__m256 acc[]) { panel_q4_0<kR, kQ5>(panel, nb, a, pr, acc); },
                   [&]([[maybe_unused]] __m256 acc0[], [[maybe_unused]] __m256 acc1[]) {
#if KVASIR_HAVE_VNNI
                     panel2_q4_0<kR, kQ5>(panel, panel_bytes, nb, a, pr, acc0, acc1);
#endif
                   });
  });
}

// Q8_0: the first row group of a panel block streams it from memory (prefetched); the others
// find it in L2.
void gemm_q8_0(const uint8_t* panels, size_t panel_bytes, int64_t nb, int64_t out_begin, int64_t out_end,
               const uint8_t* act, size_t a_stride, int64_t n_rows, float* y, int64_t y_stride, Prep* prep) {
  gemm_q8_0_acts(panels, panel_bytes, nb, out_begin, out_end, act, a_stride, n_rows, y, y_stride, prep,
                 kQ8_0Unsigned ? 128 : 0,
                 [&]<int kR>(const uint8_t* panel, int np, const BlockQ8_0* const a[], const Prep* const pr[],
                             bool stream, float (*out)[8 * kPanelsPerStep]) {
    run_panels<kR>(np, out, [&](__m256 acc[]) { panel_q8_0<kR>(panel, nb, a, pr, stream, acc); },
                   [&]([[maybe_unused]] __m256 acc0[], [[maybe_unused]] __m256 acc1[]) {
#if KVASIR_HAVE_VNNI
                     panel2_q8_0<kR>(panel, panel_bytes, nb, a, pr, stream, acc0, acc1);
#endif
                   });
  });
}

}  // namespace

size_t prepacked_panel_bytes(DType wtype, int64_t n_in) {
  if (wtype == DType::Q4_0) return size_t(n_in / kQ) * kQ4_0Block;
  if (wtype == DType::Q8_0) return size_t(n_in / kQ) * kQ8_0Block;
  if (wtype == DType::Q5_0) return size_t(n_in / kQ) * kQ5_0Block;
  if (is_float_type(wtype)) return prepacked_float_panel_bytes(wtype, n_in);
  return prepacked_k_panel_bytes(wtype, n_in);
}

void prepack_panel(DType wtype, const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t n_in, uint8_t* dst) {
  if (wtype == DType::Q4_0) return pack_q4_0(w, w_stride, n_rows, n_in / kQ, dst);
  if (wtype == DType::Q8_0) return pack_q8_0(w, w_stride, n_rows, n_in / kQ, dst);
  if (wtype == DType::Q5_0) return pack_q5_0(w, w_stride, n_rows, n_in / kQ, dst);
  if (is_float_type(wtype)) return prepack_float_panel(wtype, w, w_stride, n_rows, n_in, dst);
  prepack_k_panel(wtype, w, w_stride, n_rows, n_in, dst);
}

size_t prepacked_scratch_bytes(DType wtype, int64_t n_in, int64_t n_rows) {
  if (is_float_type(wtype)) return prepacked_float_scratch_bytes(wtype, n_in, n_rows);
  if (wtype != DType::Q4_0 && wtype != DType::Q5_0 && wtype != DType::Q8_0) return 0;
  return size_t(n_rows * (n_in / kQ)) * sizeof(Prep);
}

void gemm_prepacked(DType wtype, const uint8_t* panels, size_t panel_bytes, int64_t n_in, int64_t out_begin,
                    int64_t out_end, const uint8_t* act, size_t a_stride, int64_t n_rows, float* y, int64_t y_stride,
                    void* scratch) {
  if (is_float_type(wtype))
    return gemm_prepacked_float(wtype, panels, panel_bytes, n_in, out_begin, out_end, act, a_stride, n_rows, y,
                                y_stride, scratch);
  const int64_t nb = n_in / kQ;
  if (wtype == DType::Q4_0)
    return gemm_nibbles<false>(panels, panel_bytes, nb, out_begin, out_end, act, a_stride, n_rows, y, y_stride,
                               static_cast<Prep*>(scratch));
  if (wtype == DType::Q5_0)
    return gemm_nibbles<true>(panels, panel_bytes, nb, out_begin, out_end, act, a_stride, n_rows, y, y_stride,
                              static_cast<Prep*>(scratch));
  if (wtype == DType::Q8_0)
    return gemm_q8_0(panels, panel_bytes, nb, out_begin, out_end, act, a_stride, n_rows, y, y_stride,
                     static_cast<Prep*>(scratch));
  gemm_prepacked_k(wtype, panels, panel_bytes, n_in, out_begin, out_end, act, a_stride, n_rows, y, y_stride);
}

}  // namespace kvasir::kernels::simd
#endif
