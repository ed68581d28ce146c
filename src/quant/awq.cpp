#include "quant/awq.h"

#include <algorithm>
#include <cmath>

#include "kernels/matmul.h"
#include "kernels/quant/quant.h"

namespace kvasir::quant {
namespace {

void parallel(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (!pool || n <= grain) return fn(0, n);
  pool->parallel_for(n, grain, [&](int64_t b, int64_t e, int) { fn(b, e); });
}

}  // namespace

void awq_quantize_row(DType type, const float* scaled, void* dst, int64_t n, std::span<const float> s,
                      std::span<const float> mean_sq) {
  const auto weighted = mean_sq.empty() ? nullptr : kernels::weighted_quantizer(type);
  if (!weighted) return kernels::quant_traits(type)->quantize_row(scaled, dst, n);
  std::vector<float> imp(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) imp[size_t(j)] = mean_sq[size_t(j)] / (s[size_t(j)] * s[size_t(j)]);
  weighted(scaled, dst, n, imp.data());
}

double awq_output_error(std::span<const AwqMatrix> mats, int64_t n, const float* x, int64_t rows,
                        std::span<const float> s, std::span<const float> mean_sq, ThreadPool* pool) {
  const DType act_type = kernels::quant_traits(DType::F32)->vec_dot_type;
  std::vector<uint8_t> act(row_bytes(act_type, n) * size_t(rows));
  kernels::quantize_activations(act_type, x, rows, n, act.data());
  double total = 0;
  for (const AwqMatrix& m : mats) {
    const auto* tr = kernels::quant_traits(m.type);
    std::vector<float> d(size_t(m.n_out * n)), y(size_t(rows * m.n_out));
    // D = Q(W diag(s)) diag(s)⁻¹ − W, row by row.
    parallel(pool, m.n_out, 16, [&](int64_t b, int64_t e) {
      std::vector<float> scaled(static_cast<size_t>(n));
      std::vector<uint8_t> q(row_bytes(m.type, n));
      for (int64_t r = b; r < e; ++r) {
        const float* w = m.w + r * n;
        float* dr = d.data() + r * n;
        for (int64_t j = 0; j < n; ++j) scaled[size_t(j)] = w[j] * s[size_t(j)];
        awq_quantize_row(m.type, scaled.data(), q.data(), n, s, mean_sq);
        tr->dequantize_row(q.data(), dr, n);
        for (int64_t j = 0; j < n; ++j) dr[j] = dr[j] / s[size_t(j)] - w[j];
      }
    });
    // Y = x Dᵀ, then ||Y||².
    parallel(pool, m.n_out, 64, [&](int64_t b, int64_t e) {
      kernels::matmul_rows(DType::F32, d.data(), n, b, e, act.data(), rows, y.data(), m.n_out);
    });
    double sum = 0;
    for (float v : y) sum += double(v) * v;
    total += sum;
  }
  return total;
}

Result<AwqScales> awq_search(std::span<const AwqMatrix> mats, int64_t n, const float* x, int64_t rows,
                             std::span<const float> mean_abs, std::span<const float> mean_sq,
                             const AwqOptions& o, ThreadPool* pool) {
  if (!o.weighted) mean_sq = {};
  if (int64_t(mean_abs.size()) != n || rows < 1 || o.grid < 1 || (!mean_sq.empty() && int64_t(mean_sq.size()) != n))
    return Error{"AWQ: needs a magnitude per channel and sample rows", ErrorCode::invalid_argument};
  for (const AwqMatrix& m : mats) {
    const auto* tr = kernels::quant_traits(m.type);
    if (!tr || !tr->quantize_row || n % dtype_info(m.type).block_size != 0)
      return Error{"AWQ cannot quantize rows of " + std::to_string(n) + " to " + std::string(dtype_name(m.type)),
                   ErrorCode::invalid_argument};
  }
  AwqScales best;
  std::vector<float> s(static_cast<size_t>(n));
  for (int g = 0; g < o.grid; ++g) {
    const double alpha = double(g) / o.grid;
    float lo = INFINITY, hi = 0;
    for (int64_t j = 0; j < n; ++j) {
      s[size_t(j)] = std::max(float(std::pow(double(mean_abs[size_t(j)]), alpha)), 1e-4f);
      lo = std::min(lo, s[size_t(j)]), hi = std::max(hi, s[size_t(j)]);
    }
    const float norm = std::sqrt(lo * hi);
    for (float& v : s) v /= norm;
    const double loss = awq_output_error(mats, n, x, rows, s, mean_sq, pool);
    if (g == 0) best.rtn_loss = loss;
    if (g == 0 || loss < best.loss) best.s = s, best.alpha = alpha, best.loss = loss;
  }
  return best;
}

}  // namespace kvasir::quant
