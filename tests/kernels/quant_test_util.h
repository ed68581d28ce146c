// Helpers shared by the quantization tests: seeded random rows, (de)quantize to vectors, and the
// list of weight types with their block sizes.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/quant.h"

namespace kvasir::test {

inline const std::vector<DType>& weight_types() {
  static const std::vector<DType> types = {
      DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
      DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  return types;
}

inline std::string type_param_name(const ::testing::TestParamInfo<DType>& i) {
  return std::string(dtype_name(i.param));
}

inline int64_t block_size(DType t) { return dtype_info(t).block_size; }

// Gaussian values (sigma 1) with a few outliers (x8) mixed in, as real weights have.
inline std::vector<float> random_row(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = scale * g(rng) * (pick(rng) == 0 ? 8.f : 1.f);
  return v;
}

inline std::vector<uint8_t> quantize(DType t, const std::vector<float>& x, bool fast = false) {
  const auto* tr = kernels::quant_traits(t);
  std::vector<uint8_t> out(row_bytes(t, int64_t(x.size())));
  (fast ? tr->quantize_row_fast : tr->quantize_row)(x.data(), out.data(), int64_t(x.size()));
  return out;
}

inline std::vector<float> dequantize(DType t, const uint8_t* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  kernels::quant_traits(t)->dequantize_row(data, out.data(), n);
  return out;
}

// Activation types whose blocks carry d*sum(q) in fp16 (Q8_1): the dot product uses that rounded
// sum for the weight-minimum term, so it differs from a dot of dequantized values by up to
// |m| * |s| * 2^-10 per block (d and s each rounded to fp16). Returns that allowance.
inline double q8_1_sum_allowance(DType wtype, const uint8_t* w, const uint8_t* a, int64_t n) {
  if (wtype != DType::Q4_1 && wtype != DType::Q5_1) return 0;
  const size_t wb = dtype_info(wtype).block_bytes;
  const auto* act = reinterpret_cast<const kernels::BlockQ8_1*>(a);
  double allowance = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    uint16_t m;  // Q4_1 and Q5_1 both start with d, m
    std::memcpy(&m, w + size_t(b) * wb + 2, 2);
    allowance += std::fabs(fp16_to_f32(m)) * std::fabs(fp16_to_f32(act[b].s)) * std::ldexp(1.0, -9);
  }
  return allowance;
}

// sum |w_i * a_i| of two float rows: the scale against which dot-product rounding is measured.
inline double abs_dot(const std::vector<float>& w, const std::vector<float>& a) {
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += std::fabs(double(w[i]) * a[i]);
  return s;
}

inline double exact_dot(const std::vector<float>& w, const std::vector<float>& a) {
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += double(w[i]) * a[i];
  return s;
}

}  // namespace kvasir::test
