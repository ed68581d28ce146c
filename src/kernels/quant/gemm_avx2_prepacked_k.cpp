// Decode kernels on repacked k-quant weights (PackedMatrix): Q4_K and Q6_K, the types of the
// Q4_K_M mix. A panel super-block holds 8 rows x 256 elements, codes as in the Q4_0 panels
// (vector k = elements 4k..4k+3 of every row, row c at bytes 4c..4c+3) plus the rows' scale
// bytes laid out [byte][row], so one load gives a byte (a Q6_K sub-block's scale) of all 8 rows:
//   Q4_K: 32 x 32 bytes of nibble pairs | the file's 6-bit scales and mins u8[12][8] | d f16[8] | dmin f16[8]
//   Q6_K: 32 x 32 bytes of low-nibble pairs | 16 x 32 bytes of high 2-bit quads | scales i8[16][8] | d f16[8]
// Same bytes per panel as the file (8 x 144, 8 x 210), same float steps as every kernel (gemm.h).
// Decode streams these panels from memory, so a byte the panel does not hold is time saved: a
// Q4_K super-block's scales and mins are unpacked for its 8 rows when the kernel reaches it
// (unpack_q4_k_scales, a few byte operations on three vectors).
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <cstddef>

#include "kernels/quant/blocks.h"
#include "kernels/quant/gemm_avx2_packed.h"

namespace kvasir::kernels::simd {
namespace {

constexpr size_t kQ4KScales = 1024, kQ4KD = kQ4KScales + 96, kQ4KDmin = kQ4KD + 16;
constexpr size_t kQ4KBlock = kQ4KDmin + 16;
constexpr size_t kQ6KHigh = 1024, kQ6KScales = kQ6KHigh + 512, kQ6KD = kQ6KScales + 128;
constexpr size_t kQ6KBlock = kQ6KD + 16;

inline __m256i loadu(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// 8 bytes -> int16 lanes (2c, 2c+1) = v[c] (unsigned or signed bytes).
template <bool kSigned>
inline __m256i dup16(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i w = kSigned ? _mm_cvtepi8_epi16(b) : _mm_cvtepu8_epi16(b);
  return _mm256_set_m128i(_mm_unpackhi_epi16(w, w), _mm_unpacklo_epi16(w, w));
}
// int16 lanes (2c, 2c+1) = (p[c], q[c]) for two 8-byte rows.
template <bool kSigned>
inline __m256i interleave16(const uint8_t* p, const uint8_t* q) {
  const __m128i b = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                                      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  return kSigned ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
}

// Nibble pair chunk -> the two code vectors it holds.
inline void nibble_vectors(const uint8_t* chunk, __m256i& lo, __m256i& hi) {
  const __m256i l = loadu(chunk), m = _mm256_set1_epi8(0x0F);
  lo = _mm256_and_si256(l, m);
  hi = _mm256_and_si256(_mm256_srli_epi16(l, 4), m);
}

// A Q4_K super-block's scales and mins for its 8 rows, [sub-block j][row c], from the file's
// 6-bit form (bytes q[0..11] of a row; j < 4: scale q[j] & 63, min q[j + 4] & 63; j >= 4:
// scale q[j + 4] & 15 | (q[j - 4] >> 6) << 4, min q[j + 4] >> 4 | (q[j] >> 6) << 4). The panel
// holds q[b] of the 8 rows at bytes 8b..8b+7, so three vectors hold q[0..3], q[4..7], q[8..11].
// Unpacked into a buffer on the stack: kept in registers, they crowded the two-panel prefill
// kernel's row sums out (spills, 8-10% slower prefill).
struct Q4KScales {
  alignas(32) uint8_t sc[64];
  alignas(32) uint8_t mn[64];
};
[[gnu::always_inline]] inline void unpack_q4_k_scales(const uint8_t* pb, Q4KScales& out) {
  const __m256i q03 = loadu(pb + kQ4KScales), q47 = loadu(pb + kQ4KScales + 32), q811 = loadu(pb + kQ4KScales + 64);
  const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15), top2 = _mm256_set1_epi8(0x30);
  // (x >> 6) << 4 of a byte is (x >> 2) & 0x30; the 16-bit shifts carry the next byte's bits
  // only into bits the masks clear.
  const __m256i sc47 = _mm256_or_si256(_mm256_and_si256(q811, m15), _mm256_and_si256(_mm256_srli_epi16(q03, 2), top2));
  const __m256i mn47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q811, 4), m15),
                                       _mm256_and_si256(_mm256_srli_epi16(q47, 2), top2));
  _mm256_store_si256(reinterpret_cast<__m256i*>(out.sc), _mm256_and_si256(q03, m63));
  _mm256_store_si256(reinterpret_cast<__m256i*>(out.sc + 32), sc47);
  _mm256_store_si256(reinterpret_cast<__m256i*>(out.mn), _mm256_and_si256(q47, m63));
  _mm256_store_si256(reinterpret_cast<__m256i*>(out.mn + 32), mn47);
}

