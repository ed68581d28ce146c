// Speculative verification as pure functions: the rule that makes speculative decoding lossless.
// A draft token x proposed with probability q(x) is accepted with probability min(1, p(x)/q(x))
// under the target distribution p; on rejection the token comes from normalize(max(0, p - q)).
// Whatever q is, the emitted token is distributed exactly as p.
//
// The engine's drafts are point masses (q one-hot at x): acceptance is then u < p(x) and the
// residual is p without x, renormalized. The engine realizes exactly that by drawing the
// position's token from p with a position-keyed uniform (Sampler::draw_at) and keeping x when it
// is that token, which also makes its output the output without speculation; this file is the
// general rule and its reference.
#pragma once
#include <cstdint>
#include <span>

namespace kvasir::spec {

// Whether to keep draft token x: u in [0, 1) uniform, p_x = p(x), q_x = q(x) > 0.
inline bool accept_draft(double p_x, double q_x, double u) { return q_x > 0 && u * q_x < p_x; }

// A token from normalize(max(0, p - q)) with u in [0, 1); walks ids in order. When the residual
// has no mass (p == q), a token from p.
int32_t sample_residual(std::span<const double> p, std::span<const double> q, double u);

// One draft position, end to end (accept, or resample from the residual): the token emitted and
// whether it was the draft. u_accept and u_residual are independent uniforms in [0, 1).
struct Verdict {
  bool accepted = false;
  int32_t token = 0;
};
Verdict verify(std::span<const double> p, std::span<const double> q, int32_t draft, double u_accept,
               double u_residual);

}  // namespace kvasir::spec
