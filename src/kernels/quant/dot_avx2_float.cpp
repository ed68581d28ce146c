// AVX2/FMA/F16C dot products and row conversions of the float types.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include "core/fp16.h"
#include "kernels/quant/avx2_util.h"

namespace kvasir::kernels::simd {
namespace {

// bf16 -> f32 is a 16-bit shift into the high half.
inline __m256 load_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(load128(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

inline __m256 load_f16(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }

// Four independent accumulators hide the FMA latency; `load` widens 8 elements to f32.
template <typename T, typename Load, typename Scalar>
float dot_generic(int64_t n, const T* x, const T* y, Load load, Scalar scalar) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_fmadd_ps(load(x + i + 8 * k), load(y + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load(x + i), load(y + i), acc[0]);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) s += scalar(x[i]) * scalar(y[i]);
  return s;
}

}  // namespace

float dot_f32(int64_t n, const void* w, const void* a) {
  return dot_generic(n, static_cast<const float*>(w), static_cast<const float*>(a),
                     [](const float* p) { return _mm256_loadu_ps(p); }, [](float v) { return v; });
}

float dot_f16(int64_t n, const void* w, const void* a) {
  return dot_generic(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), load_f16,
                     [](uint16_t h) { return half_to_float(h); });
}

float dot_bf16(int64_t n, const void* w, const void* a) {
  return dot_generic(n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), load_bf16,
                     [](uint16_t h) { return bf16_to_f32(h); });
}

// Round to nearest even like f32_to_fp16; NaNs keep F16C's payload rather than 0x7E00.
void quantize_f16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

// Same integer rounding as f32_to_bf16: add 0x7FFF plus the lowest kept bit, keep the top 16;
// NaNs become quiet by setting bit 6 of the kept half.
void quantize_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // 8 x u32 (values < 65536) -> 8 x u16.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), packed);
  }
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

}  // namespace kvasir::kernels::simd
#endif