// The end of a Q4_K super-block i for R activation rows, given each row's integer code sums:
// acc[r] += (dw * da) * sumi[r] - (dmin * da) * (sum over sub-blocks j of m_j * bsums of j).
// mn: the block's minimums, [sub-block][row] (Q4KScales::mn). Inlined by force: as a call, it
// cost the one-row kernel 5-10% from L2.
template <int R>
[[gnu::always_inline]] inline void finish_q4_k_block(const uint8_t* pb, const uint8_t* mn, const BlockQ8_K* const a[],
                                                     int64_t i, const __m256i sumi[], __m256 acc[]) {
  const __m256 neg = _mm256_set1_ps(-0.0f);
  const __m256 dw = _mm256_cvtph_ps(load128(pb + kQ4KD)), dmin = _mm256_cvtph_ps(load128(pb + kQ4KDmin));
  __m256i mins[4];
  for (int t = 0; t < 4; ++t) mins[t] = interleave16<false>(mn + 16 * t, mn + 16 * t + 8);
  for (int r = 0; r < R; ++r) {
    // Minimums: sum over sub-blocks j of m_j * (bsums[2j] + bsums[2j+1]), pairs of j per madd.
    alignas(16) int16_t pairs[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(pairs), _mm_hadd_epi16(load128(a[r][i].bsums), load128(a[r][i].bsums + 8)));
    __m256i msum = _mm256_madd_epi16(mins[0], bcast4(pairs));
    for (int t = 1; t < 4; ++t) msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[t], bcast4(pairs + 2 * t)));
    const __m256 da = _mm256_set1_ps(a[r][i].d);
    acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
    acc[r] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(dmin, da), neg), _mm256_cvtepi32_ps(msum), acc[r]);
  }
}

// The end of a Q6_K super-block: codes are value + 32, so 32 * sum of scale * bsum comes off.
template <int R>
void finish_q6_k_block(const uint8_t* pb, const BlockQ8_K* const a[], int64_t i, const __m256i sumi[], __m256 acc[]) {
  const __m256 dw = _mm256_cvtph_ps(load128(pb + kQ6KD));
  __m256i bias_sc[8];
  for (int t = 0; t < 8; ++t) bias_sc[t] = interleave16<true>(pb + kQ6KScales + 16 * t, pb + kQ6KScales + 16 * t + 8);
  for (int r = 0; r < R; ++r) {
    __m256i bias = _mm256_madd_epi16(bias_sc[0], bcast4(a[r][i].bsums));
    for (int t = 1; t < 8; ++t) bias = _mm256_add_epi32(bias, _mm256_madd_epi16(bias_sc[t], bcast4(a[r][i].bsums + 2 * t)));
    const __m256i isum = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(bias, 5));
    acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[r][i].d)), _mm256_cvtepi32_ps(isum), acc[r]);
  }
}

template <int R>
void panel_q4_k(const uint8_t* panel, int64_t nb, const BlockQ8_K* const a[], __m256 acc[]) {
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* pb = panel + size_t(i) * kQ4KBlock;
    Q4KScales sm;
    unpack_q4_k_scales(pb, sm);
    __m256i sumi[R];
    for (int j = 0; j < 8; ++j) {
      prefetch_part<kQ4KBlock, 8>(pb, j);
      __m256i v[8];
      for (int m = 0; m < 4; ++m) nibble_vectors(pb + 128 * j + 32 * m, v[2 * m], v[2 * m + 1]);
      const __m256i sc = dup16<false>(sm.sc + 8 * j);
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a[r][i].qs + 32 * j;
        __m256i p = _mm256_maddubs_epi16(v[0], bcast4(q));
        for (int k = 1; k < 8; ++k) {
          p = _mm256_add_epi16(p, _mm256_maddubs_epi16(v[k], bcast4(q + 4 * k)));
          keep_chain(p);
        }
        const __m256i s = _mm256_madd_epi16(p, sc);
        sumi[r] = j == 0 ? s : _mm256_add_epi32(sumi[r], s);
      }
    }
    finish_q4_k_block<R>(pb, sm.mn, a, i, sumi, acc);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// GCC 12 warns inside its own AVX-512 headers (their "undefined" upper halves); nothing of ours.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// panel_q4_k with 512-bit registers: sub-blocks j and j + 1 side by side (one per 256-bit half),
