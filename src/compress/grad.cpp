#include "compress/grad.h"

#include <algorithm>
#include <cmath>

#include "kernels/matmul.h"

namespace kvasir::compress::grad {
namespace {

// [rows][cols] -> [cols][rows].
void transpose(const float* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = x[r * cols + c];
}

// y[r][o] = Σ_i x[r][i] · w[o][i] for r < rows, o < n_out (F32 weights: the matmul kernels, which
// convert nothing for F32 and split the outputs over the pool).
void matmul(const float* x, const float* w, int64_t rows, int64_t n_in, int64_t n_out, float* y, int64_t y_stride,
            ThreadPool* pool) {
  auto part = [&](int64_t b, int64_t e) { kernels::matmul_rows(DType::F32, w, n_in, b, e, x, rows, y, y_stride); };
  if (pool && n_out >= 64) pool->parallel_for(n_out, 32, [&](int64_t b, int64_t e, int) { part(b, e); });
  else part(0, n_out);
}

}  // namespace

void linear(const float* x, const float* w, int64_t T, int64_t n_in, int64_t n_out, float* y, ThreadPool* pool) {
  matmul(x, w, T, n_in, n_out, y, n_out, pool);
}

void linear_backward(const float* x, const float* w, const float* dy, int64_t T, int64_t n_in, int64_t n_out, float* dx,
                     float* dw, ThreadPool* pool, const float* w_t) {
  if (dx) {  // dx[t][i] = Σ_o dy[t][o] · W[o][i]: the product with Wᵀ
    std::vector<float> own;
    if (!w_t) {
      own.resize(size_t(n_in * n_out));
      transpose(w, n_out, n_in, own.data());
      w_t = own.data();
    }
    matmul(dy, w_t, T, n_out, n_in, dx, n_in, pool);
  }
  if (dw) {  // dW[o][i] += Σ_t dy[t][o] · x[t][i]: rows o of dyᵀ against the "weights" xᵀ
    std::vector<float> dy_t(size_t(n_out * T)), x_t(size_t(n_in * T)), g(size_t(n_out * n_in));
    transpose(dy, T, n_out, dy_t.data());
    transpose(x, T, n_in, x_t.data());
    matmul(dy_t.data(), x_t.data(), n_out, T, n_in, g.data(), n_in, pool);
    for (size_t i = 0; i < g.size(); ++i) dw[i] += g[i];
  }
}

void rms_norm_backward(const float* x, const float* w, const float* dy, int64_t n, float eps, float* dx, float* dw) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
  double proj = 0;  // mean of (dy ⊙ w) ⊙ x̂
  for (int64_t i = 0; i < n; ++i) proj += double(dy[i]) * (w ? w[i] : 1.f) * x[i] * inv;
  proj /= double(n);
  for (int64_t i = 0; i < n; ++i) {
    const double xhat = x[i] * inv;
    if (dx) dx[i] = float(inv * (double(dy[i]) * (w ? w[i] : 1.f) - xhat * proj));
    if (dw) dw[i] += float(dy[i] * xhat);
  }
}

void gelu_tanh_mul_backward(const float* g, const float* u, const float* dy, int64_t n, float* dg, float* du) {
  constexpr double k = 0.7978845608028654;  // sqrt(2 / π)
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i], a = k * (x + 0.044715 * x * x * x), th = std::tanh(a);
    const double gelu = 0.5 * x * (1 + th);
    const double d = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
    dg[i] = float(dy[i] * u[i] * d);
    du[i] = float(dy[i] * gelu);
  }
}

void silu_mul_backward(const float* g, const float* u, const float* dy, int64_t n, float* dg, float* du) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i], s = 1 / (1 + std::exp(-x));
    dg[i] = float(dy[i] * u[i] * s * (1 + x * (1 - s)));
    du[i] = float(dy[i] * x * s);
  }
}

