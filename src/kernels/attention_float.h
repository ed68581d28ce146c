// The F16 / F32 K/V kernels of paged attention (internal to kernels/attention.cpp): scores and
// weighted values over rows of head_dim elements, F16 widened in registers (exact). Every
// (head, key) score is an FMA chain per lane over dims l, l + 8, ... in order, its lanes added
// by reduce8's tree, and every output element a chain over the keys in order; the variants
// (one head or several, rows or keys transposed) all compute exactly that, so a result never
// depends on which one ran.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/fp16.h"
#include "kernels/attention_paging.h"

namespace kvasir::kernels::fkv {

// Eight K/V elements as floats: F16 widened in registers (exact), or F32 as they are.
#if KVASIR_HAVE_AVX2
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return fp16_to_f32(*p); }

#if KVASIR_HAVE_AVX2
// Lane j = the sum of the 8 lanes of a[j]: a fixed tree of horizontal adds.
inline __m256 reduce8(const __m256 a[8]) {
  const __m256 t01 = _mm256_hadd_ps(a[0], a[1]), t23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t45 = _mm256_hadd_ps(a[4], a[5]), t67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t01, t23), u1 = _mm256_hadd_ps(t45, t67);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

// s[t] = scale * q.k[t] for t < n (key rows hd elements apart). Keys go eight at a time, each
// one FMA chain over the dims in order, reduced by reduce8; lanes past n repeat key 0 and are
// dropped. Without AVX2 (or for head dims that are not a multiple of 8) one scalar chain per key.
// Two lines of pf.k go out per eight dims.
template <class T>
void scores(const float* q, const T* k, int64_t n, int64_t hd, float scale, float* s, Prefetch& pf) {
#if KVASIR_HAVE_AVX2
  if (hd % 8 == 0) {
    for (int64_t t = 0; t < n; t += 8) {
      const T* kt[8];
      for (int j = 0; j < 8; ++j) kt[j] = k + (t + j < n ? t + j : 0) * hd;
      __m256 acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
      for (int64_t d = 0; d < hd; d += 8) {
        prefetch_next(pf.k, pf.k_end, 2);
        const __m256 qv = _mm256_loadu_ps(q + d);
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, load8(kt[j] + d), acc[j]);
      }
      _mm256_storeu_ps(s + t, _mm256_mul_ps(reduce8(acc), _mm256_set1_ps(scale)));
    }
    return;
  }
#endif
  (void)pf;
  for (int64_t t = 0; t < n; ++t) {
    float x = 0;
    for (int64_t d = 0; d < hd; ++d) x = std::fma(q[d], load1(k + t * hd + d), x);
    s[t] = x * scale;
  }
}

// acc[d] = fma(w[t], v[t][d], acc[d]) for t = 0..n-1 in order (v rows hd elements apart).
// Dims outer, keys inner, so a slice of acc stays in registers across the keys: the same
// operations per element as one axpy per key, without reloading and storing acc for every key.
// One line of pf.v goes out per key and 32 dims.
template <class T>
void accumulate_values(float* acc, const T* v, const float* w, int64_t n, int64_t hd, Prefetch& pf) {
  int64_t d = 0;
#if KVASIR_HAVE_AVX2
  // 64 dims at a time where they divide: eight independent FMA chains per key instead of four
  // (the chains' latency, not the loads, bounds this loop; same operations per element).
  for (; d + 64 <= hd; d += 64) {
    __m256 a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm256_loadu_ps(acc + d + 8 * i);
    for (int64_t t = 0; t < n; ++t) {
      prefetch_next(pf.v, pf.v_end, 2);
      const __m256 wv = _mm256_set1_ps(w[t]);
      const T* vt = v + t * hd + d;
      for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(wv, load8(vt + 8 * i), a[i]);
    }
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(acc + d + 8 * i, a[i]);
  }
  for (; d + 32 <= hd; d += 32) {
    __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8);
    __m256 a2 = _mm256_loadu_ps(acc + d + 16), a3 = _mm256_loadu_ps(acc + d + 24);
    for (int64_t t = 0; t < n; ++t) {
      prefetch_next(pf.v, pf.v_end, 1);
      const __m256 wv = _mm256_set1_ps(w[t]);
      const T* vt = v + t * hd + d;
      a0 = _mm256_fmadd_ps(wv, load8(vt), a0);
      a1 = _mm256_fmadd_ps(wv, load8(vt + 8), a1);
      a2 = _mm256_fmadd_ps(wv, load8(vt + 16), a2);
      a3 = _mm256_fmadd_ps(wv, load8(vt + 24), a3);
    }
    _mm256_storeu_ps(acc + d, a0);
    _mm256_storeu_ps(acc + d + 8, a1);
    _mm256_storeu_ps(acc + d + 16, a2);
    _mm256_storeu_ps(acc + d + 24, a3);
  }
  for (; d + 8 <= hd; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int64_t t = 0; t < n; ++t) a = _mm256_fmadd_ps(_mm256_set1_ps(w[t]), load8(v + t * hd + d), a);
    _mm256_storeu_ps(acc + d, a);
  }
#else
  (void)pf;
#endif
  for (; d < hd; ++d) {
    float a = acc[d];
    for (int64_t t = 0; t < n; ++t) a = std::fma(w[t], load1(v + t * hd + d), a);
    acc[d] = a;
  }
}

