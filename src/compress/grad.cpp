#include "compress/grad.h"

#include <algorithm>
#include <cmath>

namespace kvasir::compress::grad {
namespace {

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};  // eight lanes the compiler vectorizes; summed in one fixed order
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void over(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool && n > 1) pool->parallel_for(n, 1, [&](int64_t b, int64_t e, int) { fn(b, e); });
  else fn(0, n);
}

}  // namespace

void linear(const float* x, const float* w, int64_t T, int64_t n_in, int64_t n_out, float* y, ThreadPool* pool) {
  over(pool, n_out, [&](int64_t b, int64_t e) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = b; o < e; ++o) y[t * n_out + o] = dot(x + t * n_in, w + o * n_in, n_in);
  });
}

void linear_backward(const float* x, const float* w, const float* dy, int64_t T, int64_t n_in, int64_t n_out, float* dx,
                     float* dw, ThreadPool* pool) {
  if (dx)
    over(pool, T, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        float* row = dx + t * n_in;
        std::fill_n(row, n_in, 0.f);
        for (int64_t o = 0; o < n_out; ++o)
          if (const float g = dy[t * n_out + o]; g != 0.f) axpy(g, w + o * n_in, row, n_in);
      }
    });
  if (dw)
    over(pool, n_out, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        for (int64_t t = 0; t < T; ++t)
          if (const float g = dy[t * n_out + o]; g != 0.f) axpy(g, x + t * n_in, dw + o * n_in, n_in);
    });
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
