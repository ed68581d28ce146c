// Dot products: the scalar reference against a double dot of dequantized rows, and the
// installed (SIMD) vec_dot against its scalar twin, over awkward lengths and unaligned rows.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/fp16.h"

#include "kernels/quant/simd.h"
#include "kernels/quant_test_util.h"

using namespace kvasir;
using namespace kvasir::test;

namespace {

// Lengths in elements: 1, 3, 7, 17 and 64 blocks, and for the float types (block size 1) also
// lengths that are not multiples of the SIMD width.
std::vector<int64_t> lengths(DType t) {
  if (block_size(t) == 1) return {1, 3, 7, 17, 31, 64, 100, 257, 1000, 4096};
  std::vector<int64_t> v;
  for (int64_t blocks : {1, 3, 7, 17, 64}) v.push_back(blocks * block_size(t));
  return v;
}

struct Pair {
  std::vector<uint8_t> w, act;          // weight row, activation row (vec_dot_type)
  std::vector<float> w_deq, act_deq;    // what they decode to
};

Pair make_pair(DType t, int64_t n, uint32_t seed) {
  const DType at = kernels::quant_traits(t)->vec_dot_type;
  Pair p;
  p.w = quantize(t, random_row(n, seed));
  p.act = quantize(at, random_row(n, seed + 1000), /*fast=*/true);
  p.w_deq = dequantize(t, p.w.data(), n);
  p.act_deq = dequantize(at, p.act.data(), n);
  return p;
}

// A copy of `bytes` that is only as aligned as its element or block type requires (2 bytes for
// fp16-scaled blocks, 4 for F32 and Q8_K), never 32: GGUF rows are only block-aligned, so the
// kernels must not assume vector alignment.
struct Unaligned {
  Unaligned(const std::vector<uint8_t>& bytes, DType t) : buf(bytes.size() + 64) {
    offset = (t == DType::F32 || t == DType::Q8_K) ? 4 : 2;
    std::memcpy(ptr(), bytes.data(), bytes.size());
  }
  uint8_t* ptr() { return buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64 + offset; }
  std::vector<uint8_t> buf;
  size_t offset;
};

class VecDot : public ::testing::TestWithParam<DType> {};

// The reference computes exact integer block dots and sums the scaled blocks in double; a
// dequantized value is one to three float roundings away from its exact d*q (- dmin*m), so
// the two agree to a few 2^-24 of sum|w_i a_i|: 1e-5 of it leaves two orders of margin.
// For Q4_1/Q5_1 the activation's fp16 sum term adds q8_1_sum_allowance.
TEST_P(VecDot, ReferenceMatchesDequantizedDot) {
  const DType t = GetParam();
  const auto* tr = kernels::quant_traits(t);
  for (int64_t n : lengths(t)) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const Pair p = make_pair(t, n, seed * 7 + uint32_t(n));
      const double want = exact_dot(p.w_deq, p.act_deq);
      const double tol = 1e-5 * abs_dot(p.w_deq, p.act_deq) + q8_1_sum_allowance(t, p.w.data(), p.act.data(), n);
      EXPECT_NEAR(tr->vec_dot_ref(n, p.w.data(), p.act.data()), want, tol) << "n " << n << " seed " << seed;
    }
  }
}

// Both versions compute the same exact integer dots per block; they differ only in how the
// float per-block terms are summed (SIMD: float lanes, reference: double). With <= 64 blocks or
// <= 4096/32 float terms per lane, the float sum's worst case is ~128 * 2^-24 ~ 8e-6 of the
// sum of |terms|, which is within a small factor of sum|w_i a_i|: tolerance 2e-5 of it.
TEST_P(VecDot, SimdMatchesScalarTwin) {
  const DType t = GetParam();
  const auto* tr = kernels::quant_traits(t);
  for (int64_t n : lengths(t)) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const Pair p = make_pair(t, n, seed * 13 + uint32_t(n));
      Unaligned w(p.w, t), a(p.act, tr->vec_dot_type);
      const float want = tr->vec_dot_ref(n, p.w.data(), p.act.data());
      const float got = tr->vec_dot(n, w.ptr(), a.ptr());
      EXPECT_NEAR(got, want, 2e-5 * abs_dot(p.w_deq, p.act_deq)) << "n " << n << " seed " << seed;
    }
  }
}

