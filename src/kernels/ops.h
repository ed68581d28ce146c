// Elementwise and per-row kernels: pure functions on spans of floats, vectorized where AVX2 is
// compiled in. Each element goes through one fixed sequence of float operations (no path
// depends on the row length's alignment or the caller), so results are deterministic.
#pragma once
#include <cstdint>

namespace kvasir::kernels {

// out[i] = x[i] / rms(x) * w[i]; rms = sqrt(mean(x^2) + eps). w may be null (no scale).
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);

enum class RopeMode { Normal, Neox };  // Normal rotates (2i, 2i+1); Neox rotates (i, i + dim/2)

struct RopeParams {
  RopeMode mode = RopeMode::Normal;
  int64_t rot_dims = 0;               // rotated dims of each head (the rest pass through)
  float freq_base = 10000.f;
  float freq_scale = 1.f;             // linear scaling: positions multiplied by this
  const float* freq_factors = nullptr;  // per pair divisor (Llama 3 rope_freqs, LongRoPE), or null
  float mscale = 1.f;                 // multiplies cos and sin (LongRoPE's attention factor)
};

// Rotates n_heads heads of head_dim floats in place for position pos.
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const RopeParams& p);

// The cos/sin of every rotated pair at position pos (rot_dims / 2 each): computed once per row
// and shared by its Q and K heads with rope_apply (rope() = rope_angles + rope_apply).
void rope_angles(int64_t pos, const RopeParams& p, float* cos_out, float* sin_out);
void rope_apply(float* x, int64_t n_heads, int64_t head_dim, const RopeParams& p, const float* cos_in,
                const float* sin_in);

void silu_mul(const float* gate, const float* up, int64_t n, float* out);       // silu(g) * u
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);  // gelu(g) * u
void add_inplace(float* x, const float* y, int64_t n);
void scale_inplace(float* x, int64_t n, float s);
// x = cap * tanh(x / cap)
void softcap_inplace(float* x, int64_t n, float cap);
// Σ exp(x[i] - shift), a softmax's normalizer (shift >= every x[i] keeps each term <= 1). Summed
// in double; the order is fixed, so the result depends on x alone.
double exp_sum(const float* x, int64_t n, float shift);

}  // namespace kvasir::kernels
