// BF16 matmul tiles: BF16 weights times BF16 activations in the order of AVX512-BF16's
// vdpbf16ps (the contract in gemm.h): 16 lanes over 32-element chunks, each lane adding its odd
// product and then its even one as FMAs, denormal inputs read as zero and denormal results
// flushed to zero. Where the machine has the instruction, one vdpbf16ps does a lane's two steps
// (measured bitwise equal to that emulation, NaN payloads included); elsewhere FMAs run in the
// same order with MXCSR's DAZ and FTZ set around the chunk loop.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "kernels/quant/gemm_avx2.h"

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 headers (their "undefined" upper halves); nothing of ours.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvasir::kernels::simd {
namespace {

// The contract's tail: k >= n & ~31, plain FMAs in order (no flushing).
float tail(float s, const uint16_t* w, const uint16_t* a, int64_t n32, int64_t n) {
  for (int64_t k = n32; k < n; ++k) s = std::fma(bf16_to_f32(w[k]), bf16_to_f32(a[k]), s);
  return s;
}

#if defined(__AVX512BF16__) && KVASIR_HAVE_AVX512_FLOAT
// R rows x C weight rows, one 16-lane register each: lane j of chunk m gets elements 32m + 2j
// and 32m + 2j + 1 (odd first), as vdpbf16ps adds them.
template <int R, int C>
void micro(int64_t n, const uint16_t* w, int64_t ws, const uint16_t* a, int64_t as, float* y, int64_t ys) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t n32 = n & ~int64_t(31);
  for (int64_t k = 0; k < n32; k += 32) {
    // Decode: the next tile's rows are fetched while this one is computed (a hint: it never
    // faults, also past the last row).
    if constexpr (R == 1)
      for (int c = 0; c < C; ++c) prefetch_line(w + (C + c) * ws + k);
    __m512bh wv[C];
    for (int c = 0; c < C; ++c) wv[c] = (__m512bh)_mm512_loadu_si512(w + c * ws + k);
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_loadu_si512(a + r * as + k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv[c], av);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const __m256 lanes = _mm256_add_ps(_mm512_castps512_ps256(acc[r][c]), _mm512_extractf32x8_ps(acc[r][c], 1));
      y[r * ys + c] = tail(hsum(lanes), w + c * ws, a + r * as, n32, n);
    }
}
constexpr int kRows = 4, kCols = 4;
#else
// Odd and even elements of 16 bf16 as f32 (8 lanes each): the high half of every dword, and
// the low half shifted up.
inline void split(const uint16_t* p, __m256& odd, __m256& even) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xFFFF0000u))));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// The same order with FMAs: lanes 0..7 (elements 32m..32m+15) and 8..15 (the rest) in two
// registers per output, under DAZ + FTZ for the chunk loop only.
template <int R, int C>
void micro(int64_t n, const uint16_t* w, int64_t ws, const uint16_t* a, int64_t as, float* y, int64_t ys) {
  __m256 acc[R][C][2];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
  const int64_t n32 = n & ~int64_t(31);
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);  // FTZ (bit 15) and DAZ (bit 6)
  for (int64_t k = 0; k < n32; k += 32) {
    for (int h = 0; h < 2; ++h) {
      __m256 wo[C], we[C];
      for (int c = 0; c < C; ++c) split(w + c * ws + k + 16 * h, wo[c], we[c]);
      for (int r = 0; r < R; ++r) {
        __m256 ao, ae;
        split(a + r * as + k + 16 * h, ao, ae);
        for (int c = 0; c < C; ++c) {
          acc[r][c][h] = _mm256_fmadd_ps(wo[c], ao, acc[r][c][h]);
          acc[r][c][h] = _mm256_fmadd_ps(we[c], ae, acc[r][c][h]);
        }
      }
    }
  }
  _mm_setcsr(csr);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      y[r * ys + c] = tail(hsum(_mm256_add_ps(acc[r][c][0], acc[r][c][1])), w + c * ws, a + r * as, n32, n);
}
constexpr int kRows = 2, kCols = 2;
#endif

template <int R>
void micro_cols(int C, int64_t n, const uint16_t* w, int64_t ws, const uint16_t* a, int64_t as, float* y, int64_t ys) {
  switch (C) {
    case 1: return micro<R, 1>(n, w, ws, a, as, y, ys);
    case 2: return micro<R, std::min(2, kCols)>(n, w, ws, a, as, y, ys);
    case 3: return micro<R, std::min(3, kCols)>(n, w, ws, a, as, y, ys);
    default: return micro<R, kCols>(n, w, ws, a, as, y, ys);
  }
}

}  // namespace

void gemm_bf16(const GemmTile& t) {
  const auto* w0 = reinterpret_cast<const uint16_t*>(t.w);
  const int64_t ws = int64_t(t.w_stride / 2), as = int64_t(t.a_stride / 2);
  // ~192 KiB of weights per column block: stays in L2 while every row group passes over it.
  const int64_t block_cols = std::max<int64_t>(kCols, (192 << 10) / std::max<int64_t>(1, t.n * 2));
  for (int64_t c0 = 0; c0 < t.n_cols; c0 += block_cols) {
    const int64_t c1 = std::min(t.n_cols, c0 + block_cols);
    for (int64_t r0 = 0; r0 < t.n_rows; r0 += kRows) {
      const int R = int(std::min<int64_t>(kRows, t.n_rows - r0));
      const auto* a = reinterpret_cast<const uint16_t*>(t.a + size_t(r0) * t.a_stride);
      for (int64_t c = c0; c < c1; c += kCols) {
        const int C = int(std::min<int64_t>(kCols, c1 - c));
        float* y = t.y + r0 * t.y_stride + c;
        switch (R) {
          case 1: micro_cols<1>(C, t.n, w0 + c * ws, ws, a, as, y, t.y_stride); break;
          case 2: micro_cols<std::min(2, kRows)>(C, t.n, w0 + c * ws, ws, a, as, y, t.y_stride); break;
          case 3: micro_cols<std::min(3, kRows)>(C, t.n, w0 + c * ws, ws, a, as, y, t.y_stride); break;
          default: micro_cols<kRows>(C, t.n, w0 + c * ws, ws, a, as, y, t.y_stride); break;
        }
      }
    }
  }
}

}  // namespace kvasir::kernels::simd
#endif
