#include "spec/verify.h"

#include <algorithm>

namespace kvasir::spec {

int32_t sample_residual(std::span<const double> p, std::span<const double> q, double u) {
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += std::max(0.0, p[i] - q[i]);
  const bool from_p = !(total > 0);
  if (from_p)
    for (double x : p) total += x;
  const double target = u * total;
  double acc = 0;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double w = from_p ? p[i] : std::max(0.0, p[i] - q[i]);
    if (w <= 0) continue;
    acc += w;
    last = int32_t(i);
    if (target < acc) return int32_t(i);
  }
  return last;  // rounding left target at the very end
}

Verdict verify(std::span<const double> p, std::span<const double> q, int32_t draft, double u_accept,
               double u_residual) {
  if (accept_draft(p[size_t(draft)], q[size_t(draft)], u_accept)) return {true, draft};
  return {false, sample_residual(p, q, u_residual)};
}

}  // namespace kvasir::spec
