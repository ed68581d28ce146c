#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp16.h"

namespace kvasir::kernels {
namespace {

size_t elem_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

// Pointer to the KV row of logical position pos.
inline uint8_t* kv_row(void* pool, const KvLayerView& kv, const int32_t* block_table, int64_t pos) {
  const int64_t row = int64_t(block_table[pos / kv.block_size]) * kv.block_size + pos % kv.block_size;
  return static_cast<uint8_t*>(pool) + size_t(row) * size_t(kv.n_kv_heads * kv.head_dim) * elem_bytes(kv.type);
}

inline void load_head(const uint8_t* row, DType type, int64_t offset, int64_t n, float* out) {
  if (type == DType::F32) {
    std::memcpy(out, reinterpret_cast<const float*>(row) + offset, size_t(n) * 4);
  } else {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(row) + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(h[i]);
  }
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline int64_t window_start(int64_t pos, int64_t window) { return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0; }

}  // namespace

void kv_store(const KvLayerView& kv, const int32_t* block_table, int64_t pos, const float* k, const float* v) {
  const int64_t n = kv.n_kv_heads * kv.head_dim;
  uint8_t* kr = kv_row(kv.k, kv, block_table, pos);
  uint8_t* vr = kv_row(kv.v, kv, block_table, pos);
  if (kv.type == DType::F32) {
    std::memcpy(kr, k, size_t(n) * 4);
    std::memcpy(vr, v, size_t(n) * 4);
  } else {
    auto* kh = reinterpret_cast<uint16_t*>(kr);
    auto* vh = reinterpret_cast<uint16_t*>(vr);
    for (int64_t i = 0; i < n; ++i) {
      kh[i] = f32_to_fp16(k[i]);
      vh[i] = f32_to_fp16(v[i]);
    }
  }
}

int64_t attention_scratch_floats(const KvLayerView& kv, const AttentionParams& p) {
  const int64_t group = p.n_heads / kv.n_kv_heads;
  // K and V of one block, scores of the group for one block, running max and sum per head.
  return 2 * kv.block_size * kv.head_dim + group * kv.block_size + 2 * group;
}

void attention(const float* q, const KvLayerView& kv, const int32_t* block_table, int64_t pos,
               const AttentionParams& p, float* out, float* scratch) {
  const int64_t hd = kv.head_dim, bs = kv.block_size;
  const int64_t group = p.n_heads / kv.n_kv_heads;
  float* kblk = scratch;             // [bs][hd]
  float* vblk = kblk + bs * hd;      // [bs][hd]
  float* scores = vblk + bs * hd;    // [group][bs]
  float* run_max = scores + group * bs;  // [group]
  float* run_sum = run_max + group;      // [group]
  const int64_t lo = window_start(pos, p.window);

  for (int64_t g = 0; g < kv.n_kv_heads; ++g) {
    const float* qg = q + g * group * hd;
    float* og = out + g * group * hd;
    std::fill(og, og + group * hd, 0.f);
    std::fill(run_max, run_max + group, -std::numeric_limits<float>::infinity());
    std::fill(run_sum, run_sum + group, 0.f);
    for (int64_t start = lo - lo % bs; start <= pos; start += bs) {
      const int64_t t0 = std::max(start, lo), t1 = std::min(start + bs - 1, pos);
      const int64_t n = t1 - t0 + 1;
      for (int64_t t = 0; t < n; ++t) {
        load_head(kv_row(kv.k, kv, block_table, t0 + t), kv.type, g * hd, hd, kblk + t * hd);
        load_head(kv_row(kv.v, kv, block_table, t0 + t), kv.type, g * hd, hd, vblk + t * hd);
      }
      for (int64_t h = 0; h < group; ++h) {
        float* s = scores + h * bs;
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < n; ++t) {
          float x = dot(qg + h * hd, kblk + t * hd, hd) * p.scale;
          if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
          s[t] = x;
          block_max = std::max(block_max, x);
        }
        const float new_max = std::max(run_max[h], block_max);
        const float correction = std::exp(run_max[h] - new_max);  // 0 on the first block
        float* acc = og + h * hd;
        if (correction != 1.f)
          for (int64_t d = 0; d < hd; ++d) acc[d] *= correction;
        float sum = 0;
        for (int64_t t = 0; t < n; ++t) {
          const float w = std::exp(s[t] - new_max);
          sum += w;
          const float* vt = vblk + t * hd;
          for (int64_t d = 0; d < hd; ++d) acc[d] += w * vt[d];
        }
        run_sum[h] = run_sum[h] * correction + sum;
        run_max[h] = new_max;
      }
    }
    for (int64_t h = 0; h < group; ++h) {
      const float inv = 1.f / run_sum[h];
      for (int64_t d = 0; d < hd; ++d) og[h * hd + d] *= inv;
    }
  }
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
