// Each CUDA kernel against its CPU scalar twin at awkward shapes (row counts that are not a
// multiple of the kernels' tiles, several super-blocks per row, tiles of 1 to 17 rows).
// Skipped where no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "cuda/cuda_runner.h"
#include "cuda/kernel_check.h"
#include "kernels/ops.h"
#include "kernels/quant/quant.h"

using namespace kvasir;

namespace {

#define SKIP_WITHOUT_GPU()                                         \
  do {                                                             \
    std::string why;                                               \
    if (cuda::device_count(&why) == 0) GTEST_SKIP() << why;        \
  } while (0)

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Rows of n_in random weights quantized to `type` by the CPU reference quantizer.
std::vector<uint8_t> quantized_rows(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  const auto w = random_floats(size_t(n_in * n_out), seed, 0.05f);
  const size_t rb = row_bytes(type, n_in);
  std::vector<uint8_t> out(rb * size_t(n_out));
  const auto* tr = kernels::quant_traits(type);
  for (int64_t o = 0; o < n_out; ++o) tr->quantize_row(w.data() + o * n_in, out.data() + size_t(o) * rb, n_in);
  return out;
}

// The CPU scalar reference: activations converted by the reference quantizer, dotted by the
// reference vec_dot (integer sums exact, block scaling summed in double).
std::vector<float> matmul_ref(DType type, const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t T) {
  const auto* tr = kernels::quant_traits(type);
  const auto* at = kernels::quant_traits(tr->vec_dot_type);
  std::vector<uint8_t> act(row_bytes(tr->vec_dot_type, n_in));
  std::vector<float> y(size_t(T * n_out));
  const size_t rb = row_bytes(type, n_in);
  for (int64_t t = 0; t < T; ++t) {
    at->quantize_row(x + t * n_in, act.data(), n_in);
    for (int64_t o = 0; o < n_out; ++o) y[size_t(t * n_out + o)] = tr->vec_dot_ref(n_in, w + size_t(o) * rb, act.data());
  }
  return y;
}

struct MatmulCase {
  DType type;
  int64_t n_in;
};

// Each case at each unroll (units a thread has in flight): 1 is the default; 2 and 4 change the
// threads per row and the loads' grouping, never a thread's order of addition.
class CudaMatmul : public ::testing::TestWithParam<std::tuple<MatmulCase, int>> {};

// Tolerance: the integer sums are exact on both sides, so the results differ only in the order
// the per-unit float products are added (float on the device, double on the CPU): a few ulps of
// the row's magnitude. 2e-5 of the largest |y| of the row is ~100 ulps of slack.
TEST_P(CudaMatmul, MatchesScalarTwinAndIsBatchInvariant) {
  SKIP_WITHOUT_GPU();
  const auto [c, unroll] = GetParam();
  const auto [type, n_in] = c;
  const int64_t n_out = 37;
  const auto w = quantized_rows(type, n_in, n_out, 7);
  for (int64_t T : {1, 2, 3, 5, 9, 17}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const auto x = random_floats(size_t(T * n_in), 11 + uint32_t(T));
    auto y = cuda::matmul_on_device(type, w.data(), n_in, n_out, x.data(), T, unroll);
    ASSERT_TRUE(y.ok()) << y.error();
    const auto ref = matmul_ref(type, w.data(), n_in, n_out, x.data(), T);
    for (int64_t t = 0; t < T; ++t) {
      float mx = 0;
      for (int64_t o = 0; o < n_out; ++o) mx = std::max(mx, std::fabs(ref[size_t(t * n_out + o)]));
      for (int64_t o = 0; o < n_out; ++o)
        ASSERT_NEAR((*y)[size_t(t * n_out + o)], ref[size_t(t * n_out + o)], 2e-5f * mx + 1e-7f) << "row " << t << " out " << o;
      // The same row alone gives the same bits: tiles do not change a row's arithmetic.
      auto alone = cuda::matmul_on_device(type, w.data(), n_in, n_out, x.data() + t * n_in, 1, unroll);
      ASSERT_TRUE(alone.ok());
      for (int64_t o = 0; o < n_out; ++o) ASSERT_EQ((*alone)[size_t(o)], (*y)[size_t(t * n_out + o)]) << "row " << t;
    }
  }
}

// Row lengths from under one unit a thread to several chunks of 4 units with a ragged last one
// (Q4_0 at 32 x 300: 64 threads a row at unroll 4, 4.7 units each; Q4_K at 256 x 17: 32 threads,
// a chunk of 128 units and one of 8).
INSTANTIATE_TEST_SUITE_P(Types, CudaMatmul,
                         ::testing::Combine(::testing::Values(MatmulCase{DType::Q4_0, 32 * 7}, MatmulCase{DType::Q4_0, 32 * 300},
                                                              MatmulCase{DType::Q5_0, 32 * 9}, MatmulCase{DType::Q5_0, 32 * 150},
                                                              MatmulCase{DType::Q8_0, 32 * 11}, MatmulCase{DType::Q8_0, 32 * 130},
                                                              MatmulCase{DType::Q4_K, 256 * 3}, MatmulCase{DType::Q4_K, 256 * 17},
                                                              MatmulCase{DType::Q5_K, 256 * 5}, MatmulCase{DType::Q5_K, 256 * 19},
                                                              MatmulCase{DType::Q6_K, 256 * 3}, MatmulCase{DType::Q6_K, 256 * 17},
                                                              MatmulCase{DType::F16, 172}, MatmulCase{DType::F16, 4 * 530},
                                                              MatmulCase{DType::BF16, 260}, MatmulCase{DType::F32, 68}),
                                            ::testing::Values(1, 2, 4)),
                         [](const auto& info) {
                           const MatmulCase c = std::get<0>(info.param);
                           return std::string(dtype_name(c.type)) + "_" + std::to_string(c.n_in) + "_unroll" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Dequantization (the embedding gather) against the CPU reference: the same products, up to the
// device's fused multiply-adds (1e-6 of the row's magnitude).
TEST(CudaKernels, DequantizeMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (DType type : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F16,
                     DType::BF16, DType::F32}) {
    SCOPED_TRACE(std::string(dtype_name(type)));
    const int64_t n_in = 512, n_rows = 5;
    const auto w = quantized_rows(type, n_in, n_rows, 3);
    auto got = cuda::dequantize_on_device(type, w.data(), n_in, n_rows);
    ASSERT_TRUE(got.ok()) << got.error();
    std::vector<float> ref(size_t(n_in * n_rows));
    kernels::quant_traits(type)->dequantize_row(w.data(), ref.data(), n_in * n_rows);
    float mx = 0;
    for (float r : ref) mx = std::max(mx, std::fabs(r));
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR((*got)[i], ref[i], 1e-6f * mx) << i;
  }
}

// RMS norm: sums of squares in double on both sides; 1e-6 relative.
TEST(CudaKernels, RmsNormMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {8, 64, 640, 4097}) {
    const auto x = random_floats(size_t(3 * n), 5, 3.f);
    const auto w = random_floats(size_t(n), 6);
    auto got = cuda::rms_norm_on_device(x.data(), 3, n, w.data(), 1e-6f);
    ASSERT_TRUE(got.ok()) << got.error();
    std::vector<float> ref(size_t(3 * n));
    for (int r = 0; r < 3; ++r) kernels::rms_norm(x.data() + r * n, w.data(), n, 1e-6f, ref.data() + r * n);
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR((*got)[i], ref[i], 1e-6f * (std::fabs(ref[i]) + 1.f)) << n << " " << i;
  }
}

}  // namespace
