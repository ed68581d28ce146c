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

#if KVASIR_HAVE_AVX2
// Lane j = the sum of the 8 int32 lanes of a[j] (reduce8's tree; exact in any order).
inline __m256i reduce8_epi32(const __m256i a[8]) {
  const __m256i t01 = _mm256_hadd_epi32(a[0], a[1]), t23 = _mm256_hadd_epi32(a[2], a[3]);
  const __m256i t45 = _mm256_hadd_epi32(a[4], a[5]), t67 = _mm256_hadd_epi32(a[6], a[7]);
  const __m256i u0 = _mm256_hadd_epi32(t01, t23), u1 = _mm256_hadd_epi32(t45, t67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}
#endif

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
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m8);
  for (float x : lanes) mx = std::max(mx, x);
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

// acc[d] for the dims of block b += s * sum over the step's keys of wq[t] * code_t[d]: the int32
// sums exact, then one fma per dim. The scalar twin of values_q8_block's SIMD form.
void values_q8_block(float* acc, const StepV8& v, int64_t b, const uint8_t* wq, int64_t q0, int64_t q1, float s) {
#if KVASIR_HAVE_AVX2
  __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
#if !KVASIR_HAVE_VNNI
  const __m256i ones = _mm256_set1_epi16(1), low7 = _mm256_set1_epi8(0x7F);
#endif
  for (int64_t quad = q0; quad < q1; ++quad) {
    int32_t w4;
    std::memcpy(&w4, wq + 4 * quad, 4);
    const __m256i wb = _mm256_set1_epi32(w4);
    const auto* vq = reinterpret_cast<const __m256i*>(step_v8_at(v, b, quad));
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
  const __m256i dims[4] = {_mm256_permute2x128_si256(a[0], a[1], 0x20), _mm256_permute2x128_si256(a[2], a[3], 0x20),
                           _mm256_permute2x128_si256(a[0], a[1], 0x31), _mm256_permute2x128_si256(a[2], a[3], 0x31)};
  float* o = acc + b * kQ;
  for (int c = 0; c < 4; ++c)
    _mm256_storeu_ps(o + 8 * c, _mm256_fmadd_ps(_mm256_cvtepi32_ps(dims[c]), _mm256_set1_ps(s), _mm256_loadu_ps(o + 8 * c)));
#else
  for (int64_t d = 0; d < kQ; ++d) {
    int32_t sum = 0;
    for (int64_t quad = q0; quad < q1; ++quad)
      for (int k = 0; k < 4; ++k) sum += int32_t(wq[4 * quad + k]) * step_v8_at(v, b, quad)[v8_lane(d) * 4 + k];
    acc[b * kQ + d] = std::fma(float(sum), s, acc[b * kQ + d]);
  }
#endif
}

}  // namespace

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

// s[t] = scale * q.k[t] against Q8_0 key rows of hd / 32 blocks: per block the exact int32 dot of
// the codes, then in float sv = fma(float(dot), dq * dk, sv) block by block (a product for the
// first), times scale. The scalar twin of scores_q8_heads' lanes, bitwise.
void scores_q8(const QueriesQ8& q, const BlockQ8_0* k, int64_t n, float scale, float* s) {
  const int64_t nb = q.hd / kQ;
  for (int64_t t = 0; t < n; ++t) {
    float sv = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_0& kb = k[t * nb + b];
      int32_t dot = 0;
      for (int64_t i = 0; i < kQ; ++i) dot += q.code(b * kQ + i) * kb.qs[i];
      const float ls = q.d[b] * fp16_to_f32(kb.d);
      sv = b == 0 ? float(dot) * ls : std::fma(float(dot), ls, sv);
    }
    s[t] = sv * scale;
  }
}

