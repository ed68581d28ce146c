#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/quant/grid.h"
#include "kernels/quant/quant.h"

namespace kvasir::quant {
namespace {

void parallel(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (!pool || n <= grain) return fn(0, n);
  pool->parallel_for(n, grain, [&](int64_t b, int64_t e, int) { fn(b, e); }, 16);
}

double dot(const double* a, const double* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += a[i] * b[i], s1 += a[i + 1] * b[i + 1], s2 += a[i + 2] * b[i + 2], s3 += a[i + 3] * b[i + 3];
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// The scales of one block of the type, chosen from x (block_size values): the type's weighted
// quantizer when weights are given and it has one, else its reference quantizer.
void choose_scales(DType type, const float* x, int64_t n, const float* weights, uint8_t* block) {
  if (const auto weighted = weights ? kernels::weighted_quantizer(type) : nullptr) weighted(x, block, n, weights);
  else kernels::quant_traits(type)->quantize_row(x, block, n);
}

}  // namespace

void HessianAccumulator::add(const float* x, int64_t rows, ThreadPool* pool) {
  constexpr int64_t kRows = 8;   // rows of H per task: each input row is read once per 8 of them
  constexpr int64_t kChunk = 256;  // input rows summed in float before they join the double sum
  const int64_t n = n_;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t r1 = std::min(rows, r0 + kChunk);
    parallel(pool, (n + kRows - 1) / kRows, 1, [&](int64_t b, int64_t e) {
      std::vector<float> acc;
      for (int64_t blk = b; blk < e; ++blk) {
        const int64_t i0 = blk * kRows, ni = std::min(kRows, n - i0), width = n - i0;
        acc.assign(size_t(kRows * width), 0.f);
        for (int64_t r = r0; r < r1; ++r) {
          const float* v = x + r * n + i0;
          for (int64_t k = 0; k < ni; ++k) {
            const float a = v[k];
            float* out = acc.data() + k * width;
            for (int64_t j = k; j < width; ++j) out[j] += a * v[j];
          }
        }
        for (int64_t k = 0; k < ni; ++k)
          for (int64_t j = k; j < width; ++j) h_[size_t((i0 + k) * n + i0 + j)] += double(acc[size_t(k * width + j)]);
      }
    });
  }
  rows_ += rows;
}

std::vector<double> HessianAccumulator::matrix() const {
  std::vector<double> h = h_;
  for (int64_t i = 0; i < n_; ++i)
    for (int64_t j = 0; j < i; ++j) h[size_t(i * n_ + j)] = h[size_t(j * n_ + i)];
  return h;
}

Result<std::vector<double>> inverse_cholesky_upper(std::vector<double> a, int64_t n, ThreadPool* pool) {
  // With J the order-reversing permutation: J H J = L Lᵀ gives H⁻¹ = (J L⁻¹ J)ᵀ (J L⁻¹ J), and
  // J L⁻¹ J is upper triangular: one Cholesky and one triangular inverse, no full inverse.
  std::reverse(a.begin(), a.end());  // J H J, row-major: both orders reversed at once
  // Cholesky, column by column: row j of L (left of the diagonal) is final when column j starts.
  for (int64_t j = 0; j < n; ++j) {
    double* lj = a.data() + j * n;
    const double s = lj[j] - dot(lj, lj, j);
    if (!(s > 0) || !std::isfinite(s))
      return Error{"the Hessian is not positive definite (column " + std::to_string(j) + "); more damping or more calibration text",
                   ErrorCode::invalid_argument};
    lj[j] = std::sqrt(s);
    const double inv = 1.0 / lj[j];
    parallel(n - j - 1 > 64 ? pool : nullptr, n - j - 1, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = j + 1 + b; i < j + 1 + e; ++i) {
        double* li = a.data() + i * n;
        li[j] = (li[j] - dot(li, lj, j)) * inv;
      }
    });
  }
  // M = L⁻¹, column by column (each column is an independent triangular solve).
  std::vector<double> m(size_t(n * n), 0.0);
  parallel(pool, n, 8, [&](int64_t b, int64_t e) {
    std::vector<double> col(static_cast<size_t>(n));
    for (int64_t k = b; k < e; ++k) {
      col[size_t(k)] = 1.0 / a[size_t(k * n + k)];
      for (int64_t i = k + 1; i < n; ++i) {
        const double* li = a.data() + i * n;
        col[size_t(i)] = -dot(li + k, col.data() + k, i - k) / li[i];
      }
      for (int64_t i = k; i < n; ++i) m[size_t(i * n + k)] = col[size_t(i)];
    }
  });
  std::reverse(m.begin(), m.end());  // J M J: upper triangular
  return m;
}

