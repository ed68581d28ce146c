#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "kernels/quant/quant.h"
#include "kernels/vec_math.h"

namespace kvasir::kernels {
namespace {

size_t elem_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

// Pointer to the KV row of logical position pos.
inline uint8_t* kv_row(void* pool, const KvLayerView& kv, const int32_t* block_table, int64_t pos) {
  const int64_t row = int64_t(block_table[pos / kv.block_size]) * kv.block_size + pos % kv.block_size;
  return static_cast<uint8_t*>(pool) + size_t(row) * size_t(kv.n_kv_heads * kv.head_dim) * elem_bytes(kv.type);
}

inline int64_t window_start(int64_t pos, int64_t window) { return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; }

// q.k over n floats: two 8-lane FMA chains (alternating chunks), the fixed hsum, then the tail.
inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0;
#if KVASIR_HAVE_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  if (i + 8 <= n) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    i += 8;
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(_mm256_add_ps(acc0, acc1)), _mm256_extractf128_ps(_mm256_add_ps(acc0, acc1), 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  s = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
#endif
  for (; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

// acc[d] = acc[d] * c.
inline void scale_row(float* acc, int64_t n, float c) {
  int64_t d = 0;
#if KVASIR_HAVE_AVX2
  for (; d + 8 <= n; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), _mm256_set1_ps(c)));
#endif
  for (; d < n; ++d) acc[d] *= c;
}

// acc[d] = fma(w[t], v[t][d], acc[d]) for t = 0..n-1 in order, v rows hd floats apart. Dims
// outer, keys inner, so a slice of acc stays in registers across the keys: the same operations
// per element as one axpy per key, without reloading and storing acc for every key.
inline void accumulate_values(float* acc, const float* v, const float* w, int64_t n, int64_t hd) {
  int64_t d = 0;
#if KVASIR_HAVE_AVX2
  for (; d + 32 <= hd; d += 32) {
    __m256 a0 = _mm256_loadu_ps(acc + d), a1 = _mm256_loadu_ps(acc + d + 8);
    __m256 a2 = _mm256_loadu_ps(acc + d + 16), a3 = _mm256_loadu_ps(acc + d + 24);
    for (int64_t t = 0; t < n; ++t) {
      const __m256 wv = _mm256_set1_ps(w[t]);
      const float* vt = v + t * hd + d;
      a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vt), a0);
      a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vt + 8), a1);
      a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vt + 16), a2);
      a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vt + 24), a3);
    }
    _mm256_storeu_ps(acc + d, a0);
    _mm256_storeu_ps(acc + d + 8, a1);
    _mm256_storeu_ps(acc + d + 16, a2);
    _mm256_storeu_ps(acc + d + 24, a3);
  }
  for (; d + 8 <= hd; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int64_t t = 0; t < n; ++t) a = _mm256_fmadd_ps(_mm256_set1_ps(w[t]), _mm256_loadu_ps(v + t * hd + d), a);
    _mm256_storeu_ps(acc + d, a);
  }
#endif
  for (; d < hd; ++d) {
    float a = acc[d];
    for (int64_t t = 0; t < n; ++t) a = std::fma(w[t], v[t * hd + d], a);
    acc[d] = a;
  }
}

// w[t] = exp(s[t] - mx) for t < n (lanes past n are computed and ignored).
inline void exp_shifted(const float* s, int64_t n, float mx, float* w) {
  int64_t t = 0;
#if KVASIR_HAVE_AVX2
  for (; t + 8 <= n; t += 8) _mm256_storeu_ps(w + t, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), _mm256_set1_ps(mx))));
#endif
  for (; t < n; ++t) w[t] = exp1(s[t] - mx);
}

// Running softmax state of one (row, head).
struct HeadState {
  float max, sum;
};

// One head of one row over n keys/values (rows of k, v with head_dim floats): scores, then the
// online-softmax update of (max, sum) and of the unnormalized output acc.
void attend_block(const float* q, const float* k, const float* v, int64_t n, int64_t hd, const AttentionParams& p,
                  float* s, float* w, HeadState& st, float* acc) {
  float block_max = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n; ++t) {
    float x = dot(q, k + t * hd, hd) * p.scale;
    if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
    s[t] = x;
    block_max = std::max(block_max, x);
  }
  const float new_max = std::max(st.max, block_max);
  const float correction = std::exp(st.max - new_max);  // 0 on the first block
  if (correction != 1.f) scale_row(acc, hd, correction);
  exp_shifted(s, n, new_max, w);
  float sum = 0;
  for (int64_t t = 0; t < n; ++t) sum += w[t];
  accumulate_values(acc, v, w, n, hd);
  st.sum = std::fma(st.sum, correction, sum);
  st.max = new_max;
}

}  // namespace

