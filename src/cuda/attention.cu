// Paged attention, split over key spans (flash-decoding): a block per (row, KV head, span) serves
// the row's query heads of that KV head (grouped-query attention). Its warps take the span's keys
// in turn, lanes across the head's dimensions (coalesced K and V reads), each warp keeping an
// online softmax; the warps are merged in shared memory into the span's partial (max, sum,
// weighted values), and a second kernel merges a row's spans. A row's spans depend only on its
// own position, so its result does not depend on the batch.
#include "cuda/kernels.cuh"
#include "cuda/launch.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxLaneDims = 8;  // head_dim <= 256
constexpr int kMaxGroup = 16;    // query heads per KV head

struct RowSpan {
  int lo, n_keys, span, n_spans;
};

__device__ __forceinline__ RowSpan row_span(int pos, int window) {
  RowSpan r;
  r.lo = window > 0 ? max(0, pos - window + 1) : 0;
  r.n_keys = pos - r.lo + 1;
  r.span = max(kAttentionSpanMin, (r.n_keys + kAttentionMaxSpans - 1) / kAttentionMaxSpans);
  r.n_spans = (r.n_keys + r.span - 1) / r.span;
  return r;
}

template <int kGroup>
__global__ void __launch_bounds__(kWarps * 32) attention_span_kernel(const float* __restrict__ q, RowsDevice rows,
                                                                    KvLayerDevice kv, AttentionDeviceParams p,
                                                                    float* __restrict__ partials) {
  extern __shared__ float sh[];  // q [G][hd], then per warp [G][hd + 2]
  dependency_wait();
  allow_dependents();
  const int t = blockIdx.x, g = blockIdx.y, s = blockIdx.z;
  const int pos = rows.pos[t];
  const RowSpan rs = row_span(pos, p.window);
  if (s >= rs.n_spans) return;
  const int hd = kv.head_dim, G = p.n_heads / kv.n_kv_heads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int E = (hd + 31) / 32, d0 = lane * E;
  float* qs = sh;
  float* ws = sh + G * hd;
  const float* qr = q + int64_t(t) * p.n_heads * hd + int64_t(g) * G * hd;
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) qs[i] = qr[i];
  __syncthreads();
  const int32_t* table = rows.tables + rows.table_offset[t];
  const int k_begin = rs.lo + s * rs.span, k_end = min(pos + 1, k_begin + rs.span);
  float m[kGroup], l[kGroup], acc[kGroup][kMaxLaneDims];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    m[h] = -INFINITY, l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxLaneDims; ++i) acc[h][i] = 0.f;
  }
  for (int key = k_begin + warp; key < k_end; key += kWarps) {
    const int64_t base = ((int64_t(table[key / kv.block_size]) * kv.n_kv_heads + g) * kv.block_size +
                          key % kv.block_size) * hd;
    float kk[kMaxLaneDims], vv[kMaxLaneDims];
#pragma unroll
    for (int i = 0; i < kMaxLaneDims; ++i) {
      const bool in = i < E && d0 + i < hd;
      kk[i] = in ? __half2float(kv.k[base + d0 + i]) : 0.f;
      vv[i] = in ? __half2float(kv.v[base + d0 + i]) : 0.f;
    }
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      if (h >= G) break;
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < kMaxLaneDims; ++i)
        if (i < E && d0 + i < hd) dot = fmaf(qs[h * hd + d0 + i], kk[i], dot);
      float x = warp_sum(dot) * p.scale;
      if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
      const float m_new = fmaxf(m[h], x);
      const float c = expf(m[h] - m_new), w = expf(x - m_new);
      l[h] = l[h] * c + w;
#pragma unroll
      for (int i = 0; i < kMaxLaneDims; ++i) acc[h][i] = fmaf(w, vv[i], acc[h][i] * c);
      m[h] = m_new;
    }
  }
  // Each warp's state to shared memory, then the warps merged per (head, dimension).
  float* mine = ws + warp * G * (hd + 2);
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    if (h >= G) break;
    if (lane == 0) mine[h * (hd + 2)] = m[h], mine[h * (hd + 2) + 1] = l[h];
