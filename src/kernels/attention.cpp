#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention_float.h"
#include "kernels/attention_paging.h"
#include "kernels/attention_q8.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/quant.h"
#include "kernels/vec_math.h"

namespace kvasir::kernels {
namespace {

using q8::begin_step_v8;
using q8::QueriesQ8;
using q8::quantize_query;
using q8::scores_q8;
#if KVASIR_HAVE_AVX2
using q8::scores_q8_heads;
#endif
using q8::StepV8;
using q8::values_q8;
using fkv::accumulate_values;
using fkv::scores;
#if KVASIR_HAVE_AVX2
using fkv::scores_heads;
using fkv::scores_heads_t;
using fkv::values_heads;
#endif

// The orthonormal Walsh-Hadamard transform of n (a power of two) floats, in place.
void hadamard_inplace(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b, x[j + h] = a - b;
      }
  const float norm = 1.f / std::sqrt(float(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= norm;
}

// Quantized K/V rows (whole blocks of n elements) to floats: code times the block's scale, the
// reference dequantizer's arithmetic exactly, vectorized for Q4_0 (Q8_0 never comes here: its
// attention is integer arithmetic, attention_q8.h).
void dequantize_kv(const QuantTraits* t, const uint8_t* src, float* y, int64_t n) {
#if KVASIR_HAVE_AVX2
  if (t->type == DType::Q4_0) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(src);
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
      const __m256 d = _mm256_set1_ps(fp16_to_f32(b[i].d));
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
      // Elements 0-15 in the low nibbles, 16-31 in the high ones; codes minus 8 fit int8.
      const __m128i halves[2] = {_mm_sub_epi8(_mm_and_si128(q, low), eight),
                                 _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low), eight)};
      for (int h = 0; h < 2; ++h) {
        const __m128i c = halves[h];
        _mm256_storeu_ps(y + 16 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), d));
        _mm256_storeu_ps(y + 16 * h + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c, 8))), d));
      }
    }
    return;
  }
#endif
  t->dequantize_row(src, y, n);
}

// One head's K or V row as stored: (x - shift) / scale, then rotated; x itself when nothing
// applies. shift and scale are read from element `at`.
const float* to_stored(const float* x, const float* shift, const float* scale, bool rotate, int64_t at, int64_t n,
                       float* buf) {
  if (!shift && !scale && !rotate) return x;
  for (int64_t i = 0; i < n; ++i) buf[i] = (x[i] - (shift ? shift[at + i] : 0.f)) / (scale ? scale[at + i] : 1.f);
  if (rotate) hadamard_inplace(buf, n);
  return buf;
}

inline int64_t window_start(int64_t pos, int64_t window) { return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; }

// acc[d] = acc[d] * c.
inline void scale_row(float* acc, int64_t n, float c) {
  int64_t d = 0;
#if KVASIR_HAVE_AVX2
  for (; d + 8 <= n; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), _mm256_set1_ps(c)));
#endif
  for (; d < n; ++d) acc[d] *= c;
}

// w[t] = exp(s[t] - mx) for t < n (lanes past n are computed and ignored).
inline void exp_shifted(const float* s, int64_t n, float mx, float* w) {
  int64_t t = 0;
#if KVASIR_HAVE_AVX2
  for (; t + 8 <= n; t += 8) _mm256_storeu_ps(w + t, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), _mm256_set1_ps(mx))));
#endif
  for (; t < n; ++t) w[t] = exp1(s[t] - mx);
}

// The largest of s[0, n) (exact in any order).
inline float max_of(const float* s, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  int64_t t = 0;
#if KVASIR_HAVE_AVX2
  if (n >= 8) {
    __m256 m = _mm256_loadu_ps(s);
    for (t = 8; t + 8 <= n; t += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + t));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    mx = _mm_cvtss_f32(h);
  }
#endif
  for (; t < n; ++t) mx = std::max(mx, s[t]);
  return mx;
}

// Running softmax state of one (row, head).
struct HeadState {
  float max, sum;
};

// The online-softmax step of one head between its scores s[0, n) and its values: soft-capping,
// the block max, rescaling acc to it and the weights w = exp(s - max). Returns the correction
// that the state update applies to the old sum.
inline float softmax_weights(float* s, int64_t n, const AttentionParams& p, const HeadState& st, float* acc, int64_t hd,
                             float* w, float& new_max) {
  if (p.softcap > 0)
    for (int64_t t = 0; t < n; ++t) s[t] = p.softcap * std::tanh(s[t] / p.softcap);
  new_max = std::max(st.max, max_of(s, n));
  const float correction = std::exp(st.max - new_max);  // 0 on the first block
  if (correction != 1.f) scale_row(acc, hd, correction);
  exp_shifted(s, n, new_max, w);
  return correction;
}

