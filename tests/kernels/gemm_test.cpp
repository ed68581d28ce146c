// Matmul tiles: the SIMD kernels (direct, packed, float) against the scalar twin gemm_ref, and
// batch invariance of matmul_rows. Both are BITWISE: the contract in kernels/quant/gemm.h fixes
// every float operation of an output, so any difference is a bug, not rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/matmul.h"
#include "kernels/quant/gemm.h"
#include "kernels/quant_test_util.h"

using namespace kvasir;
using namespace kvasir::test;

namespace {

// n_rows weight rows (random values, or random bytes with finite scales) and activation rows.
struct Operands {
  std::vector<uint8_t> w, a;
  size_t w_row = 0, a_row = 0;
};

// Byte offsets of the fp16 scale fields of one block (see vec_dot_test's RandomWeightBytes).
std::vector<size_t> half_fields(DType t) {
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    case DType::F32: case DType::F16: case DType::BF16: return {};
    default: return {0};
  }
}

Operands make(DType t, int64_t n, int64_t cols, int64_t rows, uint32_t seed, bool random_bytes) {
  const DType at = kernels::quant_traits(t)->vec_dot_type;
  Operands o;
  o.w_row = row_bytes(t, n);
  o.a_row = row_bytes(at, n);
  std::mt19937 rng(seed);
  for (int64_t c = 0; c < cols; ++c) {
    std::vector<uint8_t> q;
    if (random_bytes && block_size(t) > 1) {
      q.resize(o.w_row);
      for (auto& b : q) b = uint8_t(rng());
      std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
      const size_t bb = dtype_info(t).block_bytes;
      for (size_t b = 0; b < q.size() / bb; ++b)
        for (size_t off : half_fields(t)) {
          const uint16_t h = f32_to_fp16(scale(rng));
          std::memcpy(q.data() + b * bb + off, &h, 2);
        }
    } else {
      q = quantize(t, random_row(n, seed * 31 + uint32_t(c)));
    }
    o.w.insert(o.w.end(), q.begin(), q.end());
  }
  for (int64_t r = 0; r < rows; ++r) {
    const auto q = quantize(at, random_row(n, seed * 77 + uint32_t(r) + 5000), /*fast=*/true);
    o.a.insert(o.a.end(), q.begin(), q.end());
  }
  return o;
}

std::vector<int64_t> lengths(DType t) {
  if (block_size(t) == 1) return {1, 7, 8, 9, 33, 100, 256, 1000};
  if (block_size(t) == 32) return {32, 96, 224, 1024};
  return {256, 768, 2048};
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

class Gemm : public ::testing::TestWithParam<DType> {};

TEST_P(Gemm, SimdMatchesScalarTwinBitwise) {
  const DType t = GetParam();
  if (!kernels::gemm_has_simd(t)) GTEST_SKIP() << "no SIMD tiles compiled in";
  for (int64_t n : lengths(t)) {
    for (auto [cols, rows] : {std::pair<int64_t, int64_t>{1, 1}, {8, 1}, {9, 2}, {17, 3}, {8, 4}, {13, 5}, {24, 9}, {3, 17}}) {
      for (bool random_bytes : {false, true}) {
        const Operands o = make(t, n, cols, rows, uint32_t(n * 7 + cols * 3 + rows), random_bytes);
        const int64_t ys = cols + 2;
        std::vector<float> want(size_t(rows * ys), -1.f), got(size_t(rows * ys), -1.f);
        kernels::GemmTile tile{.wtype = t, .n = n, .w = o.w.data(), .w_stride = o.w_row, .n_cols = cols,
                               .a = o.a.data(), .a_stride = o.a_row, .n_rows = rows, .y = want.data(), .y_stride = ys};
        kernels::gemm_ref(tile);
        std::vector<uint8_t> scratch(kernels::gemm_scratch_bytes(t, n, rows) + 64);
        void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
        tile.y = got.data();
        kernels::gemm_simd(tile, aligned);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < ys; ++c) {
            const size_t i = size_t(r * ys + c);
            ASSERT_TRUE(same_bits(got[i], want[i])) << "n " << n << " cols " << cols << " rows " << rows << " r " << r
                                                    << " c " << c << " bytes " << random_bytes << ": " << got[i]
                                                    << " vs " << want[i];
          }
      }
    }
  }
}