#pragma unroll
    for (int i = 0; i < kMaxLaneDims; ++i)
      if (i < E && d0 + i < hd) mine[h * (hd + 2) + 2 + d0 + i] = acc[h][i];
  }
  __syncthreads();
  const int n_warps = min(kWarps, k_end - k_begin);  // warps that saw a key
  for (int idx = threadIdx.x; idx < G * (hd + 2); idx += blockDim.x) {
    const int h = idx / (hd + 2), j = idx % (hd + 2);
    float M = -INFINITY;
    for (int w = 0; w < n_warps; ++w) M = fmaxf(M, ws[(w * G + h) * (hd + 2)]);
    float v = 0.f;
    if (j == 0) {
      v = M;
    } else {
      for (int w = 0; w < n_warps; ++w) {
        const float* st = ws + (w * G + h) * (hd + 2);
        v += st[j] * expf(st[0] - M);
      }
    }
    const int head = g * G + h;
    partials[((int64_t(t) * p.n_heads + head) * kAttentionMaxSpans + s) * (hd + 2) + j] = v;
  }
}

__global__ void attention_merge_kernel(const float* __restrict__ partials, RowsDevice rows, int head_dim, int window,
                                       int n_heads, float* __restrict__ out) {
  dependency_wait();
  allow_dependents();
  const int t = blockIdx.x, head = blockIdx.y, hd = head_dim;
  const RowSpan rs = row_span(rows.pos[t], window);
  const float* part = partials + (int64_t(t) * n_heads + head) * kAttentionMaxSpans * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < rs.n_spans; ++s) M = fmaxf(M, part[s * (hd + 2)]);
  float L = 0.f;
  for (int s = 0; s < rs.n_spans; ++s) L += part[s * (hd + 2) + 1] * expf(part[s * (hd + 2)] - M);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.f;
    for (int s = 0; s < rs.n_spans; ++s) a += part[s * (hd + 2) + 2 + d] * expf(part[s * (hd + 2)] - M);
    out[(int64_t(t) * n_heads + head) * hd + d] = a / L;
  }
}

size_t span_shared_bytes(int group, int head_dim) {
  return size_t(group * head_dim + kWarps * group * (head_dim + 2)) * sizeof(float);
}

template <int kGroup>
void launch_spans(const float* q, int64_t T, int max_spans, const RowsDevice& rows, const KvLayerDevice& kv,
                  const AttentionDeviceParams& p, float* partials, cudaStream_t s) {
  const int G = p.n_heads / kv.n_kv_heads;
  launch(attention_span_kernel<kGroup>, dim3(unsigned(T), unsigned(kv.n_kv_heads), unsigned(max_spans)),
         dim3(kWarps * 32), span_shared_bytes(G, kv.head_dim), s, q, rows, kv, p, partials);
}

}  // namespace

bool attention_supports(int n_heads, int n_kv_heads, int head_dim) {
  return n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= kMaxGroup && head_dim >= 1 &&
         head_dim <= 32 * kMaxLaneDims;
}

Status attention_prepare(int n_heads, int n_kv_heads, int head_dim) {
  const size_t bytes = span_shared_bytes(n_heads / n_kv_heads, head_dim);
  if (bytes <= 48 * 1024) return {};
  KV_CUDA_TRY(cudaFuncSetAttribute(attention_span_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  KV_CUDA_TRY(cudaFuncSetAttribute(attention_span_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  KV_CUDA_TRY(cudaFuncSetAttribute(attention_span_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  KV_CUDA_TRY(cudaFuncSetAttribute(attention_span_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  KV_CUDA_TRY(cudaFuncSetAttribute(attention_span_kernel<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  return {};
}

int attention_spans_for(int n_keys) {
  const int span = std::max(kAttentionSpanMin, (n_keys + kAttentionMaxSpans - 1) / kAttentionMaxSpans);
  return (n_keys + span - 1) / span;
}

void attention(const float* q, int64_t T, int max_keys, const RowsDevice& rows, const KvLayerDevice& kv,
               const AttentionDeviceParams& p, float* partials, float* out, cudaStream_t s) {
  const int G = p.n_heads / kv.n_kv_heads;
  const int spans = attention_spans_for(std::max(max_keys, 1));
  if (G <= 1) launch_spans<1>(q, T, spans, rows, kv, p, partials, s);
  else if (G <= 2) launch_spans<2>(q, T, spans, rows, kv, p, partials, s);
  else if (G <= 4) launch_spans<4>(q, T, spans, rows, kv, p, partials, s);
  else if (G <= 8) launch_spans<8>(q, T, spans, rows, kv, p, partials, s);
  else launch_spans<16>(q, T, spans, rows, kv, p, partials, s);
  launch(attention_merge_kernel, dim3(unsigned(T), unsigned(p.n_heads)), dim3(std::min(256, std::max(32, kv.head_dim))),
         0, s, partials, rows, kv.head_dim, p.window, p.n_heads, out);
}

}  // namespace kvasir::cuda
