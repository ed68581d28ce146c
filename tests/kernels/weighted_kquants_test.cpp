// The importance-weighted k-quant quantizers (Q2_K..Q6_K): they cut the importance-weighted
// error against the plain ones, decode to finite values, stay finite on all-zero rows and zero
// importance, and are deterministic. Byte identity with llama-quantize --imatrix is checked in
// bench/ (no shared fixture has an importance matrix).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/quant_test_util.h"

using namespace kvasir;
using namespace kvasir::test;

namespace {

const std::vector<DType>& kquant_types() {
  static const std::vector<DType> types = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K};
  return types;
}

std::vector<uint8_t> quantize_weighted(DType t, const std::vector<float>& x, const float* imp) {
  std::vector<uint8_t> out(row_bytes(t, int64_t(x.size())));
  kernels::weighted_quantizer(t)(x.data(), out.data(), int64_t(x.size()), imp);
  return out;
}

bool all_finite(const std::vector<float>& v) {
  for (float f : v)
    if (!std::isfinite(f)) return false;
  return true;
}

double weighted_sq_error(const std::vector<float>& x, const std::vector<float>& back,
                         const std::vector<float>& imp) {
  double e = 0;
  for (size_t j = 0; j < x.size(); ++j) e += imp[j] * std::pow(double(back[j]) - x[j], 2);
  return e;
}

class WeightedKQuant : public ::testing::TestWithParam<DType> {};

// On random rows with log-normal importance (a few columns matter much more), the weighted
// quantizer's importance-weighted squared error, summed over the rows, is well below the plain
// quantizer's. Measured weighted / plain ratios: Q2_K 0.39, Q3_K 0.62, Q4_K 0.57, Q5_K 0.62,
// Q6_K 0.75 (Q6_K only weights its sub-block scale search); each bound leaves about 0.1 of margin.
double max_error_ratio(DType t) {
  switch (t) {
    case DType::Q2_K: return 0.5;
    case DType::Q4_K: return 0.7;
    case DType::Q6_K: return 0.85;
    default: return 0.75;  // Q3_K, Q5_K
  }
}

TEST_P(WeightedKQuant, CutsTheImportanceWeightedError) {
  const DType t = GetParam();
  ASSERT_NE(kernels::weighted_quantizer(t), nullptr);
  const int64_t n = 1024, rows = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> imp(static_cast<size_t>(n));
  for (auto& v : imp) v = std::exp(2.f * normal(rng));
  double plain_err = 0, weighted_err = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = random_row(n, uint32_t(100 + r));
    const std::vector<float> plain = dequantize(t, quantize(t, x).data(), n);
    const std::vector<float> weighted = dequantize(t, quantize_weighted(t, x, imp.data()).data(), n);
    ASSERT_TRUE(all_finite(weighted)) << "row " << r;
    plain_err += weighted_sq_error(x, plain, imp);
    weighted_err += weighted_sq_error(x, weighted, imp);
  }
  EXPECT_LT(weighted_err, max_error_ratio(t) * plain_err) << dtype_name(t) << ": ratio " << weighted_err / plain_err;
}

// An all-zero row decodes to zeros; zero importance (everywhere, or on half the columns) and
// all-zero rows give finite values, never NaN.
TEST_P(WeightedKQuant, ZeroRowsAndZeroImportanceStayFinite) {
  const DType t = GetParam();
  const int64_t n = 512;
  const std::vector<float> zeros(static_cast<size_t>(n), 0.f), x = random_row(n, 5);
  const std::vector<float> ones(static_cast<size_t>(n), 1.f), none(static_cast<size_t>(n), 0.f);
  std::vector<float> half(static_cast<size_t>(n), 0.f);
  for (int64_t j = 0; j < n; j += 2) half[size_t(j)] = 3.f;
  std::vector<float> first_half(static_cast<size_t>(n), 0.f);
  for (int64_t j = 0; j < n / 2; ++j) first_half[size_t(j)] = 1.f;

  const std::vector<float> back_zero = dequantize(t, quantize_weighted(t, zeros, ones.data()).data(), n);
  for (float v : back_zero) ASSERT_EQ(v, 0.f) << dtype_name(t);
  const std::vector<const std::vector<float>*> imps = {&ones, &none, &half, &first_half};
  for (const std::vector<float>* imp : imps) {
    EXPECT_TRUE(all_finite(dequantize(t, quantize_weighted(t, zeros, imp->data()).data(), n))) << dtype_name(t);
    EXPECT_TRUE(all_finite(dequantize(t, quantize_weighted(t, x, imp->data()).data(), n))) << dtype_name(t);
  }
}

// With all-equal importance the result depends only on the input: two calls (the second on a
// copy at another address) give the same bytes, and those decode close to the input.
TEST_P(WeightedKQuant, DeterministicWithEqualImportance) {
  const DType t = GetParam();
  const int64_t n = 768;
  const std::vector<float> x = random_row(n, 9), imp(static_cast<size_t>(n), 0.5f);
  const std::vector<uint8_t> a = quantize_weighted(t, x, imp.data());
  std::vector<float> copy(x.size() + 1);
  std::copy(x.begin(), x.end(), copy.begin() + 1);
  std::vector<uint8_t> b(a.size());
  kernels::weighted_quantizer(t)(copy.data() + 1, b.data(), n, imp.data());
  EXPECT_EQ(a, b) << dtype_name(t);
  EXPECT_EQ(a, quantize_weighted(t, x, imp.data())) << dtype_name(t);
  const std::vector<float> back = dequantize(t, a.data(), n);
  double err = 0, norm = 0;
  for (int64_t j = 0; j < n; ++j) {
    err += std::pow(double(back[size_t(j)]) - x[size_t(j)], 2);
    norm += double(x[size_t(j)]) * x[size_t(j)];
  }
  EXPECT_LT(err, 0.15 * norm) << dtype_name(t);  // measured: Q2_K, the coarsest, 0.08
}

INSTANTIATE_TEST_SUITE_P(Types, WeightedKQuant, ::testing::ValuesIn(kquant_types()), type_param_name);

}  // namespace
