// What every CUDA file of the backend shares: the error check, the unaligned loads that the GGUF
// block layouts need, warp reductions, and the device view of one weight matrix.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace kvasir::cuda {

// A CUDA call's failure as an Error naming the call; "" when it succeeded.
inline std::string cuda_failure(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return std::string("CUDA: ") + what + ": " + cudaGetErrorString(e);
}
#define KV_CUDA_TRY(call)                                                      \
  do {                                                                         \
    const std::string kv_failure_ = ::kvasir::cuda::cuda_failure((call), #call); \
    if (!kv_failure_.empty()) return ::kvasir::Error{kv_failure_, ::kvasir::ErrorCode::internal}; \
  } while (0)

// One weight matrix in device memory, in the file's block layout (quantized blocks stay quantized).
struct DeviceMatrix {
  DType type = DType::F32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0, n_out = 0;
  size_t row_bytes = 0;
};

// Quantized blocks of 18, 22, 34 and 210 bytes sit at 2-byte alignment: a 32-bit word is read as
// two halves.
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return uint32_t(h[0]) | (uint32_t(h[1]) << 16);
}
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ float ld_half(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum of one double per thread (blockDim.x a multiple of 32, at most 1024); every
// thread gets the total. `shared` holds 32 doubles.
__device__ __forceinline__ double block_sum(double v, double* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double t = lane < warps ? shared[lane] : 0.0;
  return warp_sum(t);
}

}  // namespace kvasir::cuda
