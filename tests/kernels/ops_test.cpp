// Row kernels (ops.h) against plain scalar formulas in double, over lengths that exercise the
// 8-wide bodies and every tail length, plus determinism: the same element gives the same bits
// wherever it sits in a row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "kernels/vec_math.h"

using namespace kvasir::kernels;

namespace {

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  return v;
}

const int64_t kLengths[] = {1, 3, 7, 8, 9, 15, 16, 17, 64, 100, 2048, 2053};

double silu(double g) { return g / (1 + std::exp(-g)); }
double gelu(double g) { return 0.5 * g * (1 + std::tanh(0.7978845608028654 * g * (1 + 0.044715 * g * g))); }

TEST(Ops, Exp1MatchesStdExp) {
  for (float x = -87.f; x <= 88.f; x += 0.0173f) {
    const double want = std::exp(double(x));
    EXPECT_NEAR(exp1(x), want, 3e-7 * want) << x;
  }
  EXPECT_EQ(exp1(0.f), 1.f);
  EXPECT_GT(exp1(-1000.f), 0.f);  // clamped, never 0 or NaN
  EXPECT_TRUE(std::isfinite(exp1(1000.f)));
}

TEST(Ops, ActivationsMatchScalarFormulas) {
  for (int64_t n : kLengths) {
    const auto g = randn(n, uint32_t(n), 4.f), u = randn(n, uint32_t(n) + 1);
    std::vector<float> s(static_cast<size_t>(n)), e(s.size());
    silu_mul(g.data(), u.data(), n, s.data());
    gelu_tanh_mul(g.data(), u.data(), n, e.data());
    for (int64_t i = 0; i < n; ++i) {
      const double ws = silu(g[size_t(i)]) * u[size_t(i)], wg = gelu(g[size_t(i)]) * u[size_t(i)];
      EXPECT_NEAR(s[size_t(i)], ws, 1e-6 * std::fabs(ws) + 1e-7) << "silu n " << n << " i " << i;
      // 1 + tanh cancels for negative g (as in any float evaluation): allow ulps of 1 times |g u|.
      const double gu = std::fabs(double(g[size_t(i)]) * u[size_t(i)]);
      EXPECT_NEAR(e[size_t(i)], wg, 1e-6 * std::fabs(wg) + 3e-7 * gu) << "gelu n " << n << " i " << i;
    }
  }
}

TEST(Ops, SoftcapMatchesTanh) {
  for (int64_t n : kLengths) {
    auto x = randn(n, 7 + uint32_t(n), 20.f);
    const auto orig = x;
    softcap_inplace(x.data(), n, 30.f);
    for (int64_t i = 0; i < n; ++i) {
      const double want = 30.0 * std::tanh(double(orig[size_t(i)]) / 30.0);
      EXPECT_NEAR(x[size_t(i)], want, 1e-6 * std::fabs(want) + 1e-6) << "n " << n << " i " << i;
    }
  }
}

// A softmax's normalizer against its scalar twin in double (relative 1e-6: exp1's error), for
// every tail length and a head-sized row; the shift makes the maximum's term exactly 1.
TEST(Ops, ExpSumMatchesDouble) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(5), int64_t(8), int64_t(13), int64_t(2053), int64_t(8192)}) {
    const auto x = randn(n, 31 + uint32_t(n), 3.f);
    const float shift = n ? *std::max_element(x.begin(), x.end()) : 0.f;
    double want = 0;
    for (float v : x) want += std::exp(double(v) - double(shift));
    EXPECT_NEAR(exp_sum(x.data(), n, shift), want, 1e-6 * want + 1e-12) << "n " << n;
  }
  const float one[] = {2.5f};
  EXPECT_EQ(exp_sum(one, 1, 2.5f), 1.0);
}

TEST(Ops, RmsNormMatchesDouble) {
  for (int64_t n : kLengths) {
    const auto x = randn(n, 11 + uint32_t(n)), w = randn(n, 12 + uint32_t(n));
    std::vector<float> out(static_cast<size_t>(n));
    rms_norm(x.data(), w.data(), n, 1e-6f, out.data());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double scale = 1 / std::sqrt(ss / double(n) + 1e-6);
    for (int64_t i = 0; i < n; ++i) {
      const double want = x[size_t(i)] * scale * w[size_t(i)];
      EXPECT_NEAR(out[size_t(i)], want, 2e-6 * std::fabs(want) + 1e-7) << "n " << n << " i " << i;
    }
  }
}

TEST(Ops, RopeMatchesRotation) {
  for (RopeMode mode : {RopeMode::Normal, RopeMode::Neox}) {
    const int64_t hd = 64, heads = 3;
    const RopeParams p{mode, 48, 10000.f, 1.f, nullptr};
    for (int64_t pos : {0, 1, 17, 1000}) {
      auto x = randn(heads * hd, uint32_t(pos) + 3);
      const auto orig = x;
      rope(x.data(), heads, hd, pos, p);
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < 24; ++i) {
          const double theta = double(pos) * std::pow(10000.0, -2.0 * double(i) / 48.0);
          const int64_t a = h * hd + (mode == RopeMode::Normal ? 2 * i : i);
          const int64_t b = h * hd + (mode == RopeMode::Normal ? 2 * i + 1 : i + 24);
          const double x0 = orig[size_t(a)], x1 = orig[size_t(b)];
          EXPECT_NEAR(x[size_t(a)], x0 * std::cos(theta) - x1 * std::sin(theta), 2e-4 * (1 + double(pos) / 100));
          EXPECT_NEAR(x[size_t(b)], x0 * std::sin(theta) + x1 * std::cos(theta), 2e-4 * (1 + double(pos) / 100));
        }
      for (int64_t h = 0; h < heads; ++h)  // dims past rot_dims pass through
        for (int64_t d = 48; d < hd; ++d) EXPECT_EQ(x[size_t(h * hd + d)], orig[size_t(h * hd + d)]);
    }
  }
}

// An element's result does not depend on where in the row it sits (body lane or tail).
TEST(Ops, ElementwiseResultsIndependentOfPosition) {
  const auto g = randn(19, 5, 3.f), u = randn(19, 6);
  std::vector<float> full(19), part(19);
  silu_mul(g.data(), u.data(), 19, full.data());
  for (int64_t off = 1; off < 12; ++off) {
    silu_mul(g.data() + off, u.data() + off, 19 - off, part.data());
    for (int64_t i = off; i < 19; ++i) EXPECT_EQ(std::memcmp(&part[size_t(i - off)], &full[size_t(i)], 4), 0) << off << " " << i;
  }
}

}  // namespace