// softmax_weights and the weights' sum (in key order).
inline float softmax_step(float* s, int64_t n, const AttentionParams& p, const HeadState& st, float* acc, int64_t hd,
                          float* w, float& sum, float& new_max) {
  const float correction = softmax_weights(s, n, p, st, acc, hd, w, new_max);
  sum = 0;
  for (int64_t t = 0; t < n; ++t) sum += w[t];
  return correction;
}

inline void update_state(HeadState& st, float correction, float sum, float new_max) {
  st.sum = std::fma(st.sum, correction, sum);
  st.max = new_max;
}

// A step's keys and values for one KV head as runs of contiguous rows (one per KV block the step
// covers, or one for a step widened into scratch), each with the later head-block to prefetch
// while it is computed (the block's pf, used up as it goes: a later pass of heads or rows over
// the same block issues no prefetches again). Scores are per key and each output element's value chain runs over the
// keys in order, so a step computed run by run is bitwise the step computed in one piece.
// Q8_0 runs point at their page's K run instead (its keys interleaved, attention_q8.h), starting
// at key `at` of the page.
template <class T>
struct KvRun {
  const T* k;
  const T* v;  // (unused for Q8_0: its values are read through the step's pages, StepArgs)
  int64_t n;
  Prefetch* pf;
  int64_t at;
};

// The queries of a row's heads as the score kernels read them: floats, and against Q8_0 keys
// their integer codes too (q8.qs null otherwise). head(h) moves both to head h.
struct HeadQueries {
  const float* f;
  QueriesQ8 q8;
  int64_t hd;
  HeadQueries head(int64_t h) const { return {f + h * hd, q8.qs ? q8.head(h) : q8, hd}; }
};

template <class KT>
inline constexpr bool is_q8 = std::is_same_v<KT, BlockQ8_0>;

// What a step offers beyond its runs: Q8_0 values (begin_step_v8; also its page size for the
// keys), the row's keys at off.. of it, and room for one head's weights as 8 bits; or, for a tile
// with small heads, its keys transposed in scratch (kt, from the row's first key: key i of dim d
// at kt[d * kt_stride + i], rows padded by 8; null: none).
struct StepArgs {
  StepV8* v = nullptr;
  int64_t off = 0;
  uint8_t* wq = nullptr;
  const float* kt = nullptr;
  int64_t kt_stride = 0;
};

// The most runs a step has (keys_per_step: 64 keys, blocks of 1 or more).
inline constexpr int kMaxRuns = 64;

// One head of one row over a step's n keys/values (F16 or F32 rows of head_dim elements, or Q8_0
// keys against the rounded queries): scores, then the online-softmax update of (max, sum) and of
// the unnormalized output acc.
template <class KT>
void attend_block(const HeadQueries& q, KvRun<KT>* runs, int nr, int64_t n, int64_t hd, const AttentionParams& p,
                  float* s, float* w, HeadState& st, float* acc, const StepArgs& step) {
#if KVASIR_HAVE_AVX2
  if (!is_q8<KT> && step.kt) scores_heads_t<1>(q.f, step.kt, step.kt_stride, n, hd, p.scale, s, 0);
  else
#endif
    for (int64_t i = 0, off = 0; i < nr; off += runs[i].n, ++i) {
      if constexpr (is_q8<KT>)
        scores_q8(q.q8, reinterpret_cast<const uint8_t*>(runs[i].k), step.v->bs, runs[i].at, runs[i].n, p.scale, s + off);
      else scores(q.f, runs[i].k, runs[i].n, hd, p.scale, s + off, *runs[i].pf);
    }
  float sum, new_max;
  const float correction = softmax_step(s, n, p, st, acc, hd, w, sum, new_max);
  if constexpr (is_q8<KT>) {
    values_q8(acc, *step.v, w, 0, step.off, n, hd, 1, step.wq);
  } else {
    for (int64_t i = 0, off = 0; i < nr; off += runs[i].n, ++i) {
      accumulate_values(acc, runs[i].v, w + off, runs[i].n, hd, *runs[i].pf);
    }
  }
  update_state(st, correction, sum, new_max);
}

// Most query heads attend_heads takes at once; the scratch holds scores and weights for them.
inline constexpr int kMaxPassHeads = 8;

