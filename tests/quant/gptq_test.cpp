// GPTQ (quant/gptq.h) on matrices with known inputs: the Hessian accumulator against a naive
// double sum, the inverse Cholesky factor against H⁻¹, and the point of it all: the output error
// ||(W − Ŵ) Xᵀ||² drops well below round-to-nearest's for every block type, because of the error
// feedback (with the feedback damped away the error is RTN's: the check can fail).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/quant/grid.h"
#include "kernels/quant/quant.h"
#include "quant/gptq.h"

using namespace kvasir;
using namespace kvasir::quant;

namespace {

// Calibration-like inputs: correlated columns (a low-rank mix plus noise) of uneven magnitude.
std::vector<float> inputs(int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t k = 16;
  std::vector<float> mix(static_cast<size_t>(k * n)), scale(static_cast<size_t>(n)), x(static_cast<size_t>(rows * n));
  for (auto& v : mix) v = normal(rng);
  for (auto& v : scale) v = std::exp(0.7f * normal(rng));
  std::vector<float> z(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : z) v = normal(rng);
    for (int64_t j = 0; j < n; ++j) {
      float s = normal(rng);  // the part no other column explains
      for (int64_t i = 0; i < k; ++i) s += z[size_t(i)] * mix[size_t(i * n + j)];
      x[size_t(r * n + j)] = s * scale[size_t(j)];
    }
  }
  return x;
}

std::vector<double> naive_hessian(const std::vector<float>& x, int64_t rows, int64_t n) {
  std::vector<double> h(static_cast<size_t>(n * n), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) h[size_t(i * n + j)] += double(x[size_t(r * n + i)]) * x[size_t(r * n + j)];
  return h;
}

// Σ_rows (w − ŵ)ᵀ H (w − ŵ) = ||(W − Ŵ) Xᵀ||².
double output_error(DType t, const std::vector<float>& w, const std::vector<uint8_t>& q, int64_t n_out, int64_t n,
                    const std::vector<double>& h) {
  std::vector<float> back(static_cast<size_t>(n));
  std::vector<double> d(static_cast<size_t>(n));
  double total = 0;
  for (int64_t r = 0; r < n_out; ++r) {
    kernels::quant_traits(t)->dequantize_row(q.data() + size_t(r) * row_bytes(t, n), back.data(), n);
    for (int64_t j = 0; j < n; ++j) d[size_t(j)] = double(w[size_t(r * n + j)]) - back[size_t(j)];
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += h[size_t(i * n + j)] * d[size_t(j)];
      total += d[size_t(i)] * s;
    }
  }
  return total;
}

std::vector<uint8_t> rtn(DType t, const std::vector<float>& w, int64_t n_out, int64_t n) {
  std::vector<uint8_t> q(size_t(n_out) * row_bytes(t, n));
  for (int64_t r = 0; r < n_out; ++r) kernels::quant_traits(t)->quantize_row(w.data() + r * n, q.data() + size_t(r) * row_bytes(t, n), n);
  return q;
}

struct Problem {
  int64_t n = 512, n_out = 48, rows = 1024;
  std::vector<float> w, x;
  std::vector<double> h;
  Problem() {
    x = inputs(rows, n, 11);
    h = naive_hessian(x, rows, n);
    std::mt19937 rng(12);
    std::normal_distribution<float> normal(0.f, 0.05f);
    w.resize(size_t(n_out * n));
    for (auto& v : w) v = normal(rng);
  }
};

}  // namespace

TEST(Gptq, HessianAccumulatorIsTheSumOfOuterProducts) {
  const int64_t n = 72, rows = 600;  // not a multiple of the accumulator's tiles
  const auto x = inputs(rows, n, 1);
  ThreadPool pool(2);
  HessianAccumulator acc(n);
  acc.add(x.data(), 100, &pool);
  acc.add(x.data() + 100 * n, rows - 100, nullptr);
  EXPECT_EQ(acc.rows(), rows);
  const auto got = acc.matrix(), want = naive_hessian(x, rows, n);
  // Each call's partial sum is float: relative to the scale of its terms (|H_ij| <= sqrt(H_ii H_jj)).
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      ASSERT_NEAR(got[size_t(i * n + j)], want[size_t(i * n + j)],
                  1e-5 * std::sqrt(want[size_t(i * n + i)] * want[size_t(j * n + j)]))
          << i << "," << j;
}