void kv_store(const KvLayerView& kv, const int32_t* block_table, int64_t pos, const float* k, const float* v) {
  const int64_t n = kv.n_kv_heads * kv.head_dim;
  uint8_t* kr = kv_row(kv.k, kv, block_table, pos);
  uint8_t* vr = kv_row(kv.v, kv, block_table, pos);
  if (kv.type == DType::F32) {
    std::memcpy(kr, k, size_t(n) * 4);
    std::memcpy(vr, v, size_t(n) * 4);
  } else {
    // Round to nearest even like f32_to_fp16 (vectorized where compiled in).
    const auto to_f16 = quant_traits(DType::F16)->quantize_row_fast;
    to_f16(k, kr, n);
    to_f16(v, vr, n);
  }
}

int64_t attention_scratch_floats(const KvLayerView& kv, const AttentionParams& p) {
  const int64_t group = p.n_heads / kv.n_kv_heads;
  // K and V of one head's block, scores and weights of one block (padded to 8), the states of
  // every (row, query head) of a tile.
  return 2 * kv.block_size * kv.head_dim + 2 * (kv.block_size + 8) + 2 * kAttentionTileRows * group * kv.n_kv_heads;
}

void attention_rows(const float* q, int64_t n_rows, int64_t row_stride, const KvLayerView& kv,
                    const int32_t* block_table, int64_t pos0, const AttentionParams& p, int64_t kv_begin,
                    int64_t kv_end, float* out, float* scratch) {
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const int64_t group = p.n_heads / kv.n_kv_heads, n_g = kv_end - kv_begin;
  const bool f16 = kv.type == DType::F16;
  float* kblk = scratch;           // [bs][hd]
  float* vblk = kblk + bs * hd;    // [bs][hd]
  float* s = vblk + bs * hd;       // [bs + 8]
  float* w = s + bs + 8;           // [bs + 8]
  auto* state = reinterpret_cast<HeadState*>(w + bs + 8);  // [n_rows][n_g * group]
  auto state_of = [&](int64_t m, int64_t g, int64_t h) -> HeadState& { return state[(m * n_g + g - kv_begin) * group + h]; };
  const int64_t last = pos0 + n_rows - 1;
  const int64_t lo_first = window_start(pos0, p.window);
  for (int64_t m = 0; m < n_rows; ++m) {
    std::fill(out + m * row_stride + kv_begin * group * hd, out + m * row_stride + kv_end * group * hd, 0.f);
    for (int64_t g = kv_begin; g < kv_end; ++g)
      for (int64_t h = 0; h < group; ++h) state_of(m, g, h) = {-std::numeric_limits<float>::infinity(), 0.f};
  }
  // Blocks outer, heads inner: the heads of one KV row are adjacent in memory, so a block's rows
  // are read from DRAM once for all of the tile's heads. Each (row, head) still sees the blocks
  // in order, so the result does not depend on how the heads are split.
  for (int64_t start = lo_first - lo_first % bs; start <= last; start += bs) {
    const int64_t first = std::max(start, lo_first), end = std::min(start + bs - 1, last);
    for (int64_t g = kv_begin; g < kv_end; ++g) {
      // Convert the keys any row of the tile needs from this block, once per head.
      for (int64_t t = first; t <= end; ++t) {
        const size_t off = size_t(g * hd) * elem_bytes(kv.type);
        widen_row(kv_row(kv.k, kv, block_table, t) + off, f16, kblk + (t - first) * hd, hd);
        widen_row(kv_row(kv.v, kv, block_table, t) + off, f16, vblk + (t - first) * hd, hd);
      }
      for (int64_t m = 0; m < n_rows; ++m) {
        const int64_t pos = pos0 + m;
        const int64_t t0 = std::max(start, window_start(pos, p.window)), t1 = std::min(start + bs - 1, pos);
        if (t0 > t1) continue;
        for (int64_t h = 0; h < group; ++h) {
          const int64_t head = g * group + h;
          attend_block(q + m * row_stride + head * hd, kblk + (t0 - first) * hd, vblk + (t0 - first) * hd, t1 - t0 + 1,
                       hd, p, s, w, state_of(m, g, h), out + m * row_stride + head * hd);
        }
      }
    }
  }
  for (int64_t m = 0; m < n_rows; ++m)
    for (int64_t g = kv_begin; g < kv_end; ++g)
      for (int64_t h = 0; h < group; ++h)
        scale_row(out + m * row_stride + (g * group + h) * hd, hd, 1.f / state_of(m, g, h).sum);
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