#if KVASIR_HAVE_AVX2
// attend_block for H query heads of one row that share a KV head (q, acc and states of head h at
// q + h * hd, acc + h * hd, st[h]): bitwise attend_block per head, with each K/V element read
// once for all of them. s and w hold kMaxPassHeads rows of ss floats.
template <class KT, int H>
void attend_heads(const HeadQueries& q, KvRun<KT>* runs, int nr, int64_t n, int64_t hd, const AttentionParams& p,
                  float* s, float* w, int64_t ss, HeadState* st, float* acc, const StepArgs& step) {
  if (!is_q8<KT> && step.kt) {
    scores_heads_t<H>(q.f, step.kt, step.kt_stride, n, hd, p.scale, s, ss);
  } else {
    for (int64_t i = 0, off = 0; i < nr; off += runs[i].n, ++i) {
      if constexpr (is_q8<KT>)
        scores_q8_heads<H>(q.q8, reinterpret_cast<const uint8_t*>(runs[i].k), step.v->bs, runs[i].at, runs[i].n, p.scale,
                           s + off, ss, *runs[i].pf);
      else scores_heads<KT, H>(q.f, runs[i].k, runs[i].n, hd, p.scale, s + off, ss, *runs[i].pf);
    }
  }
  float correction[H], sum[H], new_max[H];
  for (int h = 0; h < H; ++h) {
    correction[h] = softmax_weights(s + h * ss, n, p, st[h], acc + h * hd, hd, w + h * ss, new_max[h]);
    sum[h] = 0;
  }
  // Each head's sum in key order, the heads' chains side by side (their latency overlaps).
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) sum[h] += w[h * ss + t];
  if constexpr (is_q8<KT>) {
    values_q8(acc, *step.v, w, ss, step.off, n, hd, H, step.wq);
  } else {
    for (int64_t i = 0, off = 0; i < nr; off += runs[i].n, ++i) {
      values_heads<KT, H>(acc, runs[i].v, w + off, ss, runs[i].n, hd, *runs[i].pf);
    }
  }
  for (int h = 0; h < H; ++h) update_state(st[h], correction[h], sum[h], new_max[h]);
}
#endif

// The heads [0, count) of one row that share a KV head (laid out as attend_heads takes them),
// in passes of 8, 4, 2 and 1 heads where head_dim allows, else one head at a time.
// Q8_0 keys (head_dim a multiple of 32) take the passes down to one head: its integer scores
// have no faster single-head form.
template <class KT>
void attend_group(const HeadQueries& q, KvRun<KT>* runs, int nr, int64_t n, int64_t hd, const AttentionParams& p,
                  float* s, float* w, int64_t ss, HeadState* st, float* acc, int64_t count, const StepArgs& step) {
  int64_t h = 0;
#if KVASIR_HAVE_AVX2
  if (hd % 8 == 0 && (count >= 2 || is_q8<KT>)) {
    for (; h + 8 <= count; h += 8)
      attend_heads<KT, 8>(q.head(h), runs, nr, n, hd, p, s, w, ss, st + h, acc + h * hd, step);
    if (h + 4 <= count) attend_heads<KT, 4>(q.head(h), runs, nr, n, hd, p, s, w, ss, st + h, acc + h * hd, step), h += 4;
    if (h + 2 <= count) attend_heads<KT, 2>(q.head(h), runs, nr, n, hd, p, s, w, ss, st + h, acc + h * hd, step), h += 2;
    if (is_q8<KT> && h < count)
      attend_heads<KT, 1>(q.head(h), runs, nr, n, hd, p, s, w, ss, st + h, acc + h * hd, step), ++h;
  }
#endif
  for (; h < count; ++h) attend_block(q.head(h), runs, nr, n, hd, p, s, w, st[h], acc + h * hd, step);
}

}  // namespace

void kv_store(const KvLayerView& kv, const int32_t* block_table, int64_t pos, const float* k, const float* v) {
  const int64_t hd = kv.head_dim;
  // F16: round to nearest even like f32_to_fp16 (vectorized where compiled in); Q8_0 / Q4_0: the
  // types' reference rounding, a row of head_dim at a time.
  const auto* t = quant_traits(kv.type);
  const auto store = kv.type == DType::F32 ? nullptr : t->quantize_row_fast;
  float k_stored[kMaxHeadDim], v_stored[kMaxHeadDim];
  for (int64_t g = 0; g < kv.n_kv_heads; ++g) {
    uint8_t* kr = kv_row(kv.k, kv, block_table, pos, g);
    uint8_t* vr = kv_row(kv.v, kv, block_table, pos, g);
    const float* kh = to_stored(k + g * hd, kv.k_shift, kv.k_scale, kv.rotate_k, g * hd, hd, k_stored);
    const float* vh = to_stored(v + g * hd, kv.v_shift, kv.v_scale, kv.rotate_v, g * hd, hd, v_stored);
    if (kv.type == DType::Q8_0) {  // rounded as a row, then into the page's tiles
      BlockQ8_0 row[kMaxHeadDim / kQ];
      const int64_t page = pos - pos % kv.block_size;
      store(kh, row, hd);
      q8::store_row(row, kv_row(kv.k, kv, block_table, page, g), kv.block_size, pos - page, hd, false);
      store(vh, row, hd);
      q8::store_row(row, kv_row(kv.v, kv, block_table, page, g), kv.block_size, pos - page, hd, true);
    } else if (!store) {
      std::memcpy(kr, kh, size_t(hd) * 4);
      std::memcpy(vr, vh, size_t(hd) * 4);
    } else {
      store(kh, kr, hd);
      store(vh, vr, hd);
    }
  }
}

