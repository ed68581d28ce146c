// Row-wise and element-wise kernels: norms (fused with the residual add), the embedding gather,
// gated activations, soft-capping, and the per-row attention prologue (biases, QK-norm, RoPE, the
// K/V store). Formulas are the CPU's (kernels/ops.cpp).
#include "cuda/kernels.cuh"
#include "cuda/act_quant.cuh"
#include "cuda/launch.cuh"
#include "cuda/quant_units.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ float rms_scale(const float* x, int64_t n, float eps, double* shared) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum = fma(double(x[i]), double(x[i]), sum);
  sum = block_sum(sum, shared);
  return 1.0f / sqrtf(float(sum / double(n)) + eps);
}

__global__ void rms_norm_kernel(const float* __restrict__ x, const int32_t* rows, int64_t n, const float* w, float eps,
                                float* out) {
  __shared__ double shared[32];
  dependency_wait();
  allow_dependents();
  const int64_t src = rows ? rows[blockIdx.x] : blockIdx.x;
  const float* xr = x + src * n;
  const float scale = rms_scale(xr, n, eps, shared);
  float* o = out + int64_t(blockIdx.x) * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = w ? xr[i] * scale * w[i] : xr[i] * scale;
}

// One block per (chunk of kChunk positions, row). Each block computes the whole row's new
// residual and its sum of squares itself (the same arithmetic in every block, from L2), so the
// row needs no second pass; it writes only its chunk.
template <int kChunk>
__global__ void __launch_bounds__(kChunk) norm_convert_kernel(const float* __restrict__ x_in, const float* y,
                                                              const float* post, const float* w, float eps, int64_t n,
                                                              float* x_out, float* xn, ActTargets targets) {
  __shared__ double sums[32];
  __shared__ float qshared[16];
  dependency_wait();
  allow_dependents();
  const int64_t t = blockIdx.y, e = int64_t(blockIdx.x) * kChunk + threadIdx.x;
  const float* xr = x_in + t * n;
  const float* yr = y ? y + t * n : nullptr;
  const float post_scale = yr && post ? rms_scale(yr, n, eps, sums) : 1.f;
  auto value = [&](int64_t i) {
    if (!yr) return xr[i];
    return post ? xr[i] + yr[i] * post_scale * post[i] : xr[i] + yr[i];
  };
  // A row whose length is not whole chunks (then only float targets, which need no warp-wide
  // step) leaves the last chunk's tail threads idle; they still join the block's sums.
  const bool in = e < n;
  const float v = in ? value(e) : 0.f;
  if (x_out && in) x_out[t * n + e] = v;
  if (!w) return;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kChunk) {
    const float x = value(i);
    sum = fma(double(x), double(x), sum);
  }
  sum = block_sum(sum, sums);
  const float scale = 1.0f / sqrtf(float(sum / double(n)) + eps);
  if (!in) return;
  const float o = v * scale * w[e];
  if (xn) xn[t * n + e] = o;
  convert_value(o, t, n, e, targets, qshared);
}

template <int kChunk>
__global__ void __launch_bounds__(kChunk) gated_convert_kernel(float* gate, const float* up, int64_t n, bool gelu,
                                                               ActTargets targets) {
  __shared__ float qshared[16];
  dependency_wait();
  allow_dependents();
  const int64_t t = blockIdx.y, e = int64_t(blockIdx.x) * kChunk + threadIdx.x;
  if (e >= n) return;  // a tail (float targets only, see norm_convert_kernel)
  const int64_t i = t * n + e;
  const float g = gate[i];
  float o;
  if (gelu) {
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoef = 0.044715f;
    o = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kCoef * g * g))) * up[i];
  } else {
    o = g / (1.0f + expf(-g)) * up[i];
  }
  gate[i] = o;
  convert_value(o, t, n, e, targets, qshared);
}

