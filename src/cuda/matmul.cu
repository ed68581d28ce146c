// Quantized and float matrix products: kThreads threads (32, 64 or 128, by the row's length) per
// output row, the row's units spread over them (thread j takes units j, j + kThreads, ...), each
// unit decoded once and dotted with up to kRows activation rows. A thread loads kUnroll units
// before it decodes the first (more bytes in flight); the first of them before it waits on the
// kernel that wrote the activations (launch.cuh: weights are never written). The threads' partials
// are summed in a fixed tree (warp shuffles, then the row's warps in order), and a thread adds its
// units in ascending order whatever kUnroll, so a (row, output) result is the same sum in the same
// order whatever the tile or batch: a sequence's logits do not depend on what it is batched with.
#include "cuda/act_quant.cuh"
#include "cuda/kernels.cuh"
#include "cuda/launch.cuh"
#include "cuda/quant_units.cuh"

namespace kvasir::cuda {
namespace {

constexpr int kBlock = 128;

// Units past the row's end load its last unit instead (never used): no branch between the loads,
// so the compiler issues all of them before the first result is needed.
template <class Unit, int kUnroll>
__device__ __forceinline__ void load_units(Unit (&units)[kUnroll], const uint8_t* row, int u0, int stride, int n_units) {
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) units[k].load(row, min(u0 + k * stride, n_units - 1));
}

template <class Unit, int kRows, int kThreads, int kUnroll>
__global__ void __launch_bounds__(kBlock) matmul_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int n_units,
                                                        int n_out, ActBuffers act, int n_in, int d_per_row, int T,
                                                        float* __restrict__ y, int64_t ldy) {
  constexpr int kRowsPerBlock = kBlock / kThreads, kWarpsPerRow = kThreads / 32, kStride = kThreads * kUnroll;
  __shared__ float partial[kRowsPerBlock][kWarpsPerRow][kRows];
  const int j = threadIdx.x % kThreads, slot = threadIdx.x / kThreads;
  const int o = blockIdx.x * kRowsPerBlock + slot;
  const int t0 = blockIdx.y * kRows;
  const int nr = min(kRows, T - t0);
  const uint8_t* row = w + size_t(o) * row_bytes;
  Unit units[kUnroll];
  // Unrolled threads fetch their first units before they wait (weights are never written); at one
  // unit a thread the kernel keeps the shape verified on the H200: wait, then each unit in turn.
  if constexpr (kUnroll > 1)
    if (o < n_out) load_units(units, row, j, kThreads, n_units);
  dependency_wait();
  allow_dependents();
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  if (o < n_out) {
    ActRow rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int t = t0 + min(r, nr - 1);
      rows[r] = {act.q + size_t(t) * n_in, act.d + size_t(t) * d_per_row, act.s + size_t(t) * (n_in / 16),
                 act.f + size_t(t) * n_in};
    }
    for (int u0 = j; u0 < n_units; u0 += kStride) {
      if constexpr (kUnroll == 1) units[0].load(row, u0);
      else if (u0 != j) load_units(units, row, u0, kThreads, n_units);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int u = u0 + k * kThreads;
        if (u >= n_units) break;
        units[k].decode(u);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          if (r < nr) acc[r] += units[k].dot(rows[r], u);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = warp_sum(acc[r]);
  if constexpr (kWarpsPerRow == 1) {
    if (j == 0 && o < n_out)
      for (int r = 0; r < nr; ++r) y[size_t(t0 + r) * ldy + o] = acc[r];
  } else {
    if ((threadIdx.x & 31) == 0)
      for (int r = 0; r < kRows; ++r) partial[slot][j / 32][r] = acc[r];
    __syncthreads();
    if (j == 0 && o < n_out)
      for (int r = 0; r < nr; ++r) {
        float v = partial[slot][0][r];
        for (int k = 1; k < kWarpsPerRow; ++k) v += partial[slot][k][r];
        y[size_t(t0 + r) * ldy + o] = v;
      }
  }
}

template <class Unit, int kThreads>
void launch_threads(const DeviceMatrix& w, const ActBuffers& act, int64_t T, float* y, int64_t ldy, int d_per_row,
                    int unroll, cudaStream_t s) {
  const int n_units = int(w.n_in / Unit::kElems);
  constexpr int kRowsPerBlock = kBlock / kThreads;
  const unsigned gx = unsigned((w.n_out + kRowsPerBlock - 1) / kRowsPerBlock);
  auto run = [&](auto rows_tag, auto unroll_tag) {
    constexpr int R = decltype(rows_tag)::value, U = decltype(unroll_tag)::value;
    launch(matmul_kernel<Unit, R, kThreads, U>, dim3(gx, unsigned((T + R - 1) / R)), dim3(kBlock), 0, s, w.data,
           w.row_bytes, n_units, int(w.n_out), act, int(w.n_in), d_per_row, int(T), y, ldy);
  };
  // Tiles of 4 and 8 rows (verify steps, prefill) keep one unit in flight: their registers go to
  // the activation rows, and each unit feeds 4-8 rows' dots while the next loads.
  auto with_unroll = [&](auto rows_tag) {
    constexpr int R = decltype(rows_tag)::value;
    if constexpr (R >= 4) run(rows_tag, std::integral_constant<int, 1>{});
    else if (unroll >= 4) run(rows_tag, std::integral_constant<int, 4>{});
    else if (unroll == 2) run(rows_tag, std::integral_constant<int, 2>{});
    else run(rows_tag, std::integral_constant<int, 1>{});
  };
  if (T == 1) with_unroll(std::integral_constant<int, 1>{});
  else if (T == 2) with_unroll(std::integral_constant<int, 2>{});
  else if (T <= 4) with_unroll(std::integral_constant<int, 4>{});
  else with_unroll(std::integral_constant<int, 8>{});
}

// Threads per row by the row's units and the unroll (never by T, so the summation order is the
// row's own): at least `unroll` units a thread, so that each keeps that many loads in flight.
template <class Unit>
void launch_matmul(const DeviceMatrix& w, const ActBuffers& act, int64_t T, float* y, int64_t ldy, int d_per_row,
                   int unroll, cudaStream_t s) {
  const int64_t n_units = w.n_in / Unit::kElems;
  if (n_units >= 128 * unroll) launch_threads<Unit, 128>(w, act, T, y, ldy, d_per_row, unroll, s);
  else if (n_units >= 64 * unroll) launch_threads<Unit, 64>(w, act, T, y, ldy, d_per_row, unroll, s);
  else launch_threads<Unit, 32>(w, act, T, y, ldy, d_per_row, unroll, s);
}

__global__ void quantize_q8_0_kernel(const float* __restrict__ x, int64_t blocks, ActBuffers out) {
  dependency_wait();
  allow_dependents();
  const int64_t blk = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (blk >= blocks) return;  // whole warps leave together
  quantize_q8_0_warp(x[blk * 32 + (threadIdx.x & 31)], blk, out);
}

__global__ void quantize_q8_k_kernel(const float* __restrict__ x, ActBuffers out) {
  __shared__ float shared[16];
  dependency_wait();
  allow_dependents();
  quantize_q8_k_block(x[int64_t(blockIdx.x) * 256 + threadIdx.x], blockIdx.x, out, shared);
}

template <DType kType>
__global__ void round_floats_kernel(const float* __restrict__ x, int64_t n, float* out) {
  dependency_wait();
  allow_dependents();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if constexpr (kType == DType::F16) out[i] = __half2float(__float2half_rn(x[i]));
  else if constexpr (kType == DType::BF16) out[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
  else out[i] = x[i];
}

}  // namespace

DType act_type_of(DType w) {
  switch (w) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0: return DType::Q8_0;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return DType::Q8_K;
    default: return w;  // F32, F16, BF16 read activations of their own precision
  }
}

