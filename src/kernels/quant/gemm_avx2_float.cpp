// Float matmul tiles (F32, F16 weights; BF16 has its own order, gemm_avx2_bf16.cpp): register
// tiles of up to 4 activation rows x 4 weight rows, one 8-lane FMA accumulator per output (the contract in gemm.h). Activation rows
// are widened to f32 once per row group (exact), weight vectors once per k-step and shared by
// every row of the tile. Column blocks keep the weights a row group sweeps in L2. With AVX-512
// the tile holds two outputs per register (micro512), the same operations per output.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "kernels/quant/gemm_avx2.h"

namespace kvasir::kernels::simd {
namespace {

struct F32W {
  using T = float;
  static __m256 load(const T* p) { return _mm256_loadu_ps(p); }
  static float scalar(T v) { return v; }
};
struct F16W {
  using T = uint16_t;
  static __m256 load(const T* p) { return _mm256_cvtph_ps(load128(p)); }
  static float scalar(T v) { return half_to_float(v); }
};

// y[r][c] for R rows (f32, stride `as` floats) and C weight rows (stride `ws` elements).
template <class L, int R, int C>
void micro(int64_t n, const typename L::T* w, int64_t ws, const float* a, int64_t as, float* y, int64_t ys) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t n8 = n & ~int64_t(7);
  constexpr int64_t kLine = 64 / sizeof(typename L::T);
  for (int64_t k = 0; k < n8; k += 8) {
    // Decode: the next tile's rows (C further) are fetched while this one is computed (a hint:
    // it never faults, also past the last row).
    if (R == 1 && k % kLine == 0)
      for (int c = 0; c < C; ++c) prefetch_line(w + (C + c) * ws + k);
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = L::load(w + c * ws + k);
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_loadu_ps(a + r * as + k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv[c], av, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      for (int64_t k = n8; k < n; ++k) s = std::fma(L::scalar(w[c * ws + k]), a[r * as + k], s);
      y[r * ys + c] = s;
    }
  }
}

#if KVASIR_HAVE_AVX512_FLOAT
// GCC 12 warns inside its own AVX-512 headers (their "undefined" upper halves); nothing of ours.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The same tile with 512-bit registers where the machine has them: a register holds two outputs'
// eight-lane sums, one per 256-bit half, so each output still gets exactly the FMA chain and
// reduction of micro() (the contract in gemm.h) at twice the width. P pairs of weight rows (an
// odd last column reads its own row twice and keeps one half); C <= 2P columns stored.
template <class L>
__m512 load_pair(const typename L::T* w0, const typename L::T* w1) {
  if constexpr (std::is_same_v<L, F32W>) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(w0)), _mm256_loadu_ps(w1), 1);
  } else {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(load128(w0)), load128(w1), 1));
  }
}

template <class L, int R, int P>
void micro512(int C, int64_t n, const typename L::T* w, int64_t ws, const float* a, int64_t as, float* y, int64_t ys) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const typename L::T* row[2 * P];
  for (int c = 0; c < 2 * P; ++c) row[c] = w + std::min(c, C - 1) * ws;
  const int64_t n8 = n & ~int64_t(7);
  // Decode: the next tile's rows (2P further) are fetched while this one is computed (a hint:
  // it never faults, also past the last row).
  constexpr int64_t kLine = 64 / sizeof(typename L::T);
  for (int64_t k = 0; k < n8; k += 8) {
    if (R == 1 && k % kLine == 0)
      for (int c = 0; c < 2 * P; ++c) prefetch_line(row[c] + 2 * P * ws + k);
    __m512 wv[P];
    for (int p = 0; p < P; ++p) wv[p] = load_pair<L>(row[2 * p] + k, row[2 * p + 1] + k);
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_broadcast_f32x8(_mm256_loadu_ps(a + r * as + k));
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(wv[p], av, acc[r][p]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      const __m512 v = acc[r][c / 2];
      float s = hsum(c % 2 == 0 ? _mm512_castps512_ps256(v) : _mm512_extractf32x8_ps(v, 1));
      for (int64_t k = n8; k < n; ++k) s = std::fma(L::scalar(row[c][k]), a[r * as + k], s);
      y[r * ys + c] = s;
    }
  }
}

