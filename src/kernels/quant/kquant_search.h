// The scale searches of ggml's k-quant reference quantizers (internal). Same arithmetic, in the
// same order, so the chosen scales and quants match ggml bit for bit.
#pragma once
#include <cstdint>

namespace kvasir::kernels::ref {

// Symmetric quants in [-nmax, nmax-1] (stored +nmax in L): start from the scale that maps the
// signed extreme to -nmax, then try 18 nearby scales, keeping the least x^2-weighted error
// (ggml's make_qx_quants with rmse_type 1; `weights` replaces x^2 when given). Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* weights = nullptr);

// Q3_K's variant: one start scale, then up to five rounds of moving single quants while that
// lowers the x^2-weighted error (ggml's make_q3_quants with do_rmse). Returns the scale.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);

// Asymmetric quants in [0, nmax] with a minimum: x ~= scale * L + min (min <= 0). Tries
// nstep+1 scales around nmax/(max-min), solving the weighted least squares for scale and min
// at each (ggml's make_qkx2_quants). Returns the scale and writes -min to *neg_min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* neg_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad);

// Non-negative quants in [0, nmax] with no minimum, under explicit weights (the sub-block scales
// and mins of the importance-weighted Q2_K, Q4_K, Q5_K against their super-block scale): the
// scale with the least weighted error among nmax/max and 8 nearby ones, then up to five rounds of
// moving single quants while that lowers the error (ggml's make_qp_quants). Returns the scale.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* weights);

}  // namespace kvasir::kernels::ref