bool matmul_supports(DType w, int64_t n_in) {
  switch (w) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0: return n_in % 32 == 0;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return n_in % 256 == 0;
    case DType::F32:
    case DType::F16:
    case DType::BF16: return n_in % 4 == 0;
    default: return false;
  }
}

void quantize_act(DType act, const float* x, int64_t T, int64_t n_in, const ActBuffers& out, cudaStream_t s) {
  const int64_t n = T * n_in;
  switch (act) {
    case DType::Q8_0: {
      const int64_t blocks = n / 32;
      launch(quantize_q8_0_kernel, dim3(unsigned((blocks + 7) / 8)), dim3(256), 0, s, x, blocks, out);
      break;
    }
    case DType::Q8_K: launch(quantize_q8_k_kernel, dim3(unsigned(n / 256)), dim3(256), 0, s, x, out); break;
    case DType::F16: launch(round_floats_kernel<DType::F16>, dim3(unsigned((n + 255) / 256)), dim3(256), 0, s, x, n, out.f); break;
    case DType::BF16: launch(round_floats_kernel<DType::BF16>, dim3(unsigned((n + 255) / 256)), dim3(256), 0, s, x, n, out.f); break;
    default: launch(round_floats_kernel<DType::F32>, dim3(unsigned((n + 255) / 256)), dim3(256), 0, s, x, n, out.f); break;
  }
}

void matmul(const DeviceMatrix& w, const ActBuffers& act, int64_t T, float* y, int64_t ldy, cudaStream_t s, int unroll) {
  const int per32 = int(w.n_in / 32), per256 = int(w.n_in / 256);
  const int u = unroll == 0 ? launch_tuning().unroll : unroll >= 4 ? 4 : unroll >= 2 ? 2 : 1;  // kernel_check refuses others
  switch (w.type) {
    case DType::Q4_0: return launch_matmul<UnitQ4_0>(w, act, T, y, ldy, per32, u, s);
    case DType::Q5_0: return launch_matmul<UnitQ5_0>(w, act, T, y, ldy, per32, u, s);
    case DType::Q8_0: return launch_matmul<UnitQ8_0>(w, act, T, y, ldy, per32, u, s);
    case DType::Q4_K: return launch_matmul<UnitQ4_K>(w, act, T, y, ldy, per256, u, s);
    case DType::Q5_K: return launch_matmul<UnitQ5_K>(w, act, T, y, ldy, per256, u, s);
    case DType::Q6_K: return launch_matmul<UnitQ6_K>(w, act, T, y, ldy, per256, u, s);
    case DType::F32: return launch_matmul<UnitFloat<DType::F32>>(w, act, T, y, ldy, 0, u, s);
    case DType::F16: return launch_matmul<UnitFloat<DType::F16>>(w, act, T, y, ldy, 0, u, s);
    case DType::BF16: return launch_matmul<UnitFloat<DType::BF16>>(w, act, T, y, ldy, 0, u, s);
    default: return;
  }
}

}  // namespace kvasir::cuda
