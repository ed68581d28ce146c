// GPTQ (Frantar et al., 2022): a weight matrix W [n_out][n_in] quantized column by column, each
// column's rounding error fed back into the columns not yet quantized, through the inverse of the
// Hessian of the layer's squared output error, H = Σ x xᵀ over calibration inputs x. Per block of
// the target type, the scales are chosen (by the type's own quantizer, on the error-corrected
// weights as they stand when the block is reached), then each element takes the nearest value of
// that grid, so the result is an ordinary GGUF block that llama.cpp reads unchanged.
// Rows are independent given H, so they run in parallel; the same inputs give the same bytes.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace kvasir::quant {

struct GptqOptions {
  double damp = 0.01;      // added to H's diagonal, as a fraction of its mean (the paper's 1%)
  int64_t block = 128;     // lazy-update block, rounded up to whole blocks of the target type
  // Quantize the columns in decreasing order of H's diagonal. The scales are then chosen once,
  // from the unquantized weights, before any error is fed back ("static groups").
  bool act_order = false;
  // Choose each block's scales with the type's weighted quantizer (Q4_0, Q4_1, Q5_0, Q5_1),
  // weighing each column by H's diagonal, as an importance matrix would.
  bool weighted_scales = true;
};

// Σ x xᵀ over rows of x [rows][n], accumulated in double (each call's partial sum in float).
class HessianAccumulator {
 public:
  explicit HessianAccumulator(int64_t n) : n_(n), h_(size_t(n * n), 0.0) {}
  void add(const float* x, int64_t rows, ThreadPool* pool);
  int64_t n() const { return n_; }
  int64_t rows() const { return rows_; }
  // The full symmetric matrix, [n][n].
  std::vector<double> matrix() const;

 private:
  int64_t n_, rows_ = 0;
  std::vector<double> h_;  // upper triangle filled
};

// The upper-triangular U with H⁻¹ = Uᵀ U, for symmetric positive definite H [n][n] (row-major):
// the rows GPTQ feeds errors along. An error when H is not positive definite.
Result<std::vector<double>> inverse_cholesky_upper(std::vector<double> h, int64_t n, ThreadPool* pool);

// W quantized to `type` (one with a kernels::BlockGrid) with GPTQ; hessian is Σ x xᵀ [n_in][n_in].
// Returns n_out rows of row_bytes(type, n_in).
Result<std::vector<uint8_t>> gptq_quantize(DType type, const float* w, int64_t n_out, int64_t n_in,
                                           std::vector<double> hessian, const GptqOptions& options, ThreadPool* pool);

}  // namespace kvasir::quant
