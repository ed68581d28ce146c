// matmul_rows against a naive reference: dequantize W and the quantized activations, dot in
// double. Several batch sizes, ragged output ranges, a y stride wider than n_out.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/matmul.h"
#include "kernels/quant_test_util.h"

using namespace kvasir;
using namespace kvasir::test;

namespace {

class Matmul : public ::testing::TestWithParam<DType> {};

TEST_P(Matmul, MatchesNaiveReference) {
  const DType t = GetParam();
  const DType at = kernels::quant_traits(t)->vec_dot_type;
  const int64_t n_in = 3 * std::max<int64_t>(block_size(t), 256);
  const int64_t n_out = 37;
  // Weights: n_out rows quantized one by one into one buffer.
  std::vector<uint8_t> w(row_bytes(t, n_in) * n_out);
  std::vector<std::vector<float>> w_deq;
  for (int64_t o = 0; o < n_out; ++o) {
    const auto q = quantize(t, random_row(n_in, uint32_t(o + 1)));
    std::copy(q.begin(), q.end(), w.begin() + o * int64_t(q.size()));
    w_deq.push_back(dequantize(t, q.data(), n_in));
  }
  const std::pair<int64_t, int64_t> ranges[] = {{0, n_out}, {3, 17}, {n_out - 1, n_out}, {5, 5}, {1, 36}};
  for (int64_t n_rows : {1, 2, 5, 8}) {
    std::vector<float> x(size_t(n_rows * n_in));
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto row = random_row(n_in, uint32_t(500 + r));
      std::copy(row.begin(), row.end(), x.begin() + r * n_in);
    }
    std::vector<uint8_t> act(row_bytes(at, n_in) * n_rows);
    kernels::quantize_activations(at, x.data(), n_rows, n_in, act.data());
    for (auto [b, e] : ranges) {
      const int64_t stride = n_out + 3;
      std::vector<float> y(size_t(n_rows * stride), NAN);
      kernels::matmul_rows(t, w.data(), n_in, b, e, act.data(), n_rows, y.data(), stride);
      for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t* ar = act.data() + r * row_bytes(at, n_in);
        const auto a_deq = dequantize(at, ar, n_in);
        for (int64_t o = 0; o < stride; ++o) {
          const float got = y[size_t(r * stride + o)];
          if (o < b || o >= e) {
            EXPECT_TRUE(std::isnan(got)) << "wrote outside [" << b << "," << e << "): r " << r << " o " << o;
            continue;
          }
          const auto& wr = w_deq[size_t(o)];
          const uint8_t* wq = w.data() + o * row_bytes(t, n_in);
          // Same margin as the vec_dot tests: float summation of exact block dots.
          const double tol = 2e-5 * abs_dot(wr, a_deq) + q8_1_sum_allowance(t, wq, ar, n_in);
          EXPECT_NEAR(got, exact_dot(wr, a_deq), tol) << "rows " << n_rows << " r " << r << " o " << o;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Matmul, ::testing::ValuesIn(weight_types()), type_param_name);

// quantize_activations writes row r at r * row_bytes, each equal to a single-row conversion.
TEST(QuantizeActivations, RowsAreIndependent) {
  for (DType at : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q8_1, DType::Q8_K}) {
    const int64_t n = 512, rows = 3;
    const auto x = random_row(n * rows, 99);
    std::vector<uint8_t> all(row_bytes(at, n) * rows);
    kernels::quantize_activations(at, x.data(), rows, n, all.data());
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
      const auto one = quantize(at, row);
      EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + r * int64_t(one.size())))
          << dtype_name(at) << " row " << r;
    }
  }
}

}  // namespace
