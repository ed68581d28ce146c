// Quantized KV blocks (Q8_0, Q4_0, and Q4_0 with Hadamard-rotated K) read directly by the paged
// attention kernel: against the reference twin on exactly what the cache holds (the stored rows
// dequantized, rotated back) the result agrees to float noise (1e-5), against the unquantized K/V
// to what the type's rounding costs; and with outlier channels in K (what LLM keys have), the
// rotation cuts 4-bit K's error (the check fails without it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/quant/quant.h"

using namespace kvasir;
using namespace kvasir::kernels;

namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2, kHd = 64, kBlock = 16, kTokens = 70;

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num = std::max(num, double(std::fabs(a[i] - b[i]))), den = std::max(den, double(std::fabs(b[i])));
  return num / std::max(den, 1e-30);
}

// Orthonormal Walsh-Hadamard transform (its own inverse), the twin of the kernel's.
void hadamard(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b, x[j + h] = a - b;
      }
  for (int64_t i = 0; i < n; ++i) x[i] /= std::sqrt(float(n));
}

struct Result {
  double vs_held, vs_float;
};

Result run(DType type, bool rotate, float outlier, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t kv_dim = kKvHeads * kHd, blocks = (kTokens + kBlock - 1) / kBlock + 2;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const int64_t run = kBlock * kHd;
  std::vector<uint8_t> pool(row_bytes(type, 2 * blocks * kBlock * kv_dim));
  KvLayerView view{pool.data(), pool.data() + row_bytes(type, run), type, kBlock, kKvHeads, kHd, 2 * run, rotate};
  std::vector<float> k(size_t(kTokens * kv_dim)), v(k.size()), q(size_t(kHeads * kHd));
  for (size_t i = 0; i < k.size(); ++i) k[i] = nd(rng) * (i % kHd == 5 || i % kHd == 40 ? outlier : 1.f);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng);
  for (int64_t t = 0; t < kTokens; ++t) kv_store(view, table.data(), t, &k[size_t(t * kv_dim)], &v[size_t(t * kv_dim)]);
  // What the cache holds, read back: each stored row dequantized (and K rotated back).
  std::vector<float> k_held(k.size()), v_held(v.size());
  const auto* tr = quant_traits(type);
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t g = 0; g < kKvHeads; ++g) {
      const size_t at = row_bytes(type, (int64_t(table[size_t(t / kBlock)]) * kKvHeads + g) * 2 * run + t % kBlock * kHd);
      float* kr = &k_held[size_t(t * kv_dim + g * kHd)];
      tr->dequantize_row(pool.data() + at, kr, kHd);
      if (rotate) hadamard(kr, kHd);
      tr->dequantize_row(pool.data() + at + row_bytes(type, run), &v_held[size_t(t * kv_dim + g * kHd)], kHd);
    }
  const AttentionParams p{kHeads, 0, 1.f / std::sqrt(float(kHd)), 0.f};
  std::vector<float> scratch(size_t(attention_scratch_floats(view, p))), out(q.size()), held(q.size()), exact(q.size());
  Result r{0, 0};
  for (int64_t pos : {int64_t(0), int64_t(17), kTokens - 1}) {
    attention(q.data(), view, table.data(), pos, p, out.data(), scratch.data());
    attention_ref(q.data(), k_held.data(), v_held.data(), kKvHeads, kHd, pos, p, held.data());
    attention_ref(q.data(), k.data(), v.data(), kKvHeads, kHd, pos, p, exact.data());
    r.vs_held = std::max(r.vs_held, rel_error(out, held));
    r.vs_float = std::max(r.vs_float, rel_error(out, exact));
  }
  return r;
}

}  // namespace

TEST(KvQuantAttention, MatchesTheTwinOnWhatTheCacheHolds) {
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (bool rotate : {false, true}) {
      const Result r = run(t, rotate, 1.f, 3);
      EXPECT_LT(r.vs_held, 1e-5) << dtype_name(t) << (rotate ? " rotated" : "");
      EXPECT_LT(r.vs_float, t == DType::Q8_0 ? 0.02 : 0.25) << dtype_name(t) << (rotate ? " rotated" : "");
    }
}

TEST(KvQuantAttention, RotationCutsFourBitKeyErrorWithOutlierChannels) {
  double plain = 0, rotated = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    plain += run(DType::Q4_0, false, 12.f, seed).vs_float;
    rotated += run(DType::Q4_0, true, 12.f, seed).vs_float;
  }
  std::printf("Q4_0 K with outlier channels: error %.4f plain, %.4f rotated\n", plain / 4, rotated / 4);
  EXPECT_LT(rotated, 0.7 * plain);
}
