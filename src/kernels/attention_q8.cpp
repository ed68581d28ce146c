#include "kernels/attention_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/vec_math.h"

namespace kvasir::kernels::q8 {
namespace {

// fp16 to float (exact): one instruction where F16C is compiled in.
inline float half_to_float(uint16_t h) {
#if KVASIR_HAVE_AVX2
  return _cvtsh_ss(h);
#else
  return fp16_to_f32(h);
#endif
}

// One head's attention weights of block b's keys as 8 bits: u = w[t] * dv (the keys' V scales
// folded in) for the step's keys [off, off + n), rounded against their largest (codes
// round(u * 255 / max), zero outside the range) into wq[0, n4). Returns the codes' scale
// max / 255, 0 when every weight is 0 (nothing to add).
float quantize_weights(const StepV8& v, int64_t b, const float* w, int64_t off, int64_t n, uint8_t* wq) {
  const float* dv = v.dv + b * v.n4 + off;
  float mx = 0;
  int64_t t = 0;
#if KVASIR_HAVE_AVX2
  __m256 m8 = _mm256_setzero_ps();
  for (; t + 8 <= n; t += 8) m8 = _mm256_max_ps(m8, _mm256_mul_ps(_mm256_loadu_ps(w + t), _mm256_loadu_ps(dv + t)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));  // (the largest is the same in any order)
#endif
  for (; t < n; ++t) mx = std::max(mx, w[t] * dv[t]);
  if (!(mx > 0)) return 0.f;
  const float inv = 255.f / mx;
  std::fill_n(wq, off, uint8_t(0));
  std::fill_n(wq + off + n, v.n4 - off - n, uint8_t(0));
  t = 0;
#if KVASIR_HAVE_AVX2
  for (; t + 8 <= n; t += 8) {
    const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(w + t), _mm256_loadu_ps(dv + t)),
                                                      _mm256_set1_ps(inv)));
    const __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(wq + off + t), _mm_packus_epi16(c16, c16));
  }
#endif
  for (; t < n; ++t) wq[off + t] = uint8_t(std::min(255.f, std::nearbyint(w[t] * dv[t] * inv)));
  return mx / 255.f;
}

// The codes of block b of the step's key quad `quad` (from the step's start): in its page's V
// tile.
inline const int8_t* quad_codes(const StepV8& v, int64_t b, int64_t quad) {
  const int64_t t = 4 * quad;
  return tile_codes(v.pages[t / v.bs], v.bs, b) + t % v.bs * kQ;
}

// acc[d] for the dims of block b += s * sum over the step's quads [q0, q1) of wq[t] * code_t[d]:
// the int32 sums exact (in any order), then one fma per dim. The scalar twin of its SIMD form.
void values_q8_block(float* acc, const StepV8& v, int64_t b, const uint8_t* wq, int64_t q0, int64_t q1, float s) {
#if KVASIR_HAVE_AVX2
  __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
#if !KVASIR_HAVE_VNNI
  const __m256i ones = _mm256_set1_epi16(1), low7 = _mm256_set1_epi8(0x7F);
#endif
  const int64_t page_quads = v.bs / 4;
  for (int64_t quad = q0; quad < q1;) {
    // The quads of one page: consecutive 128-byte groups of its tile.
    const auto* vq = reinterpret_cast<const __m256i*>(quad_codes(v, b, quad));
    const int64_t stop = std::min(q1, quad - quad % page_quads + page_quads);
    for (; quad < stop; ++quad, vq += 4) {
      int32_t w4;
      std::memcpy(&w4, wq + 4 * quad, 4);
      const __m256i wb = _mm256_set1_epi32(w4);
#if KVASIR_HAVE_VNNI
      for (int c = 0; c < 4; ++c) a[c] = _mm256_dpbusd_epi32(a[c], wb, _mm256_loadu_si256(vq + c));
#else
      // vpmaddubsw saturates pairs of u8 x s8 above 32767: the weights' low 7 bits and top bit go
      // separately (each pair then fits), summed into int32 exactly as vpdpbusd would.
      const __m256i lo = _mm256_and_si256(wb, low7), hi = _mm256_and_si256(_mm256_srli_epi16(wb, 7), _mm256_set1_epi8(1));
      for (int c = 0; c < 4; ++c) {
        const __m256i x = _mm256_loadu_si256(vq + c);
        const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x), ones);
        const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x), ones);
        a[c] = _mm256_add_epi32(a[c], _mm256_add_epi32(plo, _mm256_slli_epi32(phi, 7)));
      }
#endif
    }
  }
  const __m256i dims[4] = {_mm256_permute2x128_si256(a[0], a[1], 0x20), _mm256_permute2x128_si256(a[2], a[3], 0x20),
                           _mm256_permute2x128_si256(a[0], a[1], 0x31), _mm256_permute2x128_si256(a[2], a[3], 0x31)};
  float* o = acc + b * kQ;
  for (int c = 0; c < 4; ++c)
    _mm256_storeu_ps(o + 8 * c, _mm256_fmadd_ps(_mm256_cvtepi32_ps(dims[c]), _mm256_set1_ps(s), _mm256_loadu_ps(o + 8 * c)));
