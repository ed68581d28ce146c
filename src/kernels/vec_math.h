// Small vector helpers of the row kernels (attention, ops): an 8-wide exp and float row
// conversions, with scalar fallbacks where AVX2 is not compiled in. Each is one fixed sequence
// of float operations, so a value never depends on which kernel or thread computed it.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/fp16.h"
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <immintrin.h>
#endif

namespace kvasir::kernels {

#if KVASIR_HAVE_AVX2
// exp(x) for x in [-87.3, 88.3] (clamped outside, so 2^n stays a normal float): x = n ln2 + r
// with Cody-Waite ln2 and |r| <= ln2/2, a degree-6 Taylor polynomial (error < 2e-7 relative),
// times 2^n through the exponent bits. exp(0) = 1 exactly.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// The same computation for one value (lane 0): tails of rows use it so that every element of
// a row goes through identical arithmetic.
inline float exp1(float x) { return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x))); }
#else
// Clamped as exp8 is: never 0 or infinite.
inline float exp1(float x) { return std::exp(std::fmin(std::fmax(x, -87.3f), 88.3f)); }
#endif

// dst[i] = f16 or f32 src[i] widened (exact).
inline void widen_row(const void* src, bool f16, float* dst, int64_t n) {
  if (!f16) {
    const auto* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
    return;
  }
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
#if KVASIR_HAVE_AVX2
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
#endif
  for (; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
}

}  // namespace kvasir::kernels