__global__ void embed_kernel(DeviceMatrix table, const int32_t* tokens, float scale, float* out) {
  dependency_wait();
  allow_dependents();
  const uint8_t* row = table.data + size_t(tokens[blockIdx.x]) * table.row_bytes;
  float* o = out + int64_t(blockIdx.x) * table.n_in;
  for (int64_t i = threadIdx.x; i < table.n_in; i += blockDim.x) {
    const float v = dequant_element(table.type, row, i);
    o[i] = scale != 1.f ? v * scale : v;
  }
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  dependency_wait();
  allow_dependents();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

// One block per row. Phases, each over the whole row, separated by barriers: biases; QK-norm
// (a warp per head); the row's rotation angles into shared memory, then the rotation; the store.
__global__ void qkv_prepare_kernel(float* q, float* k, float* v, QkvPrepParams p, RowsDevice rows, KvLayerDevice kv) {
  extern __shared__ float cs[];  // [rot_dims / 2] cos, then sin
  dependency_wait();
  allow_dependents();
  const int t = blockIdx.x, hd = p.head_dim;
  const int q_dim = p.n_heads * hd, kv_dim = p.n_kv_heads * hd;
  float* qr = q + int64_t(t) * q_dim;
  float* kr = k + int64_t(t) * kv_dim;
  float* vr = v + int64_t(t) * kv_dim;
  if (p.bq) {
    for (int i = threadIdx.x; i < q_dim; i += blockDim.x) qr[i] += p.bq[i];
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) kr[i] += p.bk[i], vr[i] += p.bv[i];
    __syncthreads();
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (p.q_norm) {
    for (int h = warp; h < p.n_heads + p.n_kv_heads; h += warps) {
      float* x = h < p.n_heads ? qr + h * hd : kr + (h - p.n_heads) * hd;
      const float* w = h < p.n_heads ? p.q_norm : p.k_norm;
      double sum = 0;
      for (int i = lane; i < hd; i += 32) sum = fma(double(x[i]), double(x[i]), sum);
      sum = warp_sum(sum);
      const float scale = 1.0f / sqrtf(float(sum / double(hd)) + p.eps);
      for (int i = lane; i < hd; i += 32) x[i] = x[i] * scale * w[i];
    }
    __syncthreads();
  }
  const int pos = rows.pos[t];
  const int half = p.rope.rot_dims / 2;
  if (half > 0) {
    const float theta_scale = powf(p.rope.base, -2.0f / float(p.rope.rot_dims));
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      float theta = float(pos) * p.rope.freq_scale;  // repeated products, as the CPU builds them
      for (int j = 0; j < i; ++j) theta *= theta_scale;
      const float a = p.rope.factors ? theta / p.rope.factors[i] : theta;
      cs[i] = cosf(a) * p.rope.mscale;
      cs[half + i] = sinf(a) * p.rope.mscale;
    }
    __syncthreads();
    const int pairs = (p.n_heads + p.n_kv_heads) * half;
    for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
      const int h = idx / half, i = idx % half;
      float* x = h < p.n_heads ? qr + h * hd : kr + (h - p.n_heads) * hd;
      const int a = p.rope.mode == 0 ? 2 * i : i, b = p.rope.mode == 0 ? 2 * i + 1 : i + half;
      const float x0 = x[a], x1 = x[b];
      x[a] = x0 * cs[i] - x1 * cs[half + i];
      x[b] = x0 * cs[half + i] + x1 * cs[i];
    }
    __syncthreads();
  }
  const int block = rows.tables[rows.table_offset[t] + pos / kv.block_size], slot = pos % kv.block_size;
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    const int g = i / hd, e = i % hd;
    const int64_t at = ((int64_t(block) * kv.n_kv_heads + g) * kv.block_size + slot) * hd + e;
    kv.k[at] = __float2half_rn(kr[i]);
    kv.v[at] = __float2half_rn(vr[i]);
  }
}

unsigned blocks_for(int64_t n) { return unsigned((n + kRowThreads - 1) / kRowThreads); }

}  // namespace

void rms_norm_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t n, const float* w, float eps,
                   float* out, cudaStream_t s) {
  if (n_rows > 0) launch(rms_norm_kernel, dim3(unsigned(n_rows)), dim3(kRowThreads), 0, s, x, rows, n, w, eps, out);
}

namespace {
template <typename F>
void with_chunk(int64_t n, F&& f) {
  if (n % 256 == 0) f(std::integral_constant<int, 256>{});
  else if (n % 128 == 0) f(std::integral_constant<int, 128>{});
  else if (n % 64 == 0) f(std::integral_constant<int, 64>{});
  else f(std::integral_constant<int, 32>{});
}
}  // namespace

void norm_convert(const float* x_in, const float* y, const float* post, const float* w, float eps, int64_t T, int64_t n,
                  float* x_out, float* xn, const ActTargets& targets, cudaStream_t s) {
  with_chunk(n, [&](auto chunk) {
    constexpr int C = decltype(chunk)::value;
    launch(norm_convert_kernel<C>, dim3(unsigned((n + C - 1) / C), unsigned(T)), dim3(C), 0, s, x_in, y, post, w, eps, n,
           x_out, xn, targets);
  });
}

void gated_act_convert(float* gate, const float* up, int64_t T, int64_t n, bool gelu, const ActTargets& targets,
                       cudaStream_t s) {
  with_chunk(n, [&](auto chunk) {
    constexpr int C = decltype(chunk)::value;
    launch(gated_convert_kernel<C>, dim3(unsigned((n + C - 1) / C), unsigned(T)), dim3(C), 0, s, gate, up, n, gelu,
           targets);
  });
}

void embed_rows(const DeviceMatrix& table, const int32_t* tokens, int64_t T, float scale, float* out, cudaStream_t s) {
  launch(embed_kernel, dim3(unsigned(T)), dim3(kRowThreads), 0, s, table, tokens, scale, out);
}

void softcap(float* x, int64_t n, float cap, cudaStream_t s) {
  launch(softcap_kernel, dim3(blocks_for(n)), dim3(kRowThreads), 0, s, x, n, cap);
}

void qkv_prepare(float* q, float* k, float* v, int64_t T, const QkvPrepParams& p, const RowsDevice& rows,
                 const KvLayerDevice& kv, cudaStream_t s) {
  const size_t shared = size_t(std::max(p.rope.rot_dims, 2)) * sizeof(float);
  launch(qkv_prepare_kernel, dim3(unsigned(T)), dim3(kRowThreads), shared, s, q, k, v, p, rows, kv);
}

}  // namespace kvasir::cuda