void kv_load(const KvLayerView& kv, const int32_t* block_table, int64_t pos, int64_t g, uint8_t* k_row, uint8_t* v_row) {
  if (kv.type == DType::Q8_0) {
    const int64_t page = pos - pos % kv.block_size;
    q8::load_row(kv_row(kv.k, kv, block_table, page, g), kv.block_size, pos - page, kv.head_dim, false,
                 reinterpret_cast<BlockQ8_0*>(k_row));
    q8::load_row(kv_row(kv.v, kv, block_table, page, g), kv.block_size, pos - page, kv.head_dim, true,
                 reinterpret_cast<BlockQ8_0*>(v_row));
    return;
  }
  const size_t bytes = row_bytes(kv.type, kv.head_dim);
  std::memcpy(k_row, kv_row(kv.k, kv, block_table, pos, g), bytes);
  std::memcpy(v_row, kv_row(kv.v, kv, block_table, pos, g), bytes);
}

namespace {
// Keys per online-softmax step: 64 (whole blocks that nest in the spans) where blocks divide it,
// else one block. A step's bookkeeping (max, rescale, exp of the correction) over 16 keys weighed
// on their products: 64-key steps gave the 134M shape (head_dim 64) prefill 1.05x and Gemma 3
// (head_dim 256) decode at depth 8192 1.03x.
int64_t keys_per_step(const KvLayerView& kv) {
  return kv.block_size < 64 && 64 % kv.block_size == 0 ? 64 : kv.block_size;
}
// Heads up to this size take a tile's keys transposed (scores_heads_t): there the horizontal sums
// of scores_heads weigh most against the products.
inline constexpr int64_t kTransposedKeysMaxDim = 32;
// Scratch of attend_keys: K and V of one head's step, scores and weights of one step for
// kMaxPassHeads heads (rows padded by 8), and small heads' keys transposed (rows padded by 8).
int64_t blocks_floats(const KvLayerView& kv) {
  const int64_t n = keys_per_step(kv);
  return 2 * n * kv.head_dim + 2 * kMaxPassHeads * (n + 8) + std::min(kv.head_dim, kTransposedKeysMaxDim) * (n + 8);
}
}  // namespace

SpanRange attention_spans(int64_t pos0, int64_t n_rows, int64_t window) {
  return {window_start(pos0, window) / kAttentionSpan, (pos0 + n_rows - 1) / kAttentionSpan};
}

int64_t attention_partial_floats(int64_t n_rows, int64_t n_heads, int64_t head_dim) {
  return n_rows * n_heads * (head_dim + 2);
}

namespace {
// Floats before the rounded queries in the scratch (all that attention_rows uses otherwise).
int64_t q8_offset(const KvLayerView& kv, const AttentionParams& p) {
  return blocks_floats(kv) + kAttentionTileRows * p.n_heads * kv.head_dim + 2 * kAttentionTileRows * p.n_heads +
         attention_partial_floats(kAttentionTileRows, p.n_heads, kv.head_dim);
}
void* q8_area(float* scratch, const KvLayerView& kv, const AttentionParams& p) { return scratch + q8_offset(kv, p); }
}  // namespace

int64_t attention_scratch_floats(const KvLayerView& kv, const AttentionParams& p) {
  // attend_keys' blocks (blocks_floats), the rotated queries of a tile (kv.rotate_k), the states
  // of every (row, query head) of a tile, one span's partial for a tile (attention_rows over
  // several spans), and against Q8_0 keys the tile's integer queries (two bytes a dim and a
  // scale a block).
  const int64_t q8 = kv.type == DType::Q8_0 ? kAttentionTileRows * p.n_heads * (kv.head_dim / 2 + kv.head_dim / kQ) : 0;
  return q8_offset(kv, p) + q8;
}