// each half computing exactly the int16 and int32 lane sums of the 256-bit kernel; the halves'
// int32 sums are added at the end (exact), so the float steps and results are the same bits.
#if !KVASIR_HAVE_VNNI
inline __m512i pair256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1); }
#endif

// Each row's two halves' int32 lane sums added (exact).
template <int R>
void add_halves(const __m512i sumi[], __m256i out[]) {
  for (int r = 0; r < R; ++r) out[r] = _mm256_add_epi32(_mm512_castsi512_si256(sumi[r]), _mm512_extracti64x4_epi64(sumi[r], 1));
}

template <int R>
void panel_q4_k_512(const uint8_t* panel, int64_t nb, const BlockQ8_K* const a[], __m256 acc[]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* pb = panel + size_t(i) * kQ4KBlock;
    Q4KScales sm;
    unpack_q4_k_scales(pb, sm);
    __m512i sumi[R];
    for (int j = 0; j < 8; j += 2) {
      prefetch_part<kQ4KBlock, 4>(pb, j / 2);
      __m512i v[8];
      for (int m = 0; m < 4; ++m) {
        const __m512i c = pair256(loadu(pb + 128 * j + 32 * m), loadu(pb + 128 * (j + 1) + 32 * m));
        v[2 * m] = _mm512_and_si512(c, m4);
        v[2 * m + 1] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
      }
      const __m512i sc = pair256(dup16<false>(sm.sc + 8 * j), dup16<false>(sm.sc + 8 * (j + 1)));
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a[r][i].qs + 32 * j;
        __m512i p = _mm512_maddubs_epi16(v[0], pair256(bcast4(q), bcast4(q + 32)));
        for (int k = 1; k < 8; ++k)
          p = _mm512_add_epi16(p, _mm512_maddubs_epi16(v[k], pair256(bcast4(q + 4 * k), bcast4(q + 32 + 4 * k))));
        const __m512i s = _mm512_madd_epi16(p, sc);
        sumi[r] = j == 0 ? s : _mm512_add_epi32(sumi[r], s);
      }
    }
    __m256i si[R];
    add_halves<R>(sumi, si);
    finish_q4_k_block<R>(pb, sm.mn, a, i, si, acc);
  }
}
// panel_q6_k likewise: sub-blocks s and s + 1 side by side.
template <int R>
void panel_q6_k_512(const uint8_t* panel, int64_t nb, const BlockQ8_K* const a[], __m256 acc[]) {
  const __m512i low2 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(0x0F);
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* pb = panel + size_t(i) * kQ6KBlock;
    __m512i sumi[R];
    for (int s = 0; s < 16; s += 2) {
      prefetch_part<kQ6KBlock, 8>(pb, s / 2);
      __m512i v[4];
      for (int h = 0; h < 2; ++h) {
        const __m512i c = pair256(loadu(pb + 64 * s + 32 * h), loadu(pb + 64 * (s + 1) + 32 * h));
        v[2 * h] = _mm512_and_si512(c, m4);
        v[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
      }
      const __m512i hb = pair256(loadu(pb + kQ6KHigh + 32 * s), loadu(pb + kQ6KHigh + 32 * (s + 1)));
      for (int k = 0; k < 4; ++k)
        v[k] = _mm512_or_si512(v[k], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2 * k), low2), 4));
      const __m512i sc = pair256(dup16<true>(pb + kQ6KScales + 8 * s), dup16<true>(pb + kQ6KScales + 8 * (s + 1)));
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a[r][i].qs + 16 * s;
        auto bc = [&](int o) { return pair256(bcast4(q + o), bcast4(q + 16 + o)); };
        const __m512i p01 = _mm512_add_epi16(_mm512_maddubs_epi16(v[0], bc(0)), _mm512_maddubs_epi16(v[1], bc(4)));
        const __m512i p23 = _mm512_add_epi16(_mm512_maddubs_epi16(v[2], bc(8)), _mm512_maddubs_epi16(v[3], bc(12)));
        const __m512i t = _mm512_add_epi32(_mm512_madd_epi16(p01, sc), _mm512_madd_epi16(p23, sc));
        sumi[r] = s == 0 ? t : _mm512_add_epi32(sumi[r], t);
      }
    }
    __m256i si[R];
    add_halves<R>(sumi, si);
    finish_q6_k_block<R>(pb, a, i, si, acc);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define KVASIR_Q4K_PANEL panel_q4_k_512