// Extreme codes: every weight and activation at the end of its range (e.g. Q8 at -127/127,
// nibbles at 0/15) so integer intermediates in SIMD code are pushed to their limits.
TEST_P(VecDot, SaturatedCodesAgree) {
  const DType t = GetParam();
  const auto* tr = kernels::quant_traits(t);
  const int64_t n = block_size(t) == 1 ? 4096 : 8 * std::max<int64_t>(block_size(t), 256);
  for (int sign : {1, -1}) {
    std::vector<float> wx(static_cast<size_t>(n)), ax(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      wx[size_t(i)] = (i % 2 ? 1.f : -1.f) * 3.f;  // two values: every code at an extreme
      ax[size_t(i)] = sign * (i % 2 ? 1.f : -1.f) * 5.f;
    }
    const auto w = quantize(t, wx);
    const auto a = quantize(tr->vec_dot_type, ax, true);
    const auto wd = dequantize(t, w.data(), n), ad = dequantize(tr->vec_dot_type, a.data(), n);
    const double tol = 2e-5 * abs_dot(wd, ad) + q8_1_sum_allowance(t, w.data(), a.data(), n);
    EXPECT_NEAR(tr->vec_dot(n, w.data(), a.data()), exact_dot(wd, ad), tol) << "sign " << sign;
    EXPECT_NEAR(tr->vec_dot_ref(n, w.data(), a.data()), exact_dot(wd, ad), tol) << "sign " << sign;
  }
}

// Weight blocks of random bytes (only the fp16 scale fields made finite) reach codes and
// packed scales our quantizer rarely writes: Q6_K scale -128, 6-bit scales of 63, all-high
// nibbles, every qh pattern. Activations still come from the quantizer, whose quants stay in
// [-127, 127] as the kernels assume.
TEST_P(VecDot, RandomWeightBytesAgree) {
  const DType t = GetParam();
  if (block_size(t) == 1) GTEST_SKIP() << "float rows: covered by the random-value tests";
  const auto* tr = kernels::quant_traits(t);
  // Byte offsets of the fp16 scale fields within one block.
  std::vector<size_t> halves;
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: halves = {0, 2}; break;
    case DType::Q2_K: halves = {80, 82}; break;
    case DType::Q3_K: halves = {108}; break;
    case DType::Q6_K: halves = {208}; break;
    default: halves = {0}; break;
  }
  const size_t bb = dtype_info(t).block_bytes;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (int64_t blocks : {1, 3, 17}) {
    const int64_t n = blocks * block_size(t);
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<uint8_t> w(size_t(blocks) * bb);
      for (auto& b : w) b = uint8_t(rng());
      for (int64_t b = 0; b < blocks; ++b) {
        for (size_t off : halves) {
          const uint16_t h = f32_to_fp16(scale(rng));
          std::memcpy(w.data() + size_t(b) * bb + off, &h, 2);
        }
      }
      const auto act = quantize(tr->vec_dot_type, random_row(n, uint32_t(rep)), true);
      const auto wd = dequantize(t, w.data(), n), ad = dequantize(tr->vec_dot_type, act.data(), n);
      const double tol = 2e-5 * abs_dot(wd, ad) + q8_1_sum_allowance(t, w.data(), act.data(), n);
      const float ref = tr->vec_dot_ref(n, w.data(), act.data());
      EXPECT_NEAR(tr->vec_dot(n, w.data(), act.data()), ref, tol) << "blocks " << blocks << " rep " << rep;
      EXPECT_NEAR(ref, exact_dot(wd, ad), tol) << "blocks " << blocks << " rep " << rep;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, VecDot, ::testing::ValuesIn(weight_types()), type_param_name);

TEST(VecDotTypes, AsGgmlPairsThem) {
  auto vdt = [](DType t) { return kernels::quant_traits(t)->vec_dot_type; };
  EXPECT_EQ(vdt(DType::F32), DType::F32);
  EXPECT_EQ(vdt(DType::F16), DType::F16);
  EXPECT_EQ(vdt(DType::BF16), DType::BF16);
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0}) EXPECT_EQ(vdt(t), DType::Q8_0);
  for (DType t : {DType::Q4_1, DType::Q5_1}) EXPECT_EQ(vdt(t), DType::Q8_1);
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) EXPECT_EQ(vdt(t), DType::Q8_K);
  EXPECT_EQ(kernels::quant_traits(DType::Q8_K)->vec_dot, nullptr);
}

}  // namespace

namespace {

// A build with AVX2/FMA/F16C must install the SIMD kernels, not silently fall back.
TEST(VecDotTypes, SimdInstalledWhereCompiledIn) {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  EXPECT_STREQ(kernels::kernel_isa(),
               KVASIR_HAVE_VNNI ? "avx2+avx512+vnni" : KVASIR_HAVE_AVX512_FLOAT ? "avx2+avx512" : "avx2");
  for (DType t : weight_types()) {
    const auto* tr = kernels::quant_traits(t);
    EXPECT_NE(tr->vec_dot, tr->vec_dot_ref) << dtype_name(t);
  }
#else
  EXPECT_STREQ(kernels::kernel_isa(), "scalar");
#endif
}

}  // namespace