namespace {

// Where a tile's running outputs and softmax states live: (row m, query head h) at
// acc + m * acc_stride + h * head_dim and state[m * n_heads + h].
struct Accumulators {
  float* acc;
  int64_t acc_stride;
  HeadState* state;
};

struct TileArgs {
  const float* q;  // queries (rotated when kv.rotate_k), row m at q + m * q_stride
  int64_t q_stride, n_rows;
  QueriesQ8 q8;    // Q8_0 keys: (row m, head h) as integer codes at q8.head(m * n_heads + h)
  const KvLayerView& kv;
  const int32_t* block_table;
  int64_t pos0;
  const AttentionParams& p;
  int64_t kv_begin, kv_end;
};

// The tile's queries as the kernels read them: rotated into q_rot when K is stored rotated.
const float* tile_queries(const float* q, int64_t n_rows, int64_t row_stride, const KvLayerView& kv,
                          const AttentionParams& p, int64_t kv_begin, int64_t kv_end, float* q_rot, int64_t& q_stride) {
  q_stride = row_stride;
  if (!kv.rotate_k && !kv.k_scale) return q;
  const int64_t hd = kv.head_dim, group = p.n_heads / kv.n_kv_heads;
  for (int64_t m = 0; m < n_rows; ++m)
    for (int64_t head = kv_begin * group; head < kv_end * group; ++head) {
      float* r = q_rot + (m * p.n_heads + head) * hd;
      const float* qh = q + m * row_stride + head * hd;
      if (kv.k_scale) {
        const float* s = kv.k_scale + (head / group) * hd;
        for (int64_t i = 0; i < hd; ++i) r[i] = qh[i] * s[i];
      } else {
        std::copy_n(qh, hd, r);
      }
      if (kv.rotate_k) hadamard_inplace(r, hd);
    }
  q_stride = p.n_heads * hd;
  return q_rot;
}

// Against Q8_0 keys, the tile's queries (as tile_queries gives them) as integer codes
// (quantize_query) into area; nothing (a null QueriesQ8) for other types.
QueriesQ8 tile_queries_q8(const float* q, int64_t q_stride, int64_t n_rows, const KvLayerView& kv,
                          const AttentionParams& p, int64_t kv_begin, int64_t kv_end, void* area) {
  if (kv.type != DType::Q8_0) return {};
  const int64_t hd = kv.head_dim, nb = hd / kQ, group = p.n_heads / kv.n_kv_heads;
  const int64_t slots = kAttentionTileRows * p.n_heads;
  auto* qs = static_cast<int16_t*>(area);
  auto* d = reinterpret_cast<float*>(qs + slots * hd);
  for (int64_t m = 0; m < n_rows; ++m)
    for (int64_t head = kv_begin * group; head < kv_end * group; ++head) {
      const int64_t i = m * p.n_heads + head;
      quantize_query(q + m * q_stride + head * hd, hd, qs + i * hd, d + i * nb);
    }
  return {qs, d, hd};
}

// Rows of a tile from which F16 K/V is widened into scratch once rather than read in place by
// every row: a speculative verify step's tiles of 2-3 rows (Gemma 3 270M, one KV head, a few
// hundred keys) attended in 16.5-17.9 us a layer in place against 22.8-24.6 widened
// (docs/PERFORMANCE.md, session 36).
constexpr int64_t kWidenF16Rows = 4;

// Online softmax of every (row, head) of the tile over the keys at positions [lo, hi] (within
// each row's causal window), from a fresh state: acc zeroed, max -inf, sum 0.
void attend_keys(const TileArgs& t, int64_t lo, int64_t hi, Accumulators a, float* blocks) {
  const KvLayerView& kv = t.kv;
  const AttentionParams& p = t.p;
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const int64_t group = p.n_heads / kv.n_kv_heads;
  const bool f16 = kv.type == DType::F16;
  const auto* quantized = dtype_info(kv.type).block_size > 1 ? quant_traits(kv.type) : nullptr;
  const int64_t step = keys_per_step(kv), bps = step / bs;  // a step is whole blocks
  float* kblk = blocks;            // [step][hd]
  float* vblk = kblk + step * hd;  // [step][hd]
  const int64_t ss = step + 8;
  float* s = vblk + step * hd;     // [kMaxPassHeads][step + 8]
  float* w = s + kMaxPassHeads * ss;
  float* kt = w + kMaxPassHeads * ss;  // [hd][step + 8], when transposed
  for (int64_t m = 0; m < t.n_rows; ++m)
    for (int64_t head = t.kv_begin * group; head < t.kv_end * group; ++head) {
      std::fill_n(a.acc + m * a.acc_stride + head * hd, hd, 0.f);
      a.state[m * p.n_heads + head] = {-std::numeric_limits<float>::infinity(), 0.f};
    }
  const int64_t last = std::min(hi, t.pos0 + t.n_rows - 1);
  const int64_t lo_first = std::max(lo, window_start(t.pos0, p.window));
  const int64_t lo_block = lo_first - lo_first % bs;
  const size_t block_bytes = row_bytes(kv.type, bs * hd);
  // What block j of (step start, head g) prefetches: the head-block kPrefetchAhead after it in
  // the order they are read (steps, then heads, then the step's blocks).
  auto prefetch_for = [&](int64_t start, int64_t g, int64_t j) {
    Prefetch pf;
    int64_t jj = j + kPrefetchAhead, gg = g, st0 = start;
    for (; jj >= bps; jj -= bps)
      if (++gg == t.kv_end) gg = t.kv_begin, st0 += step;
    const int64_t block_start = st0 + jj * bs;
    if (block_start >= lo_block && block_start <= last) {
      pf.k = reinterpret_cast<const char*>(kv_row(kv.k, kv, t.block_table, block_start, gg));
      pf.v = reinterpret_cast<const char*>(kv_row(kv.v, kv, t.block_table, block_start, gg));
      pf.k_end = pf.k + block_bytes;
      pf.v_end = pf.v + block_bytes;
    }
    return pf;
  };
  // Steps outer, heads inner: each (row, head) sees the steps in order, so the result does not
  // depend on how the heads are split. One head's rows of a block are contiguous (kv_row); a
  // step is computed as one run per block (KvRun), bitwise the step in one piece.
  // F16 K/V is read in place (widened in registers) by tiles of up to kWidenF16Rows - 1 rows, and
  // widened once into scratch when more rows share it; both give bitwise the same floats, so the
  // choice never shows in a result. Quantized K/V always goes through scratch, once per head and step.
  // Q8_0 is integer arithmetic instead, on K and V in place: keys against the rounded queries,
  // values against 8-bit weights (the step's V scales as floats and the weights in kblk's room).
  const bool q8_keys = kv.type == DType::Q8_0;
  const bool widen = !q8_keys && (quantized || (f16 && t.n_rows >= kWidenF16Rows));
  // A tile's small heads take their keys transposed too (scores_heads_t: bitwise the same scores).
  const bool transpose = KVASIR_HAVE_AVX2 && widen && t.n_rows >= 2 && hd % 8 == 0 && hd <= kTransposedKeysMaxDim;
  StepV8 v8{{}, bs, kblk, (step + 3) / 4 * 4, 0, -1, false};
  auto* wq = reinterpret_cast<uint8_t*>(v8.dv + v8.n4 * (hd / kQ));
  Prefetch pfs[kMaxRuns];
  for (int64_t start = lo_first - lo_first % step; start <= last; start += step) {
    const int64_t first = std::max(start, lo_first), end = std::min(start + step - 1, last);
    for (int64_t g = t.kv_begin; g < t.kv_end; ++g) {
      for (int64_t j = 0; j < bps; ++j) pfs[j] = prefetch_for(start, g, j);
      if (q8_keys) begin_step_v8(kv, t.block_table, g, start, first, end, v8);
      for (int64_t p0 = first; widen && p0 <= end;) {  // block by block into scratch
        const int64_t p1 = std::min(end, p0 - p0 % bs + bs - 1), len = (p1 - p0 + 1) * hd;
        const uint8_t* kr = kv_row(kv.k, kv, t.block_table, p0, g);
        const uint8_t* vr = kv_row(kv.v, kv, t.block_table, p0, g);
        float* kd = kblk + (p0 - first) * hd;
        float* vd = vblk + (p0 - first) * hd;
        if (quantized) {
          dequantize_kv(quantized, kr, kd, len);
          dequantize_kv(quantized, vr, vd, len);
        } else {
          widen_row(kr, f16, kd, len);
          widen_row(vr, f16, vd, len);
        }
        p0 = p1 + 1;
      }
      for (int64_t i = 0; transpose && i <= end - first; ++i)
        for (int64_t d = 0; d < hd; ++d) kt[d * ss + i] = kblk[i * hd + d];
      for (int64_t m = 0; m < t.n_rows; ++m) {
        const int64_t pos = t.pos0 + m;
        const int64_t t0 = std::max({start, lo, window_start(pos, p.window)}), t1 = std::min({start + step - 1, hi, pos});
        if (t0 > t1) continue;
        // The group's query heads of this row: consecutive in q, acc and the states.
        const int64_t head = g * group;
        const HeadQueries qh{t.q + m * t.q_stride + head * hd, q8_keys ? t.q8.head(m * p.n_heads + head) : QueriesQ8{}, hd};
        float* oh = a.acc + m * a.acc_stride + head * hd;
        HeadState* st = a.state + m * p.n_heads + head;
        // The row's keys of this step, one run per block: from scratch (ks, vs) or, where those
        // are null, in place.
        auto attend_runs = [&]<class T>(const T* ks, const T* vs) {
          KvRun<T> runs[kMaxRuns];
          int nr = 0;
          for (int64_t p0 = t0; p0 <= t1; ++nr) {
            const int64_t p1 = std::min(t1, p0 - p0 % bs + bs - 1);
            const int64_t at = is_q8<T> ? p0 % bs : 0;  // (a Q8_0 run starts at its page's K run)
            const T* k =
                ks ? ks + (p0 - first) * hd : reinterpret_cast<const T*>(kv_row(kv.k, kv, t.block_table, p0 - at, g));
            const T* v = nullptr;
            if constexpr (!is_q8<T>)
              v = vs ? vs + (p0 - first) * hd : reinterpret_cast<const T*>(kv_row(kv.v, kv, t.block_table, p0, g));
            runs[nr] = {k, v, p1 - p0 + 1, &pfs[(p0 - start) / bs], at};
            p0 = p1 + 1;
          }
          attend_group(qh, runs, nr, t1 - t0 + 1, hd, p, s, w, ss, st, oh, group,
                       StepArgs{&v8, t0 - start, wq, transpose ? kt + (t0 - first) : nullptr, ss});
        };
        if (q8_keys) attend_runs(static_cast<const BlockQ8_0*>(nullptr), static_cast<const BlockQ8_0*>(nullptr));
        else if (widen) attend_runs(static_cast<const float*>(kblk), static_cast<const float*>(vblk));
        else if (f16) attend_runs(static_cast<const uint16_t*>(nullptr), static_cast<const uint16_t*>(nullptr));
        else attend_runs(static_cast<const float*>(nullptr), static_cast<const float*>(nullptr));
      }
    }
  }
}

// Folds one span's (state, acc) of a (row, head) into the running ones, which hold the spans
// before it. A span without keys of this row leaves them as they are; the first span with keys
// is copied; later ones rescale both sides to the larger max. The one merge rule of every path.
void merge_span(HeadState& run, float* out, const HeadState& part, const float* acc, int64_t hd) {
  if (part.max == -std::numeric_limits<float>::infinity()) return;
  if (run.max == -std::numeric_limits<float>::infinity()) {
    run = part;
    std::copy_n(acc, hd, out);
    return;
  }
  const float mx = std::max(run.max, part.max);
  const float a = std::exp(run.max - mx), b = std::exp(part.max - mx);
  int64_t d = 0;
#if KVASIR_HAVE_AVX2
  for (; d + 8 <= hd; d += 8)
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(_mm256_loadu_ps(acc + d), _mm256_set1_ps(b),
                                              _mm256_mul_ps(_mm256_loadu_ps(out + d), _mm256_set1_ps(a))));
#endif
  for (; d < hd; ++d) out[d] = std::fma(acc[d], b, out[d] * a);
  run.sum = std::fma(run.sum, a, part.sum * b);
  run.max = mx;
}