// Columns per register tile: 4 rows x 4 pairs = 16 of the 32 registers hold sums.
constexpr int kTileCols = 8;

template <class L, int R>
void micro_cols(int C, int64_t n, const typename L::T* w, int64_t ws, const float* a, int64_t as, float* y, int64_t ys) {
  switch ((C + 1) / 2) {
    case 1: return micro512<L, R, 1>(C, n, w, ws, a, as, y, ys);
    case 2: return micro512<L, R, 2>(C, n, w, ws, a, as, y, ys);
    case 3: return micro512<L, R, 3>(C, n, w, ws, a, as, y, ys);
    default: return micro512<L, R, 4>(C, n, w, ws, a, as, y, ys);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
// 4 rows x 3 columns = 12 accumulators; fewer rows leave room for 4 columns (kTileCols 0).
constexpr int kTileCols = 0;

template <class L, int R>
void micro_cols(int C, int64_t n, const typename L::T* w, int64_t ws, const float* a, int64_t as, float* y, int64_t ys) {
  switch (C) {
    case 1: return micro<L, R, 1>(n, w, ws, a, as, y, ys);
    case 2: return micro<L, R, 2>(n, w, ws, a, as, y, ys);
    case 3: return micro<L, R, 3>(n, w, ws, a, as, y, ys);
    default: return micro<L, R, 4>(n, w, ws, a, as, y, ys);
  }
}
#endif

template <class L, class A>
void run(const GemmTile& t, float* widened) {
  using T = typename L::T;
  const int64_t ws = int64_t(t.w_stride / sizeof(T));
  // ~192 KiB of weights per column block: stays in L2 while every row group passes over it.
  const int64_t block_cols = std::max<int64_t>(4, (192 << 10) / std::max<int64_t>(1, t.n * int64_t(sizeof(T))));
  for (int64_t c0 = 0; c0 < t.n_cols; c0 += block_cols) {
    const int64_t c1 = std::min(t.n_cols, c0 + block_cols);
    for (int64_t r0 = 0; r0 < t.n_rows; r0 += 4) {
      const int R = int(std::min<int64_t>(4, t.n_rows - r0));
      const float* a;
      int64_t as;
      if constexpr (std::is_same_v<A, float>) {
        a = reinterpret_cast<const float*>(t.a + size_t(r0) * t.a_stride);
        as = int64_t(t.a_stride / 4);
      } else {
        for (int r = 0; r < R; ++r) {
          const auto* src = reinterpret_cast<const uint16_t*>(t.a + size_t(r0 + r) * t.a_stride);
          float* dst = widened + r * t.n;
          int64_t k = 0;
          for (; k + 8 <= t.n; k += 8) _mm256_storeu_ps(dst + k, L::load(src + k));
          for (; k < t.n; ++k) dst[k] = L::scalar(src[k]);
        }
        a = widened;
        as = t.n;
      }
      const int cw = kTileCols > 0 ? kTileCols : R >= 3 ? 3 : 4;
      for (int64_t c = c0; c < c1; c += cw) {
        const int C = int(std::min<int64_t>(cw, c1 - c));
        const T* w = reinterpret_cast<const T*>(t.w + size_t(c) * t.w_stride);
        float* y = t.y + r0 * t.y_stride + c;
        switch (R) {
          case 1: micro_cols<L, 1>(C, t.n, w, ws, a, as, y, t.y_stride); break;
          case 2: micro_cols<L, 2>(C, t.n, w, ws, a, as, y, t.y_stride); break;
          case 3: micro_cols<L, 3>(C, t.n, w, ws, a, as, y, t.y_stride); break;
          default: micro_cols<L, 4>(C, t.n, w, ws, a, as, y, t.y_stride); break;
        }
      }
    }
  }
}

}  // namespace

void gemm_float(const GemmTile& t, void* scratch) {
  float* widened = static_cast<float*>(scratch);
  switch (t.wtype) {
    case DType::F32: return run<F32W, float>(t, widened);
    case DType::F16: return run<F16W, uint16_t>(t, widened);
    case DType::BF16: return gemm_bf16(t);
    default: std::abort();
  }
}

}  // namespace kvasir::kernels::simd
#endif
