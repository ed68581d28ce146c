// Activation conversion as device functions over values already in registers, one value per
// thread: what the standalone conversion kernels and the fused norm/activation kernels share.
// Codes and scales are the CPU's (kernels/quant/ref_simple.cpp, ref_kquants.cpp).
#pragma once
#include "cuda/kernels.cuh"

namespace kvasir::cuda {

// Q8_0: a warp holds one 32-value block (lane = position). d = amax / 127 stored as F16, codes
// round(v / d) with the unrounded scale.
__device__ __forceinline__ void quantize_q8_0_warp(float v, int64_t block, const ActBuffers& out) {
  const int lane = threadIdx.x & 31;
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.0f / d : 0.0f;
  out.q[block * 32 + lane] = int8_t(roundf(v * id));
  if (lane == 0) out.d[block] = __half2float(__float2half_rn(d));
}

// Q8_K: a block of 256 threads holds one 256-value block (thread = position). The scale comes
// from the value of largest magnitude (the first such, as the CPU scans): codes
// nearest(-127 / max * v), d = 1 / (-127 / max), and the sum of every 16 codes. `shared` holds 16
// words. Every thread of the block must call it.
__device__ __forceinline__ void quantize_q8_k_block(float v, int64_t block, const ActBuffers& out, float* shared) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float ax = fabsf(v), val = v;
  int ix = tid;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, ax, o), ov = __shfl_xor_sync(0xffffffffu, val, o);
    const int oi = __shfl_xor_sync(0xffffffffu, ix, o);
    if (oa > ax || (oa == ax && oi < ix)) ax = oa, ix = oi, val = ov;
  }
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = ax, shared[8 + warp] = val;
  __syncthreads();
  ax = shared[0], val = shared[8];
  for (int k = 1; k < 8; ++k)
    if (shared[k] > ax) ax = shared[k], val = shared[8 + k];  // warps in index order: ties keep the first
  int code = 0;
  if (ax != 0.f) {
    const float iscale = -127.f / val;
    code = min(127, __float2int_rn(iscale * v));
    if (tid == 0) out.d[block] = 1.f / iscale;
  } else if (tid == 0) {
    out.d[block] = 0.f;
  }
  out.q[block * 256 + tid] = int8_t(code);
  int sum = code;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if ((lane & 15) == 0) out.s[block * 16 + tid / 16] = sum;
}

__device__ __forceinline__ float round_to(DType t, float v) {
  if (t == DType::F16) return __half2float(__float2half_rn(v));
  if (t == DType::BF16) return __bfloat162float(__float2bfloat16_rn(v));
  return v;
}

// Converts value v at position e of row t (rows of n values) into every target; the block's
// threads hold consecutive positions starting at a multiple of the block size, which is 256
// when a Q8_K target is present and a multiple of 32 otherwise.
__device__ __forceinline__ void convert_value(float v, int64_t t, int64_t n, int64_t e, const ActTargets& targets,
                                              float* shared) {
  for (int k = 0; k < targets.n; ++k) {
    const DType type = targets.type[k];
    const ActBuffers& b = targets.buf[k];
    if (type == DType::Q8_K) quantize_q8_k_block(v, (t * n + e) / 256, b, shared);
    else if (type == DType::Q8_0) quantize_q8_0_warp(v, (t * n + e) / 32, b);
    else b.f[t * n + e] = round_to(type, v);
  }
}

}  // namespace kvasir::cuda
