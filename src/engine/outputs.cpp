#include "engine/outputs.h"

#include <algorithm>
#include <cmath>

namespace kvasir::engine {

TokenLogprob logprobs_of(std::span<const float> logits, int32_t id, int32_t n_top, std::span<const int32_t> only) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  const float mine = logits[size_t(id)];
  double sum = 0;
  int32_t above = 0;
  for (float x : logits) {
    sum += std::exp(double(x - mx));
    above += x > mine;
  }
  const float log_z = mx + float(std::log(sum));
  TokenLogprob lp{id, mine - log_z, above + 1, {}};
  if (!only.empty()) {
    for (int32_t t : only) lp.top.push_back({t, logits[size_t(t)] - log_z});
  } else if (n_top > 0) {
    thread_local std::vector<int32_t> order;
    order.resize(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    const size_t k = std::min(size_t(n_top), order.size());
    std::partial_sort(order.begin(), order.begin() + ptrdiff_t(k), order.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    for (size_t i = 0; i < k; ++i) lp.top.push_back({order[i], logits[size_t(order[i])] - log_z});
  }
  return lp;
}

void EmbeddingPool::add(const float* rows, int32_t n, int64_t n_embd) {
  if (sum_.empty()) sum_.assign(size_t(n_embd), 0.0);
  for (int32_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < n_embd; ++j) sum_[size_t(j)] += double(rows[r * n_embd + j]);
  n_pooled_ += n;
}

std::vector<float> EmbeddingPool::unit_mean() const {
  double norm = 0;
  for (double v : sum_) norm += v * v;
  norm = std::sqrt(norm);
  std::vector<float> out(sum_.size());
  for (size_t j = 0; j < out.size(); ++j) out[j] = norm > 0 ? float(sum_[j] / norm) : 0.f;
  return out;
}

}  // namespace kvasir::engine
