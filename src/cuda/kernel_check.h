// Single kernels on host data, for tests against their CPU scalar twins: each call uploads its
// inputs, runs one kernel and returns the result. Plain C++; in a build without CUDA every call
// returns an error.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kvasir::cuda {

// y [T][n_out] = activation rows x [T][n_in], converted to the weight type's activation type on
// the device, times the n_out weight rows w (file layout). unroll: the units a thread has in flight
// (1, 2 or 4; 0: the KVASIR_CUDA_UNROLL setting).
Result<std::vector<float>> matmul_on_device(DType type, const void* w, int64_t n_in, int64_t n_out, const float* x,
                                            int64_t T, int unroll = 0);
// The n_rows rows of a matrix [n_rows][n_in] (file layout) dequantized.
Result<std::vector<float>> dequantize_on_device(DType type, const void* rows, int64_t n_in, int64_t n_rows);
// rms_norm of each of the n_rows rows of x [n_rows][n] times w.
Result<std::vector<float>> rms_norm_on_device(const float* x, int64_t n_rows, int64_t n, const float* w, float eps);

}  // namespace kvasir::cuda
