// AWQ (Lin et al., 2023): activation-aware scaling before quantization. The input channels that
// large activations hit matter most, so matrices W that share an input x are quantized as
// Q(W diag(s)) diag(s)⁻¹, with s = a^α (a = mean |x| per channel, normalized so that
// max(s) * min(s) = 1), α searched on a grid over [0, 1] for the least output error
// Σ_W ||(Q(W diag(s)) diag(s)⁻¹ − W) xᵀ||² over sample rows of x, Q the type's round-to-nearest.
// α = 0 is plain RTN, so the search never does worse than RTN on its sample. diag(s)⁻¹ is then
// folded, exactly, into whatever produces x (a norm's weight, the rows of a matrix before it).
// Given the mean squared activations, Q is the type's weighted quantizer (Q4_0, Q4_1, Q5_0, Q5_1,
// and the K-quants that have one) with importance E[(x / s)²], as an importance matrix weighs it:
// AWQ's scaling and llama.cpp's imatrix rounding compose.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace kvasir::quant {

struct AwqMatrix {
  const float* w;  // [n_out][n]
  int64_t n_out;
  DType type;      // what it will be quantized to (one with a quantizer)
};

struct AwqOptions {
  int grid = 20;  // α = 0, 1/grid, ..., (grid-1)/grid, as AutoAWQ searches
  bool weighted = true;  // the weighted quantizer where the type has one and mean_sq is given
};

struct AwqScales {
  std::vector<float> s;  // [n]: multiply W's columns, divide x
  double alpha = 0, loss = 0, rtn_loss = 0;  // the chosen α, its error, α = 0's error
};

// x: [rows][n] sample inputs; mean_abs, mean_sq: [n] (mean_sq may be empty: plain rounding).
// Channels with equal mean_abs get equal scales (what a fold through grouped-query attention needs).
Result<AwqScales> awq_search(std::span<const AwqMatrix> mats, int64_t n, const float* x, int64_t rows,
                             std::span<const float> mean_abs, std::span<const float> mean_sq,
                             const AwqOptions& options, ThreadPool* pool);

// Σ_W ||(Q(W diag(s)) diag(s)⁻¹ − W) xᵀ||²: the error awq_search minimizes, for given scales.
double awq_output_error(std::span<const AwqMatrix> mats, int64_t n, const float* x, int64_t rows,
                        std::span<const float> s, std::span<const float> mean_sq, ThreadPool* pool);

// One row of W diag(s) quantized as awq_search's Q does: importance mean_sq / s² when given.
void awq_quantize_row(DType type, const float* scaled_row, void* dst, int64_t n, std::span<const float> s,
                      std::span<const float> mean_sq);

}  // namespace kvasir::quant
