#include "kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace kvasir::kernels {
namespace {

// Softmax in id order (max, exp, one running sum), shared by the kernel and its twin so that
// both rank the same floats.
void softmax_into(const float* logits, int64_t n, float* p) {
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::exp(logits[i] - mx);
    sum += p[i];
  }
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) p[i] *= inv;
}

void finish(const float* p, int64_t k, bool renormalize, const int32_t* ids, float* weights) {
  float sum = 0.f;
  for (int64_t r = 0; r < k; ++r) {
    weights[r] = p[ids[r]];
    sum += weights[r];
  }
  if (!renormalize) return;
  for (int64_t r = 0; r < k; ++r) weights[r] /= sum;
}

}  // namespace

void moe_route(const float* logits, int64_t n_experts, int64_t k, bool renormalize, int32_t* ids, float* weights,
               float* scratch) {
  softmax_into(logits, n_experts, scratch);
  // k passes of an argmax that skips the chosen (k is small: 2-8 of up to a few hundred).
  for (int64_t r = 0; r < k; ++r) {
    int32_t best = -1;
    for (int64_t e = 0; e < n_experts; ++e) {
      if (std::find(ids, ids + r, int32_t(e)) != ids + r) continue;
      if (best < 0 || scratch[e] > scratch[best]) best = int32_t(e);
    }
    ids[r] = best;
  }
  finish(scratch, k, renormalize, ids, weights);
}

void moe_route_ref(const float* logits, int64_t n_experts, int64_t k, bool renormalize, int32_t* ids, float* weights) {
  std::vector<float> p(static_cast<size_t>(n_experts));
  softmax_into(logits, n_experts, p.data());
  std::vector<int32_t> rank(static_cast<size_t>(n_experts));
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  std::copy(rank.begin(), rank.begin() + k, ids);
  finish(p.data(), k, renormalize, ids, weights);
}

void moe_group(const int32_t* ids, int64_t n_slots, int64_t n_experts, int64_t* offsets, int32_t* order,
               int32_t* pos_of) {
  std::fill(offsets, offsets + n_experts + 1, 0);
  for (int64_t s = 0; s < n_slots; ++s) ++offsets[ids[s] + 1];
  for (int64_t e = 0; e < n_experts; ++e) offsets[e + 1] += offsets[e];
  // A counting sort: walking slots in order keeps them ascending within each expert.
  for (int64_t s = 0; s < n_slots; ++s) {
    const int64_t e = ids[s];
    int64_t at = offsets[e];
    // offsets[e] is advanced while placing and restored below.
    order[at] = int32_t(s);
    pos_of[s] = int32_t(at);
    offsets[e] = at + 1;
  }
  for (int64_t e = n_experts; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
}

}  // namespace kvasir::kernels
