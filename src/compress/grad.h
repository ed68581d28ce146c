// The backward passes distillation trains with, written for exactly the parts it trains: F32
// linear maps, RMSNorm, the gated FFN activations, the distillation losses over a row of logits,
// and the optimizer (AdamW, gradient clipping, a warmup + cosine schedule). Pure functions over
// row-major F32 arrays (the products on the matmul kernels); each is checked against finite differences in tests/compress/grad_test.cpp.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"

namespace kvasir::compress::grad {

// y[T][n_out] = x[T][n_in] · Wᵀ, W [n_out][n_in].
void linear(const float* x, const float* w, int64_t T, int64_t n_in, int64_t n_out, float* y, ThreadPool* pool = nullptr);
// dx[T][n_in] = dy · W (written; null: not wanted), dW[n_out][n_in] += dyᵀ · x (accumulated; null: not wanted).
// w_t: Wᵀ [n_in][n_out] when the caller keeps one (a frozen matrix), else transposed here.
void linear_backward(const float* x, const float* w, const float* dy, int64_t T, int64_t n_in, int64_t n_out, float* dx,
                     float* dw, ThreadPool* pool = nullptr, const float* w_t = nullptr);

// y = x / sqrt(mean(x²) + eps) * w over one row of n: dx written, dw accumulated (either may be null; w null: no scale).
void rms_norm_backward(const float* x, const float* w, const float* dy, int64_t n, float eps, float* dx, float* dw);

// y = act(g) · u: dg and du written.
void gelu_tanh_mul_backward(const float* g, const float* u, const float* dy, int64_t n, float* dg, float* du);
void silu_mul_backward(const float* g, const float* u, const float* dy, int64_t n, float* dg, float* du);

// A distillation loss over one position (logits of one row):
//   ce_weight · CE(student, target) + (1 - ce_weight) · T² · KL(p_T^teacher || p_T^student)
// with p_T = softmax(z / T); with `tvd`, the total variation distance ½ Σ |p^teacher - p^student|
// at T = 1 replaces the KL term (a draft token's acceptance under speculative sampling is 1 - TVD).
struct LossOptions {
  double ce_weight = 0.0;    // λ
  double temperature = 1.0;  // T
  bool tvd = false;
  int32_t target = -1;       // the CE term's token (needed when ce_weight > 0)
};
struct LossParts {
  double loss = 0, kl = 0, tvd = 0, ce = 0;  // kl at T = 1 and tvd reported whatever the loss
};
// d_student: dLoss/dz_student (written).
LossParts distill_loss(std::span<const float> student, std::span<const float> teacher, const LossOptions& o,
                       std::span<float> d_student);

// AdamW (decoupled weight decay), one tensor's state.
struct AdamW {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  // One step at step number t >= 1 (bias correction), lr_scale times lr.
  void step(std::span<float> param, std::span<const float> g, std::span<float> m, std::span<float> v, int64_t t,
            double lr_scale = 1.0) const;
};

// Scales every gradient so that their global L2 norm is at most max_norm; returns the norm before.
double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm);

// Linear warmup over `warmup` steps, then cosine decay to min_ratio of the peak at `total`: a factor in [0, 1].
double lr_schedule(int64_t step, int64_t total, int64_t warmup, double min_ratio = 0.1);

}  // namespace kvasir::compress::grad