#if KVASIR_HAVE_AVX2
// scores_q8 for H query heads (heads h of q.head(h)) and t < n into s[h * ss + t]: each key's
// codes are loaded once for all H heads, 8 / H keys a pass, lane h * K + j = (head h, key t + j).
// The int32 dots are exact (vpdpbusd on the codes moved to unsigned where VNNI is compiled in,
// else vpmaddubsw on |q| and k signed like q), so every lane is scores_q8 bitwise.
// dk: the keys' scales as floats, key t's of block b at dk[b * dk_stride + t] (readable up to
// 7 keys past n).
template <int H>
void scores_q8_heads(const QueriesQ8& q, const BlockQ8_0* k, const float* dk, int64_t dk_stride, int64_t n, float scale,
                     float* s, int64_t ss, Prefetch& pf) {
  constexpr int K = 8 / H;
  const int64_t nb = q.hd / kQ;
  const int lines = int((K * nb * int64_t(sizeof(BlockQ8_0)) + 63) / 64);  // as much of a later block a pass
  // Per block, the lanes' query scales.
  alignas(32) float dq[kMaxHeadDim / kQ][8];
  for (int64_t b = 0; b < nb; ++b)
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < K; ++j) dq[b][h * K + j] = q.d[h * nb + b];
  for (int64_t t = 0; t < n; t += K) {
    const BlockQ8_0* kt[K];
    for (int j = 0; j < K; ++j) kt[j] = k + (t + j < n ? t + j : 0) * nb;
    prefetch_next(pf.k, pf.k_end, lines);
    prefetch_next(pf.v, pf.v_end, lines);  // (the values are read before the next step's scores)
    __m256 sv = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      // Key codes widened to 16 bits: dims 0-15 and 16-31.
      __m256i k0[K], k1[K];
      for (int j = 0; j < K; ++j) {
        k0[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kt[j][b].qs)));
        k1[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kt[j][b].qs + 16)));
      }
      // Lane h * K + j takes key t + j's scale: the K scales at dk + t, repeated H times.
      const float* dkt = dk + b * dk_stride + t;
      __m256 dkl;
      if constexpr (K == 1) dkl = _mm256_broadcast_ss(dkt);
      else if constexpr (K == 2) dkl = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(dkt)));
      else if constexpr (K == 4) dkl = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(dkt));
      else dkl = _mm256_loadu_ps(dkt);
      __m256i acc[8];
      for (int h = 0; h < H; ++h) {
        const int16_t* qh = q.qs + h * q.hd + b * kQ;
        const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
        const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 16));
        for (int j = 0; j < K; ++j) {
#if KVASIR_HAVE_VNNI
          acc[h * K + j] = _mm256_dpwssd_epi32(_mm256_madd_epi16(k0[j], q0), k1[j], q1);
#else
          acc[h * K + j] = _mm256_add_epi32(_mm256_madd_epi16(k0[j], q0), _mm256_madd_epi16(k1[j], q1));
#endif
        }
      }
      const __m256 f = _mm256_cvtepi32_ps(reduce8_epi32(acc)), ls = _mm256_mul_ps(_mm256_load_ps(dq[b]), dkl);
      sv = b == 0 ? _mm256_mul_ps(f, ls) : _mm256_fmadd_ps(f, ls, sv);
    }
    alignas(32) float r[8];
    _mm256_store_ps(r, _mm256_mul_ps(sv, _mm256_set1_ps(scale)));
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < K && t + j < n; ++j) s[h * ss + t + j] = r[h * K + j];
  }
}
#endif

#if KVASIR_HAVE_AVX2
template void scores_q8_heads<1>(const QueriesQ8&, const BlockQ8_0*, const float*, int64_t, int64_t, float, float*, int64_t,
                                 Prefetch&);
template void scores_q8_heads<2>(const QueriesQ8&, const BlockQ8_0*, const float*, int64_t, int64_t, float, float*, int64_t,
                                 Prefetch&);
template void scores_q8_heads<4>(const QueriesQ8&, const BlockQ8_0*, const float*, int64_t, int64_t, float, float*, int64_t,
                                 Prefetch&);
template void scores_q8_heads<8>(const QueriesQ8&, const BlockQ8_0*, const float*, int64_t, int64_t, float, float*, int64_t,
                                 Prefetch&);
#endif