namespace {

// softmax(z / t) in double.
std::vector<double> softmax(std::span<const float> z, double t) {
  double mx = -INFINITY;
  for (float v : z) mx = std::max(mx, double(v) / t);
  std::vector<double> p(z.size());
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp(double(z[i]) / t - mx);
  for (double& v : p) v /= sum;
  return p;
}

double kl(const std::vector<double>& p, const std::vector<double>& q) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) s += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
  return s;
}

}  // namespace

LossParts distill_loss(std::span<const float> student, std::span<const float> teacher, const LossOptions& o,
                       std::span<float> d) {
  const size_t n = student.size();
  const double lambda = o.ce_weight, T = o.temperature;
  const std::vector<double> q1 = softmax(student, 1.0), p1 = softmax(teacher, 1.0);
  LossParts r;
  r.kl = kl(p1, q1);
  std::vector<double> sign(n);
  double sq = 0;  // Σ sign_i q_i
  for (size_t i = 0; i < n; ++i) {
    r.tvd += 0.5 * std::fabs(p1[i] - q1[i]);
    sign[i] = q1[i] > p1[i] ? 1.0 : q1[i] < p1[i] ? -1.0 : 0.0;
    sq += sign[i] * q1[i];
  }
  std::vector<double> grad(n, 0.0);
  if (o.tvd) {
    r.loss += (1 - lambda) * r.tvd;
    for (size_t j = 0; j < n; ++j) grad[j] += (1 - lambda) * 0.5 * q1[j] * (sign[j] - sq);
  } else if (lambda < 1) {
    const std::vector<double> qt = T == 1.0 ? q1 : softmax(student, T), pt = T == 1.0 ? p1 : softmax(teacher, T);
    r.loss += (1 - lambda) * T * T * kl(pt, qt);
    for (size_t j = 0; j < n; ++j) grad[j] += (1 - lambda) * T * (qt[j] - pt[j]);
  }
  if (o.target >= 0 && size_t(o.target) < n) {
    r.ce = -std::log(std::max(q1[size_t(o.target)], 1e-300));
    if (lambda > 0) {
      r.loss += lambda * r.ce;
      for (size_t j = 0; j < n; ++j) grad[j] += lambda * (q1[j] - (j == size_t(o.target) ? 1.0 : 0.0));
    }
  }
  for (size_t j = 0; j < n; ++j) d[j] = float(grad[j]);
  return r;
}

void AdamW::step(std::span<float> param, std::span<const float> g, std::span<float> m, std::span<float> v, int64_t t,
                 double lr_scale) const {
  const double c1 = 1 - std::pow(beta1, double(t)), c2 = 1 - std::pow(beta2, double(t)), a = lr * lr_scale;
  for (size_t i = 0; i < param.size(); ++i) {
    m[i] = float(beta1 * m[i] + (1 - beta1) * g[i]);
    v[i] = float(beta2 * v[i] + (1 - beta2) * double(g[i]) * g[i]);
    const double update = (m[i] / c1) / (std::sqrt(v[i] / c2) + eps) + weight_decay * param[i];
    param[i] = float(param[i] - a * update);
  }
}

double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm) {
  double ss = 0;
  for (const auto& g : grads)
    for (float v : g) ss += double(v) * v;
  const double norm = std::sqrt(ss);
  if (norm > max_norm && norm > 0) {
    const float s = float(max_norm / norm);
    for (const auto& g : grads)
      for (float& v : g) v *= s;
  }
  return norm;
}

double lr_schedule(int64_t step, int64_t total, int64_t warmup, double min_ratio) {
  if (step < warmup) return double(step + 1) / double(warmup);
  const double progress = std::min(1.0, double(step - warmup) / double(std::max<int64_t>(1, total - warmup)));
  return min_ratio + (1 - min_ratio) * 0.5 * (1 + std::cos(M_PI * progress));
}

}  // namespace kvasir::compress::grad