// A normalized output row of a head of KV head g out of the stored basis of V: rotated back,
// scaled and shifted (the weights sum to 1, so the shift comes back whole).
void from_stored_v(float* o, const KvLayerView& kv, int64_t g) {
  const int64_t hd = kv.head_dim;
  if (kv.rotate_v) hadamard_inplace(o, hd);
  if (kv.v_scale)
    for (int64_t i = 0; i < hd; ++i) o[i] *= kv.v_scale[g * hd + i];
  if (kv.v_shift)
    for (int64_t i = 0; i < hd; ++i) o[i] += kv.v_shift[g * hd + i];
}
inline bool v_transformed(const KvLayerView& kv) { return kv.rotate_v || kv.v_scale || kv.v_shift; }

// out /= sum for every (row, head) of the run, then out of V's stored basis.
void normalize(float* out, int64_t row_stride, const HeadState* state, int64_t n_rows, const KvLayerView& kv,
               const AttentionParams& p, int64_t head_begin, int64_t head_end) {
  const int64_t hd = kv.head_dim, group = p.n_heads / kv.n_kv_heads;
  for (int64_t m = 0; m < n_rows; ++m)
    for (int64_t head = head_begin; head < head_end; ++head) {
      float* o = out + m * row_stride + head * hd;
      scale_row(o, hd, 1.f / state[m * p.n_heads + head].sum);
      if (v_transformed(kv)) from_stored_v(o, kv, head / group);
    }
}

}  // namespace