// The scalar twin is the contract; it must also be a correct dot product.
TEST_P(Gemm, ScalarTwinMatchesVecDotReference) {
  const DType t = GetParam();
  const auto* tr = kernels::quant_traits(t);
  for (int64_t n : lengths(t)) {
    const Operands o = make(t, n, 3, 2, uint32_t(n), false);
    float y[6];
    kernels::gemm_ref({.wtype = t, .n = n, .w = o.w.data(), .w_stride = o.w_row, .n_cols = 3, .a = o.a.data(),
                       .a_stride = o.a_row, .n_rows = 2, .y = y, .y_stride = 3});
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) {
        const uint8_t* wr = o.w.data() + size_t(c) * o.w_row;
        const uint8_t* ar = o.a.data() + size_t(r) * o.a_row;
        const auto wd = dequantize(t, wr, n), ad = dequantize(tr->vec_dot_type, ar, n);
        const double tol = 2e-5 * abs_dot(wd, ad) + q8_1_sum_allowance(t, wr, ar, n);
        EXPECT_NEAR(y[r * 3 + c], tr->vec_dot_ref(n, wr, ar), tol) << "n " << n << " r " << r << " c " << c;
      }
  }
}

// matmul_rows: a row's outputs do not depend on the other rows of the batch, on the batch size
// (which picks direct or packed kernels) or on how the output range is split.
TEST_P(Gemm, MatmulRowsIsBatchInvariant) {
  const DType t = GetParam();
  const int64_t n = block_size(t) == 1 ? 200 : 2 * std::max<int64_t>(256, block_size(t));
  const int64_t n_out = 37, rows = 11;
  const Operands o = make(t, n, n_out, rows, 4242, false);
  std::vector<float> all(size_t(rows * n_out));
  kernels::matmul_rows(t, o.w.data(), n, 0, n_out, o.a.data(), rows, all.data(), n_out);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, n_out}, {0, 16}, {16, 37}, {5, 29}}) {
      std::vector<float> one(size_t(n_out), -1.f);
      kernels::matmul_rows(t, o.w.data(), n, b, e, o.a.data() + size_t(r) * o.a_row, 1, one.data(), n_out);
      for (int64_t c = b; c < e; ++c)
        ASSERT_TRUE(same_bits(one[size_t(c)], all[size_t(r * n_out + c)])) << "row " << r << " col " << c;
    }
    // Inside a smaller batch starting at this row.
    const int64_t sub = std::min<int64_t>(5, rows - r);
    std::vector<float> part(size_t(sub * n_out));
    kernels::matmul_rows(t, o.w.data(), n, 0, n_out, o.a.data() + size_t(r) * o.a_row, sub, part.data(), n_out);
    for (int64_t c = 0; c < n_out; ++c)
      ASSERT_TRUE(same_bits(part[size_t(c)], all[size_t(r * n_out + c)])) << "row " << r << " col " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Gemm, ::testing::ValuesIn(weight_types()), type_param_name);

}  // namespace

namespace {

// Weights repacked once for decode give bitwise the same outputs as the file's layout, for any
// output range (panels cut anywhere) and row count.
// BF16 follows vdpbf16ps (gemm.h): products that land below the normal range and denormal
// inputs count as zero. Tiny operands whose products are all denormal must give exactly 0 on
// every path, and a mix of tiny and ordinary values the scalar twin's bits.
TEST(GemmBf16, FlushesDenormalsLikeVdpbf16ps) {
  if (!kernels::gemm_has_simd(DType::BF16)) GTEST_SKIP() << "no SIMD tiles compiled in";
  const int64_t n = 96, cols = 5, rows = 3;  // three 32-element chunks, no tail
  auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return uint16_t(u >> 16); };
  std::mt19937 rng(5);
  for (bool mixed : {false, true}) {
    std::vector<uint16_t> w(size_t(cols * n)), a(size_t(rows * n));
    for (auto& v : w) v = bits(std::ldexp(1.f + float(rng() % 100) / 100, -70) * (rng() % 2 ? 1 : -1));
    for (size_t i = 0; i < a.size(); ++i) {
      float f = std::ldexp(1.f + float(rng() % 100) / 100, -60);  // products near 2^-130: denormal
      if (mixed && i % 7 == 0) f = float(rng() % 9) - 4;          // ordinary values
      if (i % 11 == 0) f = std::ldexp(1.f, -130);                 // a denormal input
      a[i] = bits(f);
    }
    kernels::GemmTile tile{.wtype = DType::BF16, .n = n, .w = reinterpret_cast<const uint8_t*>(w.data()),
                           .w_stride = size_t(n) * 2, .n_cols = cols, .a = reinterpret_cast<const uint8_t*>(a.data()),
                           .a_stride = size_t(n) * 2, .n_rows = rows, .y = nullptr, .y_stride = cols};
    std::vector<float> want(size_t(rows * cols)), got(size_t(rows * cols));
    tile.y = want.data();
    kernels::gemm_ref(tile);
    std::vector<uint8_t> scratch(kernels::gemm_scratch_bytes(DType::BF16, n, rows) + 64);
    tile.y = got.data();
    kernels::gemm_simd(tile, scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64);
    for (size_t i = 0; i < got.size(); ++i) {
      if (!mixed) {
        EXPECT_EQ(std::fabs(want[i]), 0.f) << "tiny products are flushed: " << want[i];
      }
      EXPECT_TRUE(same_bits(got[i], want[i])) << (mixed ? "mixed " : "tiny ") << i << ": " << got[i] << " vs " << want[i];
    }
    // The same weights packed at load (one row, then all three) flush alike.
    kernels::PackedMatrix pm = kernels::pack_matrix_alloc(DType::BF16, n, cols);
    if (pm.empty()) continue;
    kernels::pack_panels(pm, w.data(), 0, (cols + 7) / 8);
    for (int64_t r : {int64_t(1), rows}) {
      std::vector<float> packed(size_t(r * cols), -1.f);
      kernels::matmul_rows_packed(pm, 0, cols, a.data(), r, packed.data(), cols);
      for (size_t i = 0; i < packed.size(); ++i)
        EXPECT_TRUE(same_bits(packed[i], want[i])) << "packed, " << r << " rows, " << i << ": " << packed[i] << " vs " << want[i];
    }
  }
}

