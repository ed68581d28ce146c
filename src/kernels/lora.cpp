#include "kernels/lora.h"

#include <cmath>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace kvasir::kernels {
namespace {

float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  const __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  s = _mm_cvtss_f32(v);
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void lora_down(const float* x, int64_t x_stride, const int32_t* rows, int64_t n_rows, const float* a, int64_t rank,
               int64_t n_in, float* u) {
  for (int64_t i = 0; i < n_rows; ++i) {
    const float* xr = x + int64_t(rows[i]) * x_stride;
    for (int64_t k = 0; k < rank; ++k) u[i * rank + k] = dot(a + k * n_in, xr, n_in);
  }
}

void lora_up(const float* u, const int32_t* rows, int64_t n_rows, const float* bt, int64_t rank, int64_t n_out,
             float scale, float* y, int64_t y_stride, int64_t o_begin, int64_t o_end) {
  for (int64_t i = 0; i < n_rows; ++i) {
    float* yr = y + int64_t(rows[i]) * y_stride;
    const float* ui = u + i * rank;
    int64_t o = o_begin;
#if defined(__AVX2__) && defined(__FMA__)
    for (; o + 16 <= o_end; o += 16) {  // y stays in registers over the rank
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      for (int64_t k = 0; k < rank; ++k) {
        const __m256 c = _mm256_set1_ps(ui[k]);
        acc0 = _mm256_fmadd_ps(c, _mm256_loadu_ps(bt + k * n_out + o), acc0);
        acc1 = _mm256_fmadd_ps(c, _mm256_loadu_ps(bt + k * n_out + o + 8), acc1);
      }
      const __m256 s = _mm256_set1_ps(scale);
      _mm256_storeu_ps(yr + o, _mm256_fmadd_ps(s, acc0, _mm256_loadu_ps(yr + o)));
      _mm256_storeu_ps(yr + o + 8, _mm256_fmadd_ps(s, acc1, _mm256_loadu_ps(yr + o + 8)));
    }
#endif
    for (; o < o_end; ++o) {  // fused as the vector lanes are: a column's value never depends on the split
      float acc = 0;
      for (int64_t k = 0; k < rank; ++k) acc = std::fma(ui[k], bt[k * n_out + o], acc);
      yr[o] = std::fma(scale, acc, yr[o]);
    }
  }
}

}  // namespace kvasir::kernels