void attention_rows(const float* q, int64_t n_rows, int64_t row_stride, const KvLayerView& kv,
                    const int32_t* block_table, int64_t pos0, const AttentionParams& p, int64_t kv_begin,
                    int64_t kv_end, float* out, float* scratch) {
  const int64_t hd = kv.head_dim, group = p.n_heads / kv.n_kv_heads;
  float* blocks = scratch;
  float* q_rot = blocks + blocks_floats(kv);
  auto* state = reinterpret_cast<HeadState*>(q_rot + kAttentionTileRows * p.n_heads * hd);
  float* span_acc = reinterpret_cast<float*>(state + kAttentionTileRows * p.n_heads);
  auto* span_state = reinterpret_cast<HeadState*>(span_acc + kAttentionTileRows * p.n_heads * hd);
  int64_t q_stride = 0;
  const float* qt = tile_queries(q, n_rows, row_stride, kv, p, kv_begin, kv_end, q_rot, q_stride);
  const QueriesQ8 q8 = tile_queries_q8(qt, q_stride, n_rows, kv, p, kv_begin, kv_end, q8_area(scratch, kv, p));
  const TileArgs t{qt, q_stride, n_rows, q8, kv, block_table, pos0, p, kv_begin, kv_end};
  const SpanRange spans = attention_spans(pos0, n_rows, p.window);
  // The first span straight into out: what merging it into an empty running state would copy.
  attend_keys(t, spans.first * kAttentionSpan, spans.first * kAttentionSpan + kAttentionSpan - 1,
              {out, row_stride, state}, blocks);
  for (int64_t j = spans.first + 1; j <= spans.last; ++j) {
    attend_keys(t, j * kAttentionSpan, j * kAttentionSpan + kAttentionSpan - 1, {span_acc, p.n_heads * hd, span_state},
                blocks);
    for (int64_t m = 0; m < n_rows; ++m)
      for (int64_t head = kv_begin * group; head < kv_end * group; ++head)
        merge_span(state[m * p.n_heads + head], out + m * row_stride + head * hd, span_state[m * p.n_heads + head],
                   span_acc + (m * p.n_heads + head) * hd, hd);
  }
  normalize(out, row_stride, state, n_rows, kv, p, kv_begin * group, kv_end * group);
}

