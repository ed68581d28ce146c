#include "kernels/ops.h"

#include <cmath>

namespace kvasir::kernels {

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
  // Accumulate in double like ggml's reference so long rows don't lose precision.
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const float scale = 1.0f / std::sqrt(float(sum / double(n)) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const RopeParams& p) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / float(p.rot_dims));
  const int64_t half = p.rot_dims / 2;
  // The angle of pair i is pos * freq_scale * theta_scale^i, built by repeated multiplication.
  float theta = float(pos) * p.freq_scale;
  for (int64_t i = 0; i < half; ++i, theta *= theta_scale) {
    const float t = p.freq_factors ? theta / p.freq_factors[i] : theta;
    const float c = std::cos(t), s = std::sin(t);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const int64_t a = p.mode == RopeMode::Normal ? 2 * i : i;
      const int64_t b = p.mode == RopeMode::Normal ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float gelu = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kCoef * g * g)));
    out[i] = gelu * up[i];
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale_inplace(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void softcap_inplace(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

}  // namespace kvasir::kernels
