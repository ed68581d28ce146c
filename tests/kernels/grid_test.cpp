// Block grids (kernels/quant/grid.h): for every type with one, the grid read from a block decodes
// each element exactly as the type's dequantizer does, reading and writing the quants is a byte
// round trip, written quants keep the scales, and nearest() picks the closest value of the grid.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant/grid.h"
#include "kernels/quant/quant.h"

using namespace kvasir;
using namespace kvasir::kernels;

namespace {

const DType kGridTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                            DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<float> random_block(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.3f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

}  // namespace

TEST(BlockGrid, DecodesAsTheDequantizerAndRoundTripsTheQuants) {
  std::mt19937 rng(3);
  for (DType t : kGridTypes) {
    ASSERT_TRUE(has_block_grid(t)) << dtype_name(t);
    const auto* tr = quant_traits(t);
    const int64_t n = dtype_info(t).block_size;
    for (int trial = 0; trial < 20; ++trial) {
      const auto x = random_block(n, rng);
      std::vector<uint8_t> block(dtype_info(t).block_bytes);
      tr->quantize_row(x.data(), block.data(), n);
      BlockGrid g;
      block_grid(t, block.data(), g);
      std::vector<int> q(static_cast<size_t>(n));
      block_quants(t, block.data(), q.data());
      std::vector<float> y(static_cast<size_t>(n));
      tr->dequantize_row(block.data(), y.data(), n);
      for (int j = 0; j < n; ++j) {
        ASSERT_GE(q[size_t(j)], g.qmin) << dtype_name(t);
        ASSERT_LE(q[size_t(j)], g.qmax) << dtype_name(t);
        ASSERT_EQ(g.value(j, q[size_t(j)]), y[size_t(j)]) << dtype_name(t) << " element " << j;  // bitwise
      }
      std::vector<uint8_t> again = block;
      set_block_quants(t, again.data(), q.data());
      ASSERT_EQ(again, block) << dtype_name(t);
      // Other quants, same scales: the block decodes to the grid's values for them.
      std::uniform_int_distribution<int> pick(g.qmin, g.qmax);
      for (auto& v : q) v = pick(rng);
      set_block_quants(t, again.data(), q.data());
      tr->dequantize_row(again.data(), y.data(), n);
      BlockGrid g2;
      block_grid(t, again.data(), g2);
      std::vector<int> back(static_cast<size_t>(n));
      block_quants(t, again.data(), back.data());
      EXPECT_EQ(back, q) << dtype_name(t);
      for (int j = 0; j < n; ++j) {
        ASSERT_EQ(g2.scale[j], g.scale[j]) << dtype_name(t);
        ASSERT_EQ(g2.offset[j], g.offset[j]) << dtype_name(t);
        ASSERT_EQ(g.value(j, q[size_t(j)]), y[size_t(j)]) << dtype_name(t);
      }
    }
  }
  EXPECT_FALSE(has_block_grid(DType::F16));
  EXPECT_FALSE(has_block_grid(DType::Q8_K));
}

TEST(BlockGrid, NearestIsTheClosestGridValue) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 2.f);
  for (DType t : kGridTypes) {
    const int64_t n = dtype_info(t).block_size;
    const auto x = random_block(n, rng);
    std::vector<uint8_t> block(dtype_info(t).block_bytes);
    quant_traits(t)->quantize_row(x.data(), block.data(), n);
    BlockGrid g;
    block_grid(t, block.data(), g);
    for (int j = 0; j < n; ++j) {
      const float v = normal(rng);  // also far outside the block's range: clamped
      const int q = g.nearest(j, v);
      float best = INFINITY;
      for (int c = g.qmin; c <= g.qmax; ++c) best = std::min(best, std::fabs(g.value(j, c) - v));
      EXPECT_NEAR(std::fabs(g.value(j, q) - v), best, 1e-6f * (1 + std::fabs(v))) << dtype_name(t) << " " << j;
    }
  }
}