void attention_span(const float* q, int64_t n_rows, int64_t row_stride, const KvLayerView& kv,
                    const int32_t* block_table, int64_t pos0, const AttentionParams& p, int64_t kv_begin,
                    int64_t kv_end, int64_t span, AttentionPartial part, float* scratch) {
  const int64_t hd = kv.head_dim;
  float* blocks = scratch;
  float* q_rot = blocks + blocks_floats(kv);
  int64_t q_stride = 0;
  const float* qt = tile_queries(q, n_rows, row_stride, kv, p, kv_begin, kv_end, q_rot, q_stride);
  const QueriesQ8 q8 = tile_queries_q8(qt, q_stride, n_rows, kv, p, kv_begin, kv_end, q8_area(scratch, kv, p));
  const TileArgs t{qt, q_stride, n_rows, q8, kv, block_table, pos0, p, kv_begin, kv_end};
  attend_keys(t, span * kAttentionSpan, span * kAttentionSpan + kAttentionSpan - 1,
              {part.acc, p.n_heads * hd, reinterpret_cast<HeadState*>(part.state)}, blocks);
}

void attention_merge(const AttentionPartial* parts, int64_t n_spans, int64_t n_rows, int64_t row_stride,
                     const KvLayerView& kv, const AttentionParams& p, int64_t kv_begin, int64_t kv_end, float* out) {
  const int64_t hd = kv.head_dim, group = p.n_heads / kv.n_kv_heads;
  for (int64_t m = 0; m < n_rows; ++m)
    for (int64_t head = kv_begin * group; head < kv_end * group; ++head) {
      const int64_t i = m * p.n_heads + head;
      HeadState run{-std::numeric_limits<float>::infinity(), 0.f};
      float* o = out + m * row_stride + head * hd;
      std::fill_n(o, hd, 0.f);
      for (int64_t j = 0; j < n_spans; ++j)
        merge_span(run, o, reinterpret_cast<const HeadState*>(parts[j].state)[i], parts[j].acc + i * hd, hd);
      scale_row(o, hd, 1.f / run.sum);
      if (v_transformed(kv)) from_stored_v(o, kv, head / group);
    }
}

void attention(const float* q, const KvLayerView& kv, const int32_t* block_table, int64_t pos,
               const AttentionParams& p, float* out, float* scratch) {
  attention_rows(q, 1, 0, kv, block_table, pos, p, 0, kv.n_kv_heads, out, scratch);
}

void attention_ref(const float* q, const float* k, const float* v, int64_t n_kv_heads, int64_t head_dim,
                   int64_t pos, const AttentionParams& p, float* out) {
  const int64_t group = p.n_heads / n_kv_heads, stride = n_kv_heads * head_dim;
  const int64_t lo = window_start(pos, p.window);
  std::vector<double> w(size_t(pos + 1));
  for (int64_t h = 0; h < p.n_heads; ++h) {
    const int64_t g = h / group;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t t = lo; t <= pos; ++t) {
      double x = 0;
      for (int64_t d = 0; d < head_dim; ++d) x += double(q[h * head_dim + d]) * k[t * stride + g * head_dim + d];
      x *= p.scale;
      if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
      w[t] = x;
      mx = std::max(mx, x);
    }
    double sum = 0;
    for (int64_t t = lo; t <= pos; ++t) sum += (w[t] = std::exp(w[t] - mx));
    for (int64_t d = 0; d < head_dim; ++d) {
      double acc = 0;
      for (int64_t t = lo; t <= pos; ++t) acc += w[t] * v[t * stride + g * head_dim + d];
      out[h * head_dim + d] = float(acc / sum);
    }
  }
}

}  // namespace kvasir::kernels
