#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/vec_math.h"

namespace kvasir::kernels {
namespace {

#if KVASIR_HAVE_AVX2
// tanh for any x: an odd Taylor polynomial below |x| = 0.25 (where 1 - e^-2|x| would cancel),
// else sign(x) * (1 - e) / (1 + e) with e = exp(-2|x|).
inline __m256 tanh8(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign, x);
  const __m256 e = exp8(_mm256_mul_ps(ax, _mm256_set1_ps(-2.f)));
  const __m256 big = _mm256_div_ps(_mm256_sub_ps(_mm256_set1_ps(1.f), e), _mm256_add_ps(_mm256_set1_ps(1.f), e));
  const __m256 x2 = _mm256_mul_ps(x, x);
  // x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835
  __m256 p = _mm256_set1_ps(62.f / 2835.f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-17.f / 315.f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.f / 15.f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.f / 3.f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), x, x);
  const __m256 r = _mm256_blendv_ps(_mm256_or_ps(big, _mm256_and_ps(sign, x)), small,
                                    _mm256_cmp_ps(ax, _mm256_set1_ps(0.25f), _CMP_LT_OQ));
  return r;
}
inline __m256 silu8(__m256 g) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e));
}
inline __m256 gelu8(__m256 g) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoef = 0.044715f;
  const __m256 inner = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi), g),
                                     _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(kCoef), g), g, _mm256_set1_ps(1.f)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g), _mm256_add_ps(_mm256_set1_ps(1.f), tanh8(inner)));
}

// Applies f8 to 8 floats at a time; the tail goes through the same f8 on a padded copy, so
// every element sees the identical arithmetic.
template <typename F8>
inline void map8(const float* a, const float* b, float* out, int64_t n, F8 f8) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f8(_mm256_loadu_ps(a + i), b ? _mm256_loadu_ps(b + i) : _mm256_setzero_ps()));
  if (i < n) {
    alignas(32) float ta[8] = {}, tb[8] = {}, to[8];
    for (int64_t j = i; j < n; ++j) ta[j - i] = a[j], tb[j - i] = b ? b[j] : 0.f;
    _mm256_store_ps(to, f8(_mm256_load_ps(ta), _mm256_load_ps(tb)));
    for (int64_t j = i; j < n; ++j) out[j] = to[j - i];
  }
}
#endif

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
  // Accumulate in double like ggml's reference so long rows don't lose precision.
  double sum = 0;
  int64_t i = 0;
#if KVASIR_HAVE_AVX2
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8) {
    const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  const __m256d a = _mm256_add_pd(acc0, acc1);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
#endif
  for (; i < n; ++i) sum = std::fma(double(x[i]), double(x[i]), sum);
  const float scale = 1.0f / std::sqrt(float(sum / double(n)) + eps);
  i = 0;
#if KVASIR_HAVE_AVX2
  const __m256 vs = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(out + i, w ? _mm256_mul_ps(v, _mm256_loadu_ps(w + i)) : v);
  }
#endif
  for (; i < n; ++i) out[i] = w ? x[i] * scale * w[i] : x[i] * scale;
}

void rope_angles(int64_t pos, const RopeParams& p, float* cos_out, float* sin_out) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / float(p.rot_dims));
  // The angle of pair i is pos * freq_scale * theta_scale^i, built by repeated multiplication.
  float theta = float(pos) * p.freq_scale;
  for (int64_t i = 0; i < p.rot_dims / 2; ++i, theta *= theta_scale) {
    const float t = p.freq_factors ? theta / p.freq_factors[i] : theta;
    cos_out[i] = std::cos(t) * p.mscale;
    sin_out[i] = std::sin(t) * p.mscale;
  }
}

void rope_apply(float* x, int64_t n_heads, int64_t head_dim, const RopeParams& p, const float* c, const float* s) {
  const int64_t half = p.rot_dims / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = p.mode == RopeMode::Normal ? 2 * i : i;
      const int64_t b = p.mode == RopeMode::Normal ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c[i] - x1 * s[i];
      v[b] = x0 * s[i] + x1 * c[i];
    }
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const RopeParams& p) {
  constexpr int64_t kStack = 512;
  float cs[2 * kStack];
  std::vector<float> big;  // only for rotations wider than 1024 dims
  float* c = cs;
  if (p.rot_dims / 2 > kStack) {
    big.resize(size_t(p.rot_dims));
    c = big.data();
  }
  float* s = c + std::max<int64_t>(kStack, p.rot_dims / 2);
  if (c != cs) s = c + p.rot_dims / 2;
  rope_angles(pos, p, c, s);
  rope_apply(x, n_heads, head_dim, p, c, s);
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
#if KVASIR_HAVE_AVX2
  map8(gate, up, out, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(silu8(g), u); });
#else
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
#endif
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
#if KVASIR_HAVE_AVX2
  map8(gate, up, out, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(gelu8(g), u); });
#else
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kCoef * g * g))) * up[i];
  }
#endif
}

void add_inplace(float* x, const float* y, int64_t n) {
  int64_t i = 0;
#if KVASIR_HAVE_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) x[i] += y[i];
}

void scale_inplace(float* x, int64_t n, float s) {
  int64_t i = 0;
#if KVASIR_HAVE_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(s)));
#endif
  for (; i < n; ++i) x[i] *= s;
}

void softcap_inplace(float* x, int64_t n, float cap) {
#if KVASIR_HAVE_AVX2
  const __m256 vc = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.f / cap);
  map8(x, nullptr, x, n, [&](__m256 v, __m256) { return _mm256_mul_ps(vc, tanh8(_mm256_mul_ps(v, inv))); });
#else
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
#endif
}

double exp_sum(const float* x, int64_t n, float shift) {
  double sum = 0;
  int64_t i = 0;
#if KVASIR_HAVE_AVX2
  const __m256 s = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8) {
    alignas(32) float e[8];
    _mm256_store_ps(e, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
    for (float v : e) sum += v;
  }
#endif
  for (; i < n; ++i) sum += exp1(x[i] - shift);
  return sum;
}

}  // namespace kvasir::kernels
