// The low-rank delta of a LoRA adapter over some rows of a batch: y += scale · B (A x), in two
// pure steps so that the forward can split the work across threads (down over rows, up over
// output columns). a: [rank][n_in], bt (B transposed): [rank][n_out], all F32.
#pragma once
#include <cstdint>

namespace kvasir::kernels {

// u[i][k] = a[k] · x[rows[i]] for i < n_rows, k < rank (x rows are n_in floats, x_stride apart).
void lora_down(const float* x, int64_t x_stride, const int32_t* rows, int64_t n_rows, const float* a, int64_t rank,
               int64_t n_in, float* u);
// y[rows[i]][o] += scale · Σ_k u[i][k] · bt[k][o] for i < n_rows and o in [o_begin, o_end).
void lora_up(const float* u, const int32_t* rows, int64_t n_rows, const float* bt, int64_t rank, int64_t n_out,
             float scale, float* y, int64_t y_stride, int64_t o_begin, int64_t o_end);

}  // namespace kvasir::kernels