// The step's keys [first, end] (positions; the step starts at `start`) of KV head g into v, keys
// of their quads outside that range zeroed (never read: they may sit in freed blocks).
void prepare_step_v8(const KvLayerView& kv, const int32_t* block_table, int64_t g, int64_t start, int64_t first,
                     int64_t end, const StepV8& v) {
  const int64_t nb = kv.head_dim / kQ;
  alignas(32) static constexpr BlockQ8_0 kZero[kMaxHeadDim / kQ] = {};
  for (int64_t b = 0; b < nb; ++b) std::fill_n(v.dk + b * v.dk_stride(), v.dk_stride(), 0.f);
  for (int64_t pos = first; pos <= end;) {  // key scales, KV block by KV block
    const auto* kr = reinterpret_cast<const BlockQ8_0*>(kv_row(kv.k, kv, block_table, pos, g));
    for (const int64_t stop = std::min(end, pos - pos % kv.block_size + kv.block_size - 1); pos <= stop; ++pos, kr += nb)
      for (int64_t b = 0; b < nb; ++b) v.dk[b * v.dk_stride() + pos - start] = half_to_float(kr[b].d);
  }
  const BlockQ8_0* row = nullptr;  // position pos's row: found once per KV block, then the next row
  for (int64_t quad = (first - start) / 4; quad <= (end - start) / 4; ++quad) {
    const BlockQ8_0* rows[4];
    for (int k = 0; k < 4; ++k) {
      const int64_t t = 4 * quad + k, pos = start + t;
      const bool in = pos >= first && pos <= end;
      if (in) row = pos == first || pos % kv.block_size == 0
                        ? reinterpret_cast<const BlockQ8_0*>(kv_row(kv.v, kv, block_table, pos, g))
                        : row + nb;
      rows[k] = in ? row : kZero;
      for (int64_t b = 0; b < nb; ++b) v.dv[b * v.n4 + t] = in ? half_to_float(rows[k][b].d) : 0.f;
    }
    for (int64_t b = 0; b < nb; ++b) {
      int8_t* out = step_v8_at(v, b, quad);
#if KVASIR_HAVE_AVX2
      // Bytes of keys 0/1 and 2/3 interleaved, then 16-bit pairs of those: each 128-bit lane ends
      // as 4 dims x 4 keys, the four vectors as v8_lane says (values_q8_block puts dims back in order).
      __m256i r[4];
      for (int k = 0; k < 4; ++k) r[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[k][b].qs));
      const __m256i lo01 = _mm256_unpacklo_epi8(r[0], r[1]), lo23 = _mm256_unpacklo_epi8(r[2], r[3]);
      const __m256i hi01 = _mm256_unpackhi_epi8(r[0], r[1]), hi23 = _mm256_unpackhi_epi8(r[2], r[3]);
      auto* o = reinterpret_cast<__m256i*>(out);
      _mm256_storeu_si256(o + 0, _mm256_unpacklo_epi16(lo01, lo23));
      _mm256_storeu_si256(o + 1, _mm256_unpackhi_epi16(lo01, lo23));
      _mm256_storeu_si256(o + 2, _mm256_unpacklo_epi16(hi01, hi23));
      _mm256_storeu_si256(o + 3, _mm256_unpackhi_epi16(hi01, hi23));
#else
      for (int64_t d = 0; d < kQ; ++d)
        for (int k = 0; k < 4; ++k) out[v8_lane(d) * 4 + k] = rows[k][b].qs[d];
#endif
    }
  }
}

void values_q8(float* acc, const StepV8& v, const float* w, int64_t ws, int64_t off, int64_t n, int64_t hd, int64_t H,
               uint8_t* wq) {
  const int64_t q0 = off / 4, q1 = (off + n + 3) / 4;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t b = 0; b < hd / kQ; ++b) {
      const float s = quantize_weights(v, b, w + h * ws, off, n, wq);
      if (s > 0) values_q8_block(acc + h * hd, v, b, wq, q0, q1, s);
    }
}

}  // namespace kvasir::kernels::q8
