// Paged attention: a block per (row, KV head) serves the row's query heads of that KV head
// (grouped-query attention), walking the row's keys in chunks of kChunk with an online softmax:
// a thread per key for the scores, a thread per dimension for the values. Scores and weights in
// F32 from F16 keys and values, as the CPU computes them.
#include "cuda/kernels.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kChunk = 128;    // keys per step, one per thread
constexpr int kMaxGroup = 16;  // query heads per KV head
constexpr int kMaxHeadDim = 256;

__global__ void __launch_bounds__(kChunk) attention_kernel(const float* __restrict__ q, RowsDevice rows, KvLayerDevice kv,
                                                           AttentionDeviceParams p, float* __restrict__ out) {
  __shared__ float qs[kMaxGroup * kMaxHeadDim];
  __shared__ float sc[kMaxGroup][kChunk];
  __shared__ float corr[kMaxGroup], run_max[kMaxGroup], run_sum[kMaxGroup];
  const int t = blockIdx.x, g = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hd = kv.head_dim, G = p.n_heads / kv.n_kv_heads, q_dim = p.n_heads * hd;
  const float* qr = q + int64_t(t) * q_dim + int64_t(g) * G * hd;
  for (int i = tid; i < G * hd; i += kChunk) qs[i] = qr[i];
  if (tid < G) run_max[tid] = -INFINITY, run_sum[tid] = 0.f;
  const int pos = rows.pos[t];
  const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  const int32_t* table = rows.tables + rows.table_offset[t];
  float acc[kMaxGroup][2];
#pragma unroll
  for (int h = 0; h < kMaxGroup; ++h) acc[h][0] = acc[h][1] = 0.f;
  __syncthreads();
  for (int k0 = lo; k0 <= pos; k0 += kChunk) {
    // Scores: thread tid takes key k0 + tid.
    const int key = k0 + tid;
    if (key <= pos) {
      const int64_t base = ((int64_t(table[key / kv.block_size]) * kv.n_kv_heads + g) * kv.block_size +
                            key % kv.block_size) * hd;
      const __half2* kr = reinterpret_cast<const __half2*>(kv.k + base);
      float s[kMaxGroup];
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h) s[h] = 0.f;
      for (int d = 0; d < hd / 2; ++d) {
        const float2 kk = __half22float2(kr[d]);
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h)
          if (h < G) s[h] = fmaf(qs[h * hd + 2 * d + 1], kk.y, fmaf(qs[h * hd + 2 * d], kk.x, s[h]));
      }
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h)
        if (h < G) {
          float x = s[h] * p.scale;
          if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
          sc[h][tid] = x;
        }
    } else {
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h)
        if (h < G) sc[h][tid] = -INFINITY;
    }
    __syncthreads();
    // The chunk's softmax step, a warp per head.
    for (int h = warp; h < G; h += kChunk / 32) {
      float m = -INFINITY;
      for (int j = lane; j < kChunk; j += 32) m = fmaxf(m, sc[h][j]);
      m = fmaxf(warp_max(m), run_max[h]);
      float sum = 0.f;
      for (int j = lane; j < kChunk; j += 32) {
        const float w = expf(sc[h][j] - m);  // masked keys: exp(-inf) = 0
        sc[h][j] = w;
        sum += w;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float c = expf(run_max[h] - m);  // 0 on the first chunk
        corr[h] = c;
        run_sum[h] = run_sum[h] * c + sum;
        run_max[h] = m;
      }
    }
    __syncthreads();
    // Values: thread tid takes dimensions tid and tid + kChunk.
    const int n_keys = min(kChunk, pos - k0 + 1);
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const int d = tid + part * kChunk;
      if (d >= hd) continue;
#pragma unroll
      for (int h = 0; h < kMaxGroup; ++h)
        if (h < G) acc[h][part] *= corr[h];
      for (int j = 0; j < n_keys; ++j) {
        const int key = k0 + j;
        const int64_t base = ((int64_t(table[key / kv.block_size]) * kv.n_kv_heads + g) * kv.block_size +
                              key % kv.block_size) * hd;
        const float vv = __half2float(kv.v[base + d]);
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h)
          if (h < G) acc[h][part] = fmaf(sc[h][j], vv, acc[h][part]);
      }
    }
    __syncthreads();
  }
  float* o = out + int64_t(t) * q_dim + int64_t(g) * G * hd;
#pragma unroll
  for (int part = 0; part < 2; ++part) {
    const int d = tid + part * kChunk;
    if (d >= hd) continue;
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h)
      if (h < G) o[h * hd + d] = acc[h][part] / run_sum[h];
  }
}

}  // namespace

void attention(const float* q, int64_t T, const RowsDevice& rows, const KvLayerDevice& kv,
               const AttentionDeviceParams& p, float* out, cudaStream_t s) {
  attention_kernel<<<dim3(unsigned(T), unsigned(kv.n_kv_heads)), kChunk, 0, s>>>(q, rows, kv, p, out);
}

// The limits the kernel is built for (checked at load).
bool attention_supports(int n_heads, int n_kv_heads, int head_dim) {
  return n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= kMaxGroup &&
         head_dim <= kMaxHeadDim && head_dim % 2 == 0;
}

}  // namespace kvasir::cuda
