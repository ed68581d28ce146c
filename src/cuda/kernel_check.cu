#include <vector>

#include "cuda/kernel_check.h"
#include "cuda/kernels.cuh"
#include "cuda/launch.cuh"
#include "cuda/quant_units.cuh"

namespace kvasir::cuda {
namespace {

// Device buffers of one check, freed on return, and the stream its kernels run on (a stream of
// its own, as the runner's, so that PDL launches are tested as the runner makes them).
struct Scratch {
  std::vector<void*> blocks;
  cudaStream_t stream = nullptr;
  Scratch() { cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); }
  ~Scratch() {
    if (stream) cudaStreamDestroy(stream);
    for (void* p : blocks) cudaFree(p);
  }
  template <typename T>
  T* alloc(size_t n) {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(n * sizeof(T), 256)) != cudaSuccess) return nullptr;
    blocks.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* upload(const T* src, size_t n) {
    T* p = alloc<T>(n);
    // On the check's stream, so its kernels see the data (the legacy stream does not order a
    // non-blocking one).
    if (p && cudaMemcpyAsync(p, src, n * sizeof(T), cudaMemcpyHostToDevice, stream) != cudaSuccess) return nullptr;
    return p;
  }
};

Result<std::vector<float>> download(const float* d, size_t n) {
  std::vector<float> out(n);
  KV_CUDA_TRY(cudaGetLastError());
  KV_CUDA_TRY(cudaDeviceSynchronize());
  KV_CUDA_TRY(cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

__global__ void dequantize_kernel(DeviceMatrix m, float* out) {
  dependency_wait();
  allow_dependents();
  const uint8_t* row = m.data + size_t(blockIdx.x) * m.row_bytes;
  for (int64_t i = threadIdx.x; i < m.n_in; i += blockDim.x) out[int64_t(blockIdx.x) * m.n_in + i] = dequant_element(m.type, row, i);
}

}  // namespace

Result<std::vector<float>> matmul_on_device(DType type, const void* w, int64_t n_in, int64_t n_out, const float* x,
                                            int64_t T, int unroll) {
  if (!matmul_supports(type, n_in)) return Error{"type or row length not taken by the CUDA matmul", ErrorCode::invalid_argument};
  if (unroll != 0 && unroll != 1 && unroll != 2 && unroll != 4)
    return Error{"unroll must be 1, 2 or 4 (0: the KVASIR_CUDA_UNROLL setting)", ErrorCode::invalid_argument};
  Scratch s;
  const size_t rb = row_bytes(type, n_in);
  DeviceMatrix m{type, s.upload(static_cast<const uint8_t*>(w), rb * size_t(n_out)), n_in, n_out, rb};
  const float* dx = s.upload(x, size_t(T * n_in));
  ActBuffers a{s.alloc<int8_t>(size_t(T * n_in)), s.alloc<float>(size_t(T * n_in / 32 + 1)),
               s.alloc<int>(size_t(T * n_in / 16 + 1)), s.alloc<float>(size_t(T * n_in))};
  float* y = s.alloc<float>(size_t(T * n_out));
  if (!s.stream || !m.data || !dx || !a.q || !a.d || !a.s || !a.f || !y)
    return Error{"CUDA: out of device memory", ErrorCode::exhausted};
  quantize_act(act_type_of(type), dx, T, n_in, a, s.stream);
  matmul(m, a, T, y, n_out, s.stream, unroll);
  return download(y, size_t(T * n_out));
}

Result<std::vector<float>> dequantize_on_device(DType type, const void* rows, int64_t n_in, int64_t n_rows) {
  Scratch s;
  const size_t rb = row_bytes(type, n_in);
  DeviceMatrix m{type, s.upload(static_cast<const uint8_t*>(rows), rb * size_t(n_rows)), n_in, n_rows, rb};
  float* out = s.alloc<float>(size_t(n_in * n_rows));
  if (!s.stream || !m.data || !out) return Error{"CUDA: out of device memory", ErrorCode::exhausted};
  launch(dequantize_kernel, dim3(unsigned(n_rows)), dim3(256), 0, s.stream, m, out);
  return download(out, size_t(n_in * n_rows));
}

Result<std::vector<float>> rms_norm_on_device(const float* x, int64_t n_rows, int64_t n, const float* w, float eps) {
  Scratch s;
  const float* dx = s.upload(x, size_t(n_rows * n));
  const float* dw = s.upload(w, size_t(n));
  float* out = s.alloc<float>(size_t(n_rows * n));
  if (!s.stream || !dx || !dw || !out) return Error{"CUDA: out of device memory", ErrorCode::exhausted};
  rms_norm_rows(dx, nullptr, n_rows, n, dw, eps, out, s.stream);
  return download(out, size_t(n_rows * n));
}

}  // namespace kvasir::cuda