#else
  for (int64_t d = 0; d < kQ; ++d) {
    int32_t sum = 0;
    for (int64_t quad = q0; quad < q1; ++quad)
      for (int k = 0; k < 4; ++k) sum += int32_t(wq[4 * quad + k]) * quad_codes(v, b, quad)[v8_lane(d) * 4 + k];
    acc[b * kQ + d] = std::fma(float(sum), s, acc[b * kQ + d]);
  }
#endif
}

}  // namespace

void store_row(const BlockQ8_0* row, uint8_t* run, int64_t bs, int64_t t, int64_t hd, bool value) {
  for (int64_t b = 0; b < hd / kQ; ++b) {
    auto* d = const_cast<uint16_t*>(tile_scales(run, bs, b));
    auto* qs = const_cast<int8_t*>(tile_codes(run, bs, b));
    d[t] = row[b].d;
    for (int64_t i = 0; i < kQ; ++i) qs[value ? v_code_at(t, i) : k_code_at(bs, t, i)] = row[b].qs[i];
  }
}

void load_row(const uint8_t* run, int64_t bs, int64_t t, int64_t hd, bool value, BlockQ8_0* row) {
  for (int64_t b = 0; b < hd / kQ; ++b) {
    const int8_t* qs = tile_codes(run, bs, b);
    row[b].d = tile_scales(run, bs, b)[t];
    for (int64_t i = 0; i < kQ; ++i) row[b].qs[i] = qs[value ? v_code_at(t, i) : k_code_at(bs, t, i)];
  }
}

void quantize_query(const float* x, int64_t hd, int16_t* qs, float* d) {
  constexpr float kMax = 127.f * 128.f;
  for (int64_t b = 0; b < hd / kQ; ++b, x += kQ) {
    float amax = 0;
    for (int64_t i = 0; i < kQ; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inv = amax > 0 && std::isfinite(amax) ? kMax / amax : 0.f;
    for (int64_t i = 0; i < kQ; ++i) qs[b * kQ + i] = int16_t(std::nearbyint(std::clamp(x[i] * inv, -kMax, kMax)));
    d[b] = amax / kMax;
  }
}

void scores_q8(const QueriesQ8& q, const uint8_t* k, int64_t bs, int64_t t0, int64_t n, float scale, float* s) {
  const int64_t nb = q.hd / kQ;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    float sv = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* codes = tile_codes(k, bs, b);
      int32_t dot = 0;
      for (int64_t e = 0; e < kQ; ++e) dot += int32_t(q.qs[b * kQ + e]) * codes[k_code_at(bs, t, e)];
      const float ls = q.d[b] * fp16_to_f32(tile_scales(k, bs, b)[t]);
      sv = b == 0 ? float(dot) * ls : std::fma(float(dot), ls, sv);
    }
    s[i] = sv * scale;
  }
}

#if KVASIR_HAVE_AVX2
namespace {
// The exact int32 dots of H heads' query codes of block b with eight keys' codes of a tile
// (codes: the keys' first pair), lane j = key j. With fewer than eight heads the even and odd
// pairs go to separate sums (more chains in flight; integer sums in any order are the same).
template <int H>
inline void block_dots(const QueriesQ8& q, const int8_t* codes, int64_t bs, int64_t b, __m256i* dots) {
  constexpr int A = H >= 8 ? 1 : 2;
  __m256i a[A][H];
  for (int u = 0; u < A; ++u)
    for (int h = 0; h < H; ++h) a[u][h] = _mm256_setzero_si256();
  const int16_t* qb = q.qs + b * kQ;
#pragma GCC unroll 16
  for (int pair = 0; pair < kQ / 2; pair += A)
    for (int u = 0; u < A; ++u) {
      const __m256i kp =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + (pair + u) * 2 * bs)));
      for (int h = 0; h < H; ++h) {
        int32_t qp;
        std::memcpy(&qp, qb + h * q.hd + 2 * (pair + u), 4);
#if KVASIR_HAVE_VNNI
        a[u][h] = _mm256_dpwssd_epi32(a[u][h], kp, _mm256_set1_epi32(qp));
#else
        a[u][h] = _mm256_add_epi32(a[u][h], _mm256_madd_epi16(kp, _mm256_set1_epi32(qp)));
#endif
      }
    }
  for (int h = 0; h < H; ++h) dots[h] = A == 2 ? _mm256_add_epi32(a[0][h], a[A - 1][h]) : a[0][h];
}

}  // namespace