Result<std::vector<uint8_t>> gptq_quantize(DType type, const float* w, int64_t n_out, int64_t n_in,
                                           std::vector<double> h, const GptqOptions& o, ThreadPool* pool) {
  if (!kernels::has_block_grid(type) || !kernels::quant_traits(type) || !kernels::quant_traits(type)->quantize_row)
    return Error{"GPTQ cannot write " + std::string(dtype_name(type)), ErrorCode::invalid_argument};
  const int64_t G = dtype_info(type).block_size;
  if (n_in % G != 0 || h.size() != size_t(n_in * n_in))
    return Error{"GPTQ: a row of " + std::to_string(n_in) + " is not whole " + std::string(dtype_name(type)) + " blocks",
                 ErrorCode::invalid_argument};
  const int64_t n = n_in;
  const size_t block_bytes = dtype_info(type).block_bytes, rb = row_bytes(type, n);
  // Columns no input reached: their weights do not matter; zero them and keep H invertible.
  std::vector<uint8_t> dead(size_t(n), 0);
  std::vector<float> importance(static_cast<size_t>(n));
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) {
    double& d = h[size_t(i * n + i)];
    if (d == 0) dead[size_t(i)] = 1, d = 1;
    importance[size_t(i)] = float(d);
    mean_diag += d / double(n);
  }
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return h[size_t(a * n + a)] > h[size_t(b * n + b)]; });
  std::vector<double> hp(size_t(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) hp[size_t(i * n + j)] = h[size_t(perm[size_t(i)] * n + perm[size_t(j)])];
  for (int64_t i = 0; i < n; ++i) hp[size_t(i * n + i)] += o.damp * mean_diag;
  auto u = inverse_cholesky_upper(std::move(hp), n, pool);
  if (!u) return Error{u.error()};
  const std::vector<float> uf(u->begin(), u->end());  // the sweep runs in float, as the paper's does
  const float* weights = o.weighted_scales ? importance.data() : nullptr;
  const int64_t B = std::max<int64_t>(G, (o.block + G - 1) / G * G);

  std::vector<uint8_t> out(size_t(n_out) * rb);
  constexpr int64_t kRows = 8;  // rows swept together: each row of U is read once for all of them
  parallel(pool, (n_out + kRows - 1) / kRows, 1, [&](int64_t b, int64_t e) {
    std::vector<float> wr(size_t(kRows * n)), scale(size_t(kRows * n)), offset(size_t(kRows * n)), err(size_t(kRows * B));
    std::vector<float> orig(static_cast<size_t>(n));
    std::vector<int> q(size_t(kRows * n));
    kernels::BlockGrid grid;
    for (int64_t chunk = b; chunk < e; ++chunk) {
      const int64_t r0 = chunk * kRows, R = std::min(kRows, n_out - r0);
      // Each row's block grids: all chosen now from the unquantized weights (act-order), or
      // block by block as the sweep reaches them.
      auto set_grid = [&](int64_t r, int64_t col, const float* x) {
        uint8_t* blk = out.data() + size_t(r0 + r) * rb + size_t(col / G) * block_bytes;
        choose_scales(type, x, G, weights ? weights + col : nullptr, blk);
        kernels::block_grid(type, blk, grid);
        std::copy_n(grid.scale, G, scale.data() + r * n + col);
        std::copy_n(grid.offset, G, offset.data() + r * n + col);
      };
      for (int64_t r = 0; r < R; ++r) {
        const float* src = w + (r0 + r) * n;
        for (int64_t j = 0; j < n; ++j) orig[size_t(j)] = dead[size_t(j)] ? 0.f : src[j];
        for (int64_t i = 0; i < n; ++i) wr[size_t(r * n + i)] = orig[size_t(perm[size_t(i)])];
        if (o.act_order)
          for (int64_t col = 0; col < n; col += G) set_grid(r, col, orig.data() + col);
      }
      for (int64_t b0 = 0; b0 < n; b0 += B) {
        const int64_t b1 = std::min(n, b0 + B);
        for (int64_t i = b0; i < b1; ++i) {
          const int64_t c = perm[size_t(i)];
          if (!o.act_order && c % G == 0)  // here i == c: the block's current (corrected) weights
            for (int64_t r = 0; r < R; ++r) set_grid(r, c, wr.data() + r * n + i);
          const float* ui = uf.data() + i * n;
          const float inv_d = 1.f / ui[i];
          for (int64_t r = 0; r < R; ++r) {
            float* row = wr.data() + r * n;
            const float s = scale[size_t(r * n + c)], off = offset[size_t(r * n + c)];
            const int qi = kernels::nearest_quant(row[i], s, off, grid.qmin, grid.qmax);
            q[size_t(r * n + c)] = qi;
            const float e_i = (row[i] - (s * float(qi) + off)) * inv_d;
            err[size_t(r * B + (i - b0))] = e_i;
            for (int64_t j = i + 1; j < b1; ++j) row[j] -= e_i * ui[j];
          }
        }
        // The block's errors reach the columns after it at once (the paper's lazy batch update).
        for (int64_t i = b0; i < b1; ++i) {
          const float* ui = uf.data() + i * n;
          for (int64_t r = 0; r < R; ++r) {
            const float e_i = err[size_t(r * B + (i - b0))];
            float* row = wr.data() + r * n;
            for (int64_t j = b1; j < n; ++j) row[j] -= e_i * ui[j];
          }
        }
      }
      for (int64_t r = 0; r < R; ++r)
        for (int64_t col = 0; col < n; col += G)
          kernels::set_block_quants(type, out.data() + size_t(r0 + r) * rb + size_t(col / G) * block_bytes, q.data() + r * n + col);
    }
  });
  return out;
}

}  // namespace kvasir::quant