#define KVASIR_Q6K_PANEL panel_q6_k_512
#else
#define KVASIR_Q4K_PANEL panel_q4_k
#define KVASIR_Q6K_PANEL panel_q6_k
#endif

template <int R>
void panel_q6_k(const uint8_t* panel, int64_t nb, const BlockQ8_K* const a[], __m256 acc[]) {
  const __m256i low2 = _mm256_set1_epi8(3);
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* pb = panel + size_t(i) * kQ6KBlock;
    __m256i sumi[R];
    for (int s = 0; s < 16; ++s) {
      prefetch_part<kQ6KBlock, 16>(pb, s);
      // Sub-block s = code vectors 4s..4s+3: low nibbles from chunks 2s, 2s+1, high bits from chunk s.
      __m256i v[4];
      nibble_vectors(pb + 64 * s, v[0], v[1]);
      nibble_vectors(pb + 64 * s + 32, v[2], v[3]);
      const __m256i h = loadu(pb + kQ6KHigh + 32 * s);
      for (int k = 0; k < 4; ++k)
        v[k] = _mm256_or_si256(v[k], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * k), low2), 4));
      const __m256i sc = dup16<true>(pb + kQ6KScales + 8 * s);
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a[r][i].qs + 16 * s;
        const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(v[0], bcast4(q)), _mm256_maddubs_epi16(v[1], bcast4(q + 4)));
        const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(v[2], bcast4(q + 8)), _mm256_maddubs_epi16(v[3], bcast4(q + 12)));
        const __m256i t = _mm256_add_epi32(_mm256_madd_epi16(p01, sc), _mm256_madd_epi16(p23, sc));
        sumi[r] = s == 0 ? t : _mm256_add_epi32(sumi[r], t);
        keep_chain(sumi[r]);
      }
    }
    finish_q6_k_block<R>(pb, a, i, sumi, acc);
  }
}

#if KVASIR_HAVE_VNNI
// The two-panel forms (see kPanelsPerStep): panel p at `panel`, p + 1 at panel + panel_bytes.
// vpdpbusd gives a sub-block's exact code sums per column in int32, times the column's scale in
// int32: the same sums as the vpmaddubsw / vpmaddwd kernels, so the same bits after finish_*.
// Row r's int32 sums of both panels, one per 256-bit half: panel p's in lo, p + 1's in hi.
template <int R>
void split_pair(const __m512i sumi[], __m256i lo[], __m256i hi[]) {
  for (int r = 0; r < R; ++r) lo[r] = _mm512_castsi512_si256(sumi[r]), hi[r] = _mm512_extracti64x4_epi64(sumi[r], 1);
}

// 8 bytes at p0 and 8 at p1 -> 16 int32 lanes.
template <bool kSigned>
inline __m512i widen_pair(const uint8_t* p0, const uint8_t* p1) {
  const __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)),
                                       _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p1)));
  return kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
}

template <int R>
void panel2_q4_k(const uint8_t* panel, size_t panel_bytes, int64_t nb, const BlockQ8_K* const a[], __m256 acc0[],
                 __m256 acc1[]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p0 = panel + size_t(i) * kQ4KBlock;
    const uint8_t* p1 = p0 + panel_bytes;
    Q4KScales sm0, sm1;
    unpack_q4_k_scales(p0, sm0);
    unpack_q4_k_scales(p1, sm1);
    __m512i sumi[R];
    for (int j = 0; j < 8; ++j) {
      prefetch_part<kQ4KBlock, 8>(p0, j);
      prefetch_part<kQ4KBlock, 8>(p1, j);
      __m512i v[8];
      for (int m = 0; m < 4; ++m) {
        const __m512i c = load_pair(p0 + 128 * j + 32 * m, p1 + 128 * j + 32 * m);
        v[2 * m] = _mm512_and_si512(c, m4);
        v[2 * m + 1] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
      }
      const __m512i sc = widen_pair<false>(sm0.sc + 8 * j, sm1.sc + 8 * j);
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a[r][i].qs + 32 * j;
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[0], bcast4_512(q));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[1], bcast4_512(q + 4));
        for (int k = 2; k < 8; k += 2) {
          s0 = _mm512_dpbusd_epi32(s0, v[k], bcast4_512(q + 4 * k));
          s1 = _mm512_dpbusd_epi32(s1, v[k + 1], bcast4_512(q + 4 * k + 4));
        }
        const __m512i t = _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), sc);
        sumi[r] = j == 0 ? t : _mm512_add_epi32(sumi[r], t);
      }
    }
    __m256i lo[R], hi[R];
    split_pair<R>(sumi, lo, hi);
    finish_q4_k_block<R>(p0, sm0.mn, a, i, lo, acc0);
    finish_q4_k_block<R>(p1, sm1.mn, a, i, hi, acc1);
  }
}