TEST_P(Gemm, PackedMatrixMatchesFileLayoutBitwise) {
  const DType t = GetParam();
  // 13 rows: two full row groups of the float panels (6 rows on AVX2) and a rest.
  const int64_t n = 2 * std::max<int64_t>(512, block_size(t)), n_out = 77, rows = 13;
  kernels::PackedMatrix pm = kernels::pack_matrix_alloc(t, n, n_out);
  if (pm.empty()) GTEST_SKIP() << "no packed form";
  const Operands o = make(t, n, n_out, rows, 99, true);
  kernels::pack_panels(pm, o.w.data(), 0, (n_out + 7) / 8);
  std::vector<float> want(size_t(rows * n_out));
  kernels::matmul_rows(t, o.w.data(), n, 0, n_out, o.a.data(), rows, want.data(), n_out);
  // Every row count of one group (4, 6 or 8 rows by kernel and ISA), of a group and a rest, and
  // of prefill (13).
  for (int64_t r : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(5), int64_t(6), int64_t(7), rows}) {
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, n_out}, {3, 21}, {8, 16}, {36, 37}, {60, 70}, {40, 77}}) {
      std::vector<float> got(size_t(r * n_out), -1.f);
      kernels::matmul_rows_packed(pm, b, e, o.a.data(), r, got.data(), n_out);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t c = 0; c < n_out; ++c) {
          const float g = got[size_t(i * n_out + c)];
          if (c < b || c >= e) {
            ASSERT_EQ(g, -1.f) << "wrote outside [" << b << "," << e << ") at " << c;
            continue;
          }
          ASSERT_TRUE(same_bits(g, want[size_t(i * n_out + c)])) << "rows " << r << " row " << i << " col " << c;
        }
    }
  }
}

// Every code at its largest (all weight bytes 0xFF) against activation rows of +127 and -127:
// the packed kernels' integer sums must not overflow where the file-layout kernels' do not
// (Q5_0 without VNNI sums its int16 pairs in two runs of four for this).
TEST_P(Gemm, PackedMatrixSaturatedCodesMatchFileLayoutBitwise) {
  const DType t = GetParam();
  const int64_t n = 2 * std::max<int64_t>(256, block_size(t)), n_out = 16, rows = 2;
  if (block_size(t) == 1) GTEST_SKIP() << "float type";
  kernels::PackedMatrix pm = kernels::pack_matrix_alloc(t, n, n_out);
  if (pm.empty()) GTEST_SKIP() << "no packed form";
  std::vector<uint8_t> w(size_t(n_out) * row_bytes(t, n), 0xFF);
  const size_t bb = dtype_info(t).block_bytes;
  const uint16_t scale = f32_to_fp16(0.01f);
  for (size_t b = 0; b < w.size() / bb; ++b)
    for (size_t off : half_fields(t)) std::memcpy(w.data() + b * bb + off, &scale, 2);
  kernels::pack_panels(pm, w.data(), 0, (n_out + 7) / 8);
  const DType at = kernels::quant_traits(t)->vec_dot_type;
  std::vector<uint8_t> a = quantize(at, std::vector<float>(size_t(n), 1.f), /*fast=*/true);
  const std::vector<uint8_t> neg = quantize(at, std::vector<float>(size_t(n), -1.f), /*fast=*/true);
  a.insert(a.end(), neg.begin(), neg.end());
  std::vector<float> want(size_t(rows * n_out)), got(want.size());
  kernels::matmul_rows(t, w.data(), n, 0, n_out, a.data(), rows, want.data(), n_out);
  kernels::matmul_rows_packed(pm, 0, n_out, a.data(), rows, got.data(), n_out);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(same_bits(got[i], want[i])) << "output " << i << ": " << got[i] << " vs " << want[i];
}

}  // namespace