template <int H>
void scores_q8_heads(const QueriesQ8& q, const uint8_t* k, int64_t bs, int64_t t0, int64_t n, float scale, float* s,
                     int64_t ss, Prefetch& pf) {
  const int64_t nb = q.hd / kQ;
  const int lines = int((kPageKeys * nb * kTileBytesPerKey + 63) / 64);  // a pass's share of a later block
  const __m256 sc = _mm256_set1_ps(scale);
  // Passes over eight keys of the page (aligned: a pass never leaves its tile); lanes before t0 or
  // past the run are computed and dropped. The float sums stay in memory between blocks (the
  // integer dots need the registers).
  alignas(32) float sv[H][kPageKeys];
  for (int64_t t = t0 - t0 % kPageKeys; t < t0 + n; t += kPageKeys) {
    prefetch_next(pf.k, pf.k_end, lines);
    prefetch_next(pf.v, pf.v_end, lines);
    for (int64_t b = 0; b < nb; ++b) {
      __m256i dots[H];
      block_dots<H>(q, tile_codes(k, bs, b) + 2 * t, bs, b, dots);
      const __m256 dk = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile_scales(k, bs, b) + t)));
      for (int h = 0; h < H; ++h) {
        const __m256 f = _mm256_cvtepi32_ps(dots[h]), ls = _mm256_mul_ps(_mm256_set1_ps(q.d[h * nb + b]), dk);
        _mm256_store_ps(sv[h], b == 0 ? _mm256_mul_ps(f, ls) : _mm256_fmadd_ps(f, ls, _mm256_load_ps(sv[h])));
      }
    }
    for (int h = 0; h < H; ++h) {
      const __m256 r = _mm256_mul_ps(_mm256_load_ps(sv[h]), sc);
      if (t >= t0) {
        _mm256_storeu_ps(s + h * ss + (t - t0), r);
      } else {
        _mm256_store_ps(sv[h], r);
        for (int64_t j = t0 - t; j < kPageKeys && t + j < t0 + n; ++j) s[h * ss + t + j - t0] = sv[h][j];
      }
    }
  }
}

template void scores_q8_heads<1>(const QueriesQ8&, const uint8_t*, int64_t, int64_t, int64_t, float, float*, int64_t,
                                 Prefetch&);
template void scores_q8_heads<2>(const QueriesQ8&, const uint8_t*, int64_t, int64_t, int64_t, float, float*, int64_t,
                                 Prefetch&);
template void scores_q8_heads<4>(const QueriesQ8&, const uint8_t*, int64_t, int64_t, int64_t, float, float*, int64_t,
                                 Prefetch&);
template void scores_q8_heads<8>(const QueriesQ8&, const uint8_t*, int64_t, int64_t, int64_t, float, float*, int64_t,
                                 Prefetch&);
#endif

void begin_step_v8(const KvLayerView& kv, const int32_t* block_table, int64_t g, int64_t start, int64_t first,
                   int64_t end, StepV8& v) {
  const int64_t bs = kv.block_size;
  v.bs = bs, v.first = first - start, v.end = end - start, v.dv_ready = false;
  std::fill_n(v.pages, kMaxStepPages, nullptr);
  for (int64_t page = first - (first - start) % bs; page <= end; page += bs)
    v.pages[(page - start) / bs] = kv_row(kv.v, kv, block_table, page, g);
}

namespace {
void load_dv(StepV8& v, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    float* dv = v.dv + b * v.n4;
    std::fill_n(dv, v.first, 0.f);
    std::fill_n(dv + v.end + 1, v.n4 - v.end - 1, 0.f);
    int64_t t = v.first;
#if KVASIR_HAVE_AVX2
    for (; t % kPageKeys != 0 && t <= v.end; ++t) dv[t] = half_to_float(tile_scales(v.pages[t / v.bs], v.bs, b)[t % v.bs]);
    for (; t + kPageKeys - 1 <= v.end; t += kPageKeys)  // eight keys of one page (pages are multiples of 8)
      _mm256_storeu_ps(dv + t, _mm256_cvtph_ps(_mm_loadu_si128(
                                   reinterpret_cast<const __m128i*>(tile_scales(v.pages[t / v.bs], v.bs, b) + t % v.bs))));
#endif
    for (; t <= v.end; ++t) dv[t] = half_to_float(tile_scales(v.pages[t / v.bs], v.bs, b)[t % v.bs]);
  }
  v.dv_ready = true;
}
}  // namespace

void values_q8(float* acc, StepV8& v, const float* w, int64_t ws, int64_t off, int64_t n, int64_t hd, int64_t H,
               uint8_t* wq) {
  if (!v.dv_ready) load_dv(v, hd / kQ);
  const int64_t q0 = off / 4, q1 = (off + n + 3) / 4;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t b = 0; b < hd / kQ; ++b) {
      const float s = quantize_weights(v, b, w + h * ws, off, n, wq);
      if (s > 0) values_q8_block(acc + h * hd, v, b, wq, q0, q1, s);
    }
}

}  // namespace kvasir::kernels::q8
