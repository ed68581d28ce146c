// How the backend launches its kernels: one place for programmatic dependent launch (PDL) and
// the two A/B knobs a device check compares.
//
// With PDL (sm_90), a kernel may start while the one before it on the stream drains: its blocks
// can fetch weights, which no kernel writes, before they wait for the previous kernel's results.
// The contract every kernel keeps: each block calls dependency_wait() before it reads or writes
// any buffer another kernel touches (before any early return), and calls allow_dependents() only
// after that wait, so at most one grid waits ahead and every earlier grid is already resident.
// Without PDL (the default) both calls do nothing; kernels whose loaded code lacks them (the
// compute_80 fallback) launch without PDL (kernel_waits).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "cuda/device.cuh"

namespace kvasir::cuda {

__device__ __forceinline__ void dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// KVASIR_CUDA_UNROLL (1, 2 or 4; default 1): the matrix-product units a thread has in flight
// before it decodes the first. KVASIR_CUDA_PDL (0 or 1; default 0): launch with PDL. Both are
// read once; other values are refused with a note on stderr and the default kept. Neither has
// run on a GPU yet; the defaults compute what the kernels verified on the H200 computed.
struct LaunchTuning {
  int unroll = 1;
  bool pdl = false;
};

inline LaunchTuning read_launch_tuning() {
  LaunchTuning t;
  if (const char* u = std::getenv("KVASIR_CUDA_UNROLL")) {
    const std::string s(u);
    if (s == "1" || s == "2" || s == "4") t.unroll = std::stoi(s);
    else std::fprintf(stderr, "kvasir: KVASIR_CUDA_UNROLL=%s ignored (takes 1, 2 or 4)\n", u);
  }
  if (const char* p = std::getenv("KVASIR_CUDA_PDL")) {
    const std::string s(p);
    if (s == "0" || s == "1") t.pdl = s == "1";
    else std::fprintf(stderr, "kvasir: KVASIR_CUDA_PDL=%s ignored (takes 0 or 1)\n", p);
  }
  return t;
}

inline const LaunchTuning& launch_tuning() {
  static const LaunchTuning t = read_launch_tuning();
  return t;
}

// Whether the code loaded for this kernel holds the griddepcontrol instructions: built from
// compute_90 or later. On a card newer than sm_90 the driver compiles the compute_80 PTX, whose
// kernels never wait; launched with PDL they would race, so they launch without it.
inline bool kernel_waits(const void* kernel) {
  static std::mutex mutex;
  static std::unordered_map<const void*, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(kernel); it != known.end()) return it->second;
  cudaFuncAttributes a{};
  const bool waits = cudaFuncGetAttributes(&a, kernel) == cudaSuccess && a.ptxVersion >= 90;
  if (!waits) cudaGetLastError();  // a failed query must not read as a failed step
  return known[kernel] = waits;
}

// kernel<<<grid, block, shared, s>>>(args...), with PDL when the tuning asks for it and the
// kernel's code waits. Errors surface at the caller's next cudaGetLastError, as a <<<>>>
// launch's do.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  const bool pdl = launch_tuning().pdl && kernel_waits(reinterpret_cast<const void*>(kernel));
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = s;
  config.attrs = pdl ? attr : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace kvasir::cuda