TEST(Gptq, InverseCholeskyUpperFactorsTheInverse) {
  const int64_t n = 90;
  const auto x = inputs(400, n, 2);
  const auto h = naive_hessian(x, 400, n);
  ThreadPool pool(2);
  auto u = inverse_cholesky_upper(h, n, &pool);
  ASSERT_TRUE(u.ok()) << u.error();
  // Upper triangular with a positive diagonal, and (UᵀU) H = I.
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_GT((*u)[size_t(i * n + i)], 0);
    for (int64_t j = 0; j < i; ++j) ASSERT_EQ((*u)[size_t(i * n + j)], 0.0);
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) {
        double hinv_ik = 0;
        for (int64_t m = 0; m <= std::min(i, k); ++m) hinv_ik += (*u)[size_t(m * n + i)] * (*u)[size_t(m * n + k)];
        s += hinv_ik * h[size_t(k * n + j)];
      }
      ASSERT_NEAR(s, i == j ? 1.0 : 0.0, 1e-8) << i << "," << j;
    }
  // Two equal columns: singular, and said so.
  std::vector<double> singular(16, 1.0);
  EXPECT_FALSE(inverse_cholesky_upper(singular, 4, nullptr).ok());
}

// The figures, this seed: GPTQ's output error as a fraction of RTN's. They are asserted within
// ±30% (another compiler's float contraction moves them a little; a broken feedback moves them
// to ~1, see below).
TEST(Gptq, CutsTheOutputErrorOfRoundToNearest) {
  const Problem p;
  ThreadPool pool(2);
  const std::pair<DType, double> figures[] = {{DType::Q4_0, 0.052}, {DType::Q4_1, 0.044}, {DType::Q5_0, 0.059},
                                              {DType::Q8_0, 0.066}, {DType::Q2_K, 0.058}, {DType::Q3_K, 0.057},
                                              {DType::Q4_K, 0.059}, {DType::Q5_K, 0.054}, {DType::Q6_K, 0.063}};
  for (const auto& [t, figure] : figures) {
    const double base = output_error(t, p.w, rtn(t, p.w, p.n_out, p.n), p.n_out, p.n, p.h);
    auto q = gptq_quantize(t, p.w.data(), p.n_out, p.n, p.h, {}, &pool);
    ASSERT_TRUE(q.ok()) << q.error();
    ASSERT_EQ(q->size(), size_t(p.n_out) * row_bytes(t, p.n));
    const double ratio = output_error(t, p.w, *q, p.n_out, p.n, p.h) / base;
    std::printf("%s: GPTQ / RTN output error %.3f\n", std::string(dtype_name(t)).c_str(), ratio);
    EXPECT_NEAR(ratio, figure, 0.3 * figure) << dtype_name(t);
    // The error feedback is what does it: damped away, GPTQ rounds as RTN does.
    auto no_feedback = gptq_quantize(t, p.w.data(), p.n_out, p.n, p.h, {.damp = 1e9, .weighted_scales = false}, &pool);
    ASSERT_TRUE(no_feedback.ok());
    EXPECT_NEAR(output_error(t, p.w, *no_feedback, p.n_out, p.n, p.h) / base, 1.0, 0.02) << dtype_name(t);
  }
}

TEST(Gptq, ActOrderAndThreadsAndDeadColumns) {
  Problem p;
  ThreadPool one(1), two(2);
  const DType t = DType::Q4_0;
  const double base = output_error(t, p.w, rtn(t, p.w, p.n_out, p.n), p.n_out, p.n, p.h);
  auto a = gptq_quantize(t, p.w.data(), p.n_out, p.n, p.h, {.act_order = true}, &two);
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_LT(output_error(t, p.w, *a, p.n_out, p.n, p.h) / base, 0.2);
  // The same bytes on any number of threads.
  auto b = gptq_quantize(t, p.w.data(), p.n_out, p.n, p.h, {}, &one), c = gptq_quantize(t, p.w.data(), p.n_out, p.n, p.h, {}, &two);
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_EQ(*b, *c);
  // A column no input reached (zero row and column of H) is quantized to zero, and nothing is NaN.
  for (int64_t j = 0; j < p.n; ++j) p.h[size_t(5 * p.n + j)] = p.h[size_t(j * p.n + 5)] = 0;
  auto d = gptq_quantize(t, p.w.data(), p.n_out, p.n, p.h, {}, &two);
  ASSERT_TRUE(d.ok()) << d.error();
  std::vector<float> back(static_cast<size_t>(p.n));
  for (int64_t r = 0; r < p.n_out; ++r) {
    kernels::quant_traits(t)->dequantize_row(d->data() + size_t(r) * row_bytes(t, p.n), back.data(), p.n);
    EXPECT_EQ(back[5], 0.f);
    for (float v : back) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(Gptq, RefusesWhatItCannotWrite) {
  const Problem p;
  EXPECT_FALSE(gptq_quantize(DType::F16, p.w.data(), p.n_out, p.n, p.h, {}, nullptr).ok());
  std::vector<double> small(size_t(100 * 100), 0.0);
  for (int i = 0; i < 100; ++i) small[size_t(i * 100 + i)] = 1;
  const auto r = gptq_quantize(DType::Q4_0, p.w.data(), 1, 100, small, {}, nullptr);  // 100 is not whole blocks
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("blocks"), std::string::npos) << r.error();
}