template <int R>
void panel2_q6_k(const uint8_t* panel, size_t panel_bytes, int64_t nb, const BlockQ8_K* const a[], __m256 acc0[],
                 __m256 acc1[]) {
  const __m512i low2 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(0x0F);
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* p0 = panel + size_t(i) * kQ6KBlock;
    const uint8_t* p1 = p0 + panel_bytes;
    __m512i sumi[R];
    for (int s = 0; s < 16; ++s) {
      prefetch_part<kQ6KBlock, 16>(p0, s);
      prefetch_part<kQ6KBlock, 16>(p1, s);
      __m512i v[4];
      for (int h = 0; h < 2; ++h) {
        const __m512i c = load_pair(p0 + 64 * s + 32 * h, p1 + 64 * s + 32 * h);
        v[2 * h] = _mm512_and_si512(c, m4);
        v[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
      }
      const __m512i hb = load_pair(p0 + kQ6KHigh + 32 * s, p1 + kQ6KHigh + 32 * s);
      for (int k = 0; k < 4; ++k)
        v[k] = _mm512_or_si512(v[k], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2 * k), low2), 4));
      const __m512i sc = widen_pair<true>(p0 + kQ6KScales + 8 * s, p1 + kQ6KScales + 8 * s);
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a[r][i].qs + 16 * s;
        const __m512i s01 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), v[0], bcast4_512(q)), v[1],
                                                bcast4_512(q + 4));
        const __m512i s23 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), v[2], bcast4_512(q + 8)),
                                                v[3], bcast4_512(q + 12));
        const __m512i t = _mm512_mullo_epi32(_mm512_add_epi32(s01, s23), sc);
        sumi[r] = s == 0 ? t : _mm512_add_epi32(sumi[r], t);
      }
    }
    __m256i lo[R], hi[R];
    split_pair<R>(sumi, lo, hi);
    finish_q6_k_block<R>(p0, a, i, lo, acc0);
    finish_q6_k_block<R>(p1, a, i, hi, acc1);
  }
}
#endif

// Packs the 8 rows' 32-element code groups g (element order) into 8 transposed vectors.
inline void transpose_group(__m256i codes[8], __m256i out[8]) {
  for (int c = 0; c < 8; ++c) out[c] = codes[c];
  transpose8x8_epi32(out);
}

void pack_q4_k(const uint8_t* const rows[8], int64_t i, uint8_t* dst) {
  for (int c = 0; c < 8; ++c) {
    const auto& b = reinterpret_cast<const BlockQ4_K*>(rows[c])[i];
    for (int q = 0; q < 12; ++q) dst[kQ4KScales + 8 * q + c] = b.scales[q];
    std::memcpy(dst + kQ4KD + 2 * c, &b.d, 2);
    std::memcpy(dst + kQ4KDmin + 2 * c, &b.dmin, 2);
  }
  for (int j = 0; j < 8; ++j) {  // sub-block j: nibble (j & 1) of bytes 32 (j / 2) .. + 31
    __m256i codes[8], v[8];
    for (int c = 0; c < 8; ++c) {
      const __m256i q = load256(reinterpret_cast<const BlockQ4_K*>(rows[c])[i].qs + 32 * (j / 2));
      codes[c] = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
    }
    transpose_group(codes, v);
    for (int m = 0; m < 4; ++m)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 * j + 32 * m),
                          _mm256_or_si256(v[2 * m], _mm256_slli_epi16(v[2 * m + 1], 4)));
  }
}

