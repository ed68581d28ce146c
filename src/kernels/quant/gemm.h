// Matmul tiles (internal to kernels; use kernels/matmul.h): a block of weight rows ("columns" of
// the output, worked in panels of 8) times any number of activation rows, in the types of
// quant.h.
//
// THE BATCH-INVARIANCE CONTRACT. Every output y[r][c] is computed by one fixed sequence of float
// operations that depends only on row r of the activations and column c of the weights, never on
// how many rows or columns share the tile or which code path (direct, packed, scalar) runs it:
//
//  quantized types, per block i (32 elements, or 256 for the k-quants):
//     isum_i = the exact integer dot of the block's codes (offsets and sub-block scales folded in)
//     acc = fmaf(dw_i * da_i, float(isum_i), acc)                 [dw_i * da_i rounded to float]
//     types with a minimum, after that:
//       Q4_1 / Q5_1:          acc = fmaf(mw_i, sa_i, acc)         [sa_i = Q8_1's fp16 d*sum]
//       Q2_K / Q4_K / Q5_K:   acc = fmaf(-(dmin_i * da_i), float(msum_i), acc)
//     starting from acc = 0; y = acc.
//  float types (F32, F16; activations widened exactly to f32):
//     eight lane sums acc[l] = fmaf(w[k], a[k], acc[l]) over k = 8j + l in order, reduced as
//     ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7)), then the tail k >= n & ~7:
//     y = fmaf(w[k], a[k], y) in order.
//  BF16 (activations BF16), the order of AVX512-BF16's vdpbf16ps: sixteen lane sums over
//     32-element chunks, lane j adding w[32m+2j+1]*a[32m+2j+1] and then w[32m+2j]*a[32m+2j]
//     as fmaf, with denormal inputs read as zero and every denormal result flushed to (signed)
//     zero; acc[l] = lane[l] + lane[l+8] reduced as above; then the tail k >= n & ~31 as above.
//
// The SIMD kernels obey it with explicit FMA intrinsics (no product is ever left for the
// compiler to contract), so they are bitwise equal to the scalar twin gemm_ref(); the tests
// check exactly that over ragged shapes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace kvasir::kernels {

inline constexpr int kPanel = 8;  // weight rows per panel: one AVX2 float lane each

struct GemmTile {
  DType wtype = DType::F32;
  int64_t n = 0;                     // elements per row (a multiple of the block size)
  const uint8_t* w = nullptr;        // first weight row of the panel
  size_t w_stride = 0;               // bytes between weight rows
  int64_t n_cols = 0;                // weight rows
  const uint8_t* a = nullptr;        // first activation row, in wtype's vec_dot_type
  size_t a_stride = 0;               // bytes between activation rows
  int64_t n_rows = 0;                // activation rows
  float* y = nullptr;                // y[r * y_stride + c]
  int64_t y_stride = 0;
};

// Scalar twin: the contract written out, one output at a time. Every weight type.
void gemm_ref(const GemmTile& t);

// True where a SIMD tile kernel exists for the type (compiled-in AVX2).
bool gemm_has_simd(DType wtype);

// The SIMD tile; needs gemm_has_simd(t.wtype). `scratch` holds gemm_scratch_bytes(t) bytes
// (packed panels, widened activations), 32-byte aligned.
void gemm_simd(const GemmTile& t, void* scratch);
size_t gemm_scratch_bytes(DType wtype, int64_t n, int64_t n_rows);

}  // namespace kvasir::kernels