#if KVASIR_HAVE_AVX2
// s[h * ss + t] = scale * q_h·k_t for H heads (q_h = q + h * hd, hd a multiple of 8) and t < n:
// each key's eight dims are loaded (widened) once for all H heads, 8 / H keys a pass. Every
// (head, key) is the FMA chain over the dims in order that scores() runs, summed by the same
// reduce8 tree (lane-independent), so each score is bitwise scores()'s.
template <class T, int H>
void scores_heads(const float* q, const T* k, int64_t n, int64_t hd, float scale, float* s, int64_t ss, Prefetch& pf) {
  constexpr int K = 8 / H;
  for (int64_t t = 0; t < n; t += K) {
    const T* kt[K];
    for (int j = 0; j < K; ++j) kt[j] = k + (t + j < n ? t + j : 0) * hd;
    __m256 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d += 8) {
      // About one later block's K over the block's passes (K keys x 4 steps of 8 dims a line).
      if (d % 32 == 0) prefetch_next(pf.k, pf.k_end, int(K * sizeof(T) / 2));
      __m256 kv[K];
      for (int j = 0; j < K; ++j) kv[j] = load8(kt[j] + d);
      for (int h = 0; h < H; ++h) {
        const __m256 qv = _mm256_loadu_ps(q + h * hd + d);
        for (int j = 0; j < K; ++j) acc[h * K + j] = _mm256_fmadd_ps(qv, kv[j], acc[h * K + j]);
      }
    }
    alignas(32) float r[8];
    _mm256_store_ps(r, _mm256_mul_ps(reduce8(acc), _mm256_set1_ps(scale)));
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < K && t + j < n; ++j) s[h * ss + t + j] = r[h * K + j];
  }
}

// acc_h[d] = fma(w_h[t], v_t[d], acc_h[d]) for t = 0..n-1 in order, for H heads (acc_h = acc +
// h * hd, w_h = w + h * ws, hd a multiple of 8): each V element is loaded (widened) once for all
// H heads; per element the operations of accumulate_values().
template <class T, int H>
void values_heads(float* acc, const T* v, const float* w, int64_t ws, int64_t n, int64_t hd, Prefetch& pf) {
  constexpr int C = 8 / H;  // vectors of dims per pass: H * C accumulators
  int64_t d = 0;
  for (; d + 8 * C <= hd; d += 8 * C) {
    __m256 a[H][C];
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < C; ++c) a[h][c] = _mm256_loadu_ps(acc + h * hd + d + 8 * c);
    for (int64_t t = 0; t < n; ++t) {
      if (d % 64 == 0) prefetch_next(pf.v, pf.v_end, int(sizeof(T)));  // a later V row's 64 dims
      __m256 vv[C];
      for (int c = 0; c < C; ++c) vv[c] = load8(v + t * hd + d + 8 * c);
      for (int h = 0; h < H; ++h) {
        const __m256 wv = _mm256_set1_ps(w[h * ws + t]);
        for (int c = 0; c < C; ++c) a[h][c] = _mm256_fmadd_ps(wv, vv[c], a[h][c]);
      }
    }
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc + h * hd + d + 8 * c, a[h][c]);
  }
  for (; d < hd; d += 8) {  // what is left of the dims: eight at a time, the heads' chains side by side
    __m256 a[H];
    for (int h = 0; h < H; ++h) a[h] = _mm256_loadu_ps(acc + h * hd + d);
    for (int64_t t = 0; t < n; ++t) {
      const __m256 vv = load8(v + t * hd + d);
      for (int h = 0; h < H; ++h) a[h] = _mm256_fmadd_ps(_mm256_set1_ps(w[h * ws + t]), vv, a[h]);
    }
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(acc + h * hd + d, a[h]);
  }
}

// scores_heads / scores from keys transposed (key i of dim d at kt[d * kts + i]): eight keys a
// vector, and for each head eight sums c_l, c_l the FMA chain over dims l, l + 8, ... in order
// (what lane l of scores_heads' accumulator runs), added as reduce8's tree adds the lanes:
// bitwise the same scores, with no horizontal sums. Writes up to 7 floats past each s row's n.
template <int H>
void scores_heads_t(const float* q, const float* kt, int64_t kts, int64_t n, int64_t hd, float scale, float* s,
                    int64_t ss) {
  const __m256 zero = _mm256_setzero_ps(), sc = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 8)
    for (int h = 0; h < H; ++h) {
      const float* qh = q + h * hd;
      __m256 c[8];
      for (int l = 0; l < 8; ++l) c[l] = zero;
      for (int64_t d = 0; d < hd; d += 8)
        for (int l = 0; l < 8; ++l)
          c[l] = _mm256_fmadd_ps(_mm256_broadcast_ss(qh + d + l), _mm256_loadu_ps(kt + (d + l) * kts + i), c[l]);
      const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c[0], c[1]), _mm256_add_ps(c[2], c[3])),
                                       _mm256_add_ps(_mm256_add_ps(c[4], c[5]), _mm256_add_ps(c[6], c[7])));
      _mm256_storeu_ps(s + h * ss + i, _mm256_mul_ps(sum, sc));
    }
}
#endif

}  // namespace kvasir::kernels::fkv