void pack_q6_k(const uint8_t* const rows[8], int64_t i, uint8_t* dst) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3);
  for (int c = 0; c < 8; ++c) {
    const auto& b = reinterpret_cast<const BlockQ6_K*>(rows[c])[i];
    for (int s = 0; s < 16; ++s) dst[kQ6KScales + 8 * s + c] = uint8_t(b.scales[s]);
    std::memcpy(dst + kQ6KD + 2 * c, &b.d, 2);
  }
  for (int g = 0; g < 8; ++g) {  // elements 32g..32g+31: half g / 4, quarter g % 4
    const int h = g / 4, k = g % 4;
    __m256i codes[8], v[8];
    for (int c = 0; c < 8; ++c) {
      const auto& b = reinterpret_cast<const BlockQ6_K*>(rows[c])[i];
      const __m256i l = load256(b.ql + 64 * h + 32 * (k & 1));
      const __m256i lo = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(l, 4) : l, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(load256(b.qh + 32 * h), _mm_cvtsi32_si128(2 * k)), low2);
      codes[c] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    transpose_group(codes, v);  // v[kk] = elements 32g + 4kk.., i.e. code vector 8g + kk
    for (int m = 0; m < 4; ++m)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 128 * g + 32 * m),
                          _mm256_or_si256(_mm256_and_si256(v[2 * m], low4),
                                          _mm256_slli_epi16(_mm256_and_si256(v[2 * m + 1], low4), 4)));
    for (int q = 0; q < 2; ++q) {  // high bits of code vectors 8g + 4q .. + 3 -> chunk 2g + q
      __m256i hbits = _mm256_setzero_si256();
      for (int t = 0; t < 4; ++t)
        hbits = _mm256_or_si256(hbits, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(v[4 * q + t], 4), low2), 2 * t));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kQ6KHigh + 32 * (2 * g + q)), hbits);
    }
  }
}

}  // namespace

size_t prepacked_k_panel_bytes(DType wtype, int64_t n_in) {
  const int64_t nb = n_in / kQK;
  if (wtype == DType::Q4_K) return size_t(nb) * kQ4KBlock;
  if (wtype == DType::Q6_K) return size_t(nb) * kQ6KBlock;
  return 0;
}

void prepack_k_panel(DType wtype, const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t n_in, uint8_t* dst) {
  const uint8_t* rows[8];
  for (int c = 0; c < 8; ++c) rows[c] = w + size_t(std::min<int64_t>(c, n_rows - 1)) * w_stride;
  for (int64_t i = 0; i < n_in / kQK; ++i) {
    if (wtype == DType::Q4_K) pack_q4_k(rows, i, dst + size_t(i) * kQ4KBlock);
    else pack_q6_k(rows, i, dst + size_t(i) * kQ6KBlock);
  }
}

void gemm_prepacked_k(DType wtype, const uint8_t* panels, size_t panel_bytes, int64_t n_in, int64_t out_begin,
                      int64_t out_end, const uint8_t* act, size_t a_stride, int64_t n_rows, float* y,
                      int64_t y_stride) {
  const int64_t nb = n_in / kQK;
  const bool q4 = wtype == DType::Q4_K;
  for_prepacked_panels(panel_bytes, out_begin, out_end, n_rows, y, y_stride,
                       [&](int64_t p, int np, int64_t r0, int R, float (*out)[8 * kPanelsPerStep]) {
    const BlockQ8_K* a[kPanelRowGroup];
    for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const BlockQ8_K*>(act + size_t(r0 + r) * a_stride);
    const uint8_t* panel = panels + size_t(p) * panel_bytes;
    with_rows(R, [&]<int kR>() {
      run_panels<kR>(np, out,
                     [&](__m256 acc[]) {
                       if (q4) KVASIR_Q4K_PANEL<kR>(panel, nb, a, acc);
                       else KVASIR_Q6K_PANEL<kR>(panel, nb, a, acc);
                     },
                     [&]([[maybe_unused]] __m256 acc0[], [[maybe_unused]] __m256 acc1[]) {
#if KVASIR_HAVE_VNNI
                       if (q4) panel2_q4_k<kR>(panel, panel_bytes, nb, a, acc0, acc1);
                       else panel2_q6_k<kR>(panel, panel_bytes, nb, a, acc0, acc1);
#endif
                     });
    });
  });
}

}  // namespace kvasir::kernels::simd
#endif
