// Every backward pass against central finite differences of its forward, on random inputs at
// awkward sizes: L = Σ r ⊙ f(x) for a random r, so dL/dy = r, and each analytic gradient must match
// (L(x + h e_i) - L(x - h e_i)) / 2h. Tolerance: 2e-3 of the gradient's scale (the forwards run in
// float; h = 1e-2 balances rounding against the O(h²) truncation of these smooth functions). Also
// the optimizer: AdamW's first step against its closed form, clipping, the schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "compress/grad.h"
#include "kernels/ops.h"

namespace kvasir::compress::grad {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Checks grad (analytic, dL/dx) against finite differences of L(x).
void expect_gradient(std::vector<float>& x, const std::vector<float>& grad, const std::function<double()>& loss,
                     const char* what) {
  double scale = 1e-6;
  for (float g : grad) scale = std::max(scale, double(std::fabs(g)));
  const float h = 1e-2f;
  for (size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double fd = (up - down) / (2.0 * h);
    ASSERT_NEAR(grad[i], fd, 2e-3 * scale + 1e-5) << what << " element " << i;
  }
}

double weighted_sum(const std::vector<float>& y, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += double(y[i]) * r[i];
  return s;
}

TEST(Grad, LinearBackwardMatchesFiniteDifferences) {
  const int64_t T = 3, n_in = 13, n_out = 7;
  auto x = randn(size_t(T * n_in), 1), w = randn(size_t(n_out * n_in), 2, 0.3f), r = randn(size_t(T * n_out), 3);
  std::vector<float> y(size_t(T * n_out)), dx(x.size()), dw(w.size(), 0.f);
  auto loss = [&] {
    linear(x.data(), w.data(), T, n_in, n_out, y.data());
    return weighted_sum(y, r);
  };
  ThreadPool pool(2);
  linear_backward(x.data(), w.data(), r.data(), T, n_in, n_out, dx.data(), dw.data(), &pool);
  expect_gradient(x, dx, loss, "dx");
  expect_gradient(w, dw, loss, "dW");
  // dW accumulates.
  std::vector<float> twice(w.size(), 0.f);
  linear_backward(x.data(), w.data(), r.data(), T, n_in, n_out, nullptr, twice.data());
  linear_backward(x.data(), w.data(), r.data(), T, n_in, n_out, nullptr, twice.data());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(twice[i], 2 * dw[i], 1e-5f * (1 + std::fabs(dw[i])));
}

TEST(Grad, RmsNormBackwardMatchesFiniteDifferences) {
  const int64_t n = 19;
  auto x = randn(size_t(n), 4), w = randn(size_t(n), 5), r = randn(size_t(n), 6);
  std::vector<float> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n)), dw(static_cast<size_t>(n), 0.f);
  const float eps = 1e-6f;
  auto loss = [&] {
    kernels::rms_norm(x.data(), w.data(), n, eps, y.data());
    return weighted_sum(y, r);
  };
  rms_norm_backward(x.data(), w.data(), r.data(), n, eps, dx.data(), dw.data());
  expect_gradient(x, dx, loss, "dx");
  expect_gradient(w, dw, loss, "dw");
}

TEST(Grad, GatedActivationsBackwardMatchFiniteDifferences) {
  const int64_t n = 23;
  auto g = randn(size_t(n), 7, 2.f), u = randn(size_t(n), 8), r = randn(size_t(n), 9);
  std::vector<float> y(static_cast<size_t>(n)), dg(static_cast<size_t>(n)), du(static_cast<size_t>(n));
  for (int act = 0; act < 2; ++act) {
    auto loss = [&] {
      (act ? kernels::silu_mul : kernels::gelu_tanh_mul)(g.data(), u.data(), n, y.data());
      return weighted_sum(y, r);
    };
    (act ? silu_mul_backward : gelu_tanh_mul_backward)(g.data(), u.data(), r.data(), n, dg.data(), du.data());
    expect_gradient(g, dg, loss, act ? "silu dg" : "gelu dg");
    expect_gradient(u, du, loss, act ? "silu du" : "gelu du");
  }
}

TEST(Grad, DistillationLossesMatchFiniteDifferences) {
  const int64_t n = 17;
  auto z = randn(size_t(n), 10, 2.f);
  const auto teacher = randn(size_t(n), 11, 2.f);
  std::vector<float> d(static_cast<size_t>(n)), scratch(static_cast<size_t>(n));
  const LossOptions cases[] = {{.ce_weight = 0.0, .temperature = 1.0},
                               {.ce_weight = 0.0, .temperature = 2.5},
                               {.ce_weight = 0.3, .temperature = 2.0, .target = 5},
                               {.ce_weight = 1.0, .target = 3},
                               {.ce_weight = 0.2, .tvd = true, .target = 1}};
  for (const LossOptions& o : cases) {
    distill_loss(z, teacher, o, d);
    expect_gradient(z, d, [&] { return distill_loss(z, teacher, o, scratch).loss; }, o.tvd ? "tvd" : "kl/ce");
  }
  // The reported parts: KL and TVD are 0 against itself and positive otherwise; TVD <= 1.
  auto same = distill_loss(teacher, teacher, {}, d);
  EXPECT_NEAR(same.kl, 0.0, 1e-12);
  EXPECT_NEAR(same.tvd, 0.0, 1e-12);
  for (float g : d) EXPECT_NEAR(g, 0.f, 1e-7f);
  auto diff = distill_loss(z, teacher, {}, d);
  EXPECT_GT(diff.kl, 0.0);
  EXPECT_GT(diff.tvd, 0.0);
  EXPECT_LE(diff.tvd, 1.0);
}

TEST(Grad, AdamWClippingAndSchedule) {
  std::vector<float> p = {1.f, -2.f, 0.5f}, g = {0.1f, -0.2f, 0.f}, m(3, 0.f), v(3, 0.f);
  const AdamW opt{.lr = 0.01, .weight_decay = 0.1};
  opt.step(p, g, m, v, 1);
  // First step: m̂ = g, v̂ = g², so the update is lr (sign(g) · |g| / (|g| + eps) + wd · p).
  EXPECT_NEAR(p[0], 1.f - 0.01f * (1.f + 0.1f * 1.f), 1e-6f);
  EXPECT_NEAR(p[1], -2.f - 0.01f * (-1.f + 0.1f * -2.f), 1e-6f);
  EXPECT_NEAR(p[2], 0.5f - 0.01f * (0.1f * 0.5f), 1e-6f);
  std::vector<float> a = {3.f, 0.f}, b = {4.f};
  std::vector<std::span<float>> gs = {a, b};
  EXPECT_DOUBLE_EQ(clip_grad_norm(gs, 1.0), 5.0);
  EXPECT_NEAR(a[0], 0.6f, 1e-6f);
  EXPECT_NEAR(b[0], 0.8f, 1e-6f);
  EXPECT_NEAR(clip_grad_norm(gs, 10.0), 1.0, 1e-6);  // under the bound: unchanged
  EXPECT_NEAR(a[0], 0.6f, 1e-6f);
  EXPECT_NEAR(lr_schedule(0, 100, 10), 0.1, 1e-12);
  EXPECT_NEAR(lr_schedule(9, 100, 10), 1.0, 1e-12);
  EXPECT_NEAR(lr_schedule(10, 100, 10), 1.0, 1e-12);
  EXPECT_NEAR(lr_schedule(100, 100, 10, 0.1), 0.1, 1e-12);
  EXPECT_GT(lr_schedule(40, 100, 10), lr_schedule(60, 100, 10));
}

}  // namespace
}  // namespace kvasir::compress::grad
